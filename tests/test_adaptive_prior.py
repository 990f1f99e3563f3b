"""The default policy's prior (eviction/prior.py): at the first eviction it leaves
LRU for LFU only on evidence it would switch on (MARGIN and Z) from the later half of the replayed
history, and only when a replay at half the size does not favour LRU by PRIOR_VETO standard deviations.
One tune-grid cell (bench/policy_grid.py) per branch; round 8's prior (the whole history's lead at a
quarter of the size, MARGIN only) followed LFU in the first three, where LRU won (bench/RESULTS.md)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from scripts import ROOT, load_script

from radixkv import RadixCache
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import sim_config
from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.policies import LFU, LRU, EvictionPolicy
from radixkv.eviction.prior import replay
from radixkv.radix.shadow import ShadowTree
from test_adaptive import SESSIONS, _serve


@pytest.fixture(scope="module")
def grid() -> ModuleType:
    """bench/policy_grid.py, loaded once for the module's cells."""
    return load_script(ROOT / "bench" / "policy_grid.py")


@pytest.mark.parametrize(("cell", "share", "leader"), [
    ("seed:3021", 0.5, "lru"),  # the later lookups favour LFU (1.2 sd); the half-size replay LRU by 2.2 sd
    ("wl:agent:1:0", 0.5, "lru"),  # the later lookups favour LFU by MARGIN, at 0.13 sd only
    ("seed:3077", 0.25, "lru"),  # the whole history favours LFU, its later half LRU
    ("moon:12", 0.25, "lfu"),  # LFU on all counts (LFU wins this cell by 2.5 points)
    ("wl:tot:1:0", 0.25, "lfu"),
])
def test_the_prior_leaves_lru_on_late_confident_evidence_a_larger_replay_does_not_contradict(
        grid: ModuleType, cell: str, share: float, leader: str) -> None:
    reqs, page = grid.load(cell)
    longest = max(len(r.tokens) for r in reqs)
    cap = grid.capacity(share, build_segments(reqs, page).total_pages * page, longest, page)
    cache = RadixCache(sim_config(cap, page, "adaptive", longest))
    policy = cache.tree.policy
    assert isinstance(policy, Adaptive)
    for r in reqs:  # the bench lifecycle, up to the request whose insert made the first eviction
        m = cache.match_prefix(r.tokens[:r.prompt_len])
        cache.lock(m.node)
        cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
        cache.unlock(m.node)
        if policy._shadows:
            break
    assert policy._shadows and policy._history is None
    assert policy.leader == leader and policy.switches == (leader == "lfu")


@pytest.mark.parametrize("page_size", [1, 16])
def test_the_priors_replay_shares_the_real_leaves_keys_and_decides_as_copies_do(page_size: int) -> None:
    """The prior's replay hands its shadows the real leaves its history keeps: an insert's new leaf keeps the
    real leaf's key object, a lookup's match shares the edges of that leaf's path (radix/shadow.py `_share`).
    A share of the key bytes its shadows hold are then the real tree's own objects (before: none; here ~0.3 in the
    LRU shadow, ~0.75 in the LFU one: the rest spans edges the real tree split later, or a trimmed victim's
    head), with the same leads as shadows fed the plain keys."""
    reqs = SESSIONS["chat"]
    total = sum(len(r.tokens) for r in reqs)
    cache = RadixCache(sim_config(total, page_size, "adaptive", 4096))  # never evicts: the history is whole
    for r in reqs:
        _serve(cache, r)
    policy, real = cache.tree.policy, cache.tree
    assert isinstance(policy, Adaptive) and policy._history is not None
    made: list[ShadowTree] = []

    class Keeping:  # the real tree, keeping the shadows the replay makes
        shadow_keys = real.shadow_keys

        def shadow(self, expert: EvictionPolicy) -> ShadowTree:
            made.append(real.shadow(expert))
            return made[-1]

    size = total // 16 // page_size * page_size  # the experts part: 133 of 288 lookups differ
    leads, asked = replay(Keeping(), policy._history, LRU(), LFU(), size)  # type: ignore[arg-type]
    mine, theirs = real.shadow(LRU()), real.shadow(LFU())
    plain: list[int] = []
    for ns, key, use in policy._history:
        if use is not None:
            mine.insert(ns, key, size, use)
            theirs.insert(ns, key, size, use)
        else:
            plain.append(theirs.match(ns, key) - mine.match(ns, key))
    assert leads == plain and len(asked) == len(reqs) and any(leads)
    real_keys = {id(n.key) for n in real.nodes()}
    for shadow, least in zip(made, (0.2, 0.6)):  # LRU's, LFU's
        nodes = [n for root in shadow.roots.values() for n in root.children.values()]
        for n in nodes:
            nodes.extend(n.children.values())
        held = sum(len(n.key) for n in nodes)
        assert shadow.used == size and sum(len(n.key) for n in nodes if id(n.key) in real_keys) > least * held
