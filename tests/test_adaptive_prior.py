"""The default policy's prior (eviction/prior.py): at the first eviction it keeps LRU, with no replay, where
PRIOR_REUSE of the tokens inserted so far were cached already; else it leaves LRU for LFU only on evidence it
would switch on (MARGIN and Z) from the later half of the history replayed in a small cache. One tune-grid cell
(bench/policy_grid.py) per branch, with its margins forced either way (bench/RESULTS.md, round 20)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from scripts import ROOT, load_script

from radixkv import RadixCache
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import sim_config
from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.history import History
from radixkv.eviction.policies import LFU, LRU, EvictionPolicy
from radixkv.eviction.prior import leaves_start, replay
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.tree import RadixTree
from radixkv.radix.shadow_heap import ShadowNode
from test_adaptive import SESSIONS, _serve


@pytest.fixture(scope="module")
def grid() -> ModuleType:
    """bench/policy_grid.py, loaded once for the module's cells."""
    return load_script(ROOT / "bench" / "policy_grid.py")


@pytest.mark.parametrize(("cell", "share", "leader"), [
    ("seed:3021", 0.5, "lru"),  # reuse 0.76: no replay (it favours LFU, 1.2 sd; LRU wins by 1.34 points)
    ("wl:tools:1:0", 0.1, "lru"),  # reuse 0.73: no replay (it favours LFU, 2.1 sd; LRU wins by 0.37 points)
    ("wl:longchat:16:0", 0.5, "lru"),  # reuse 0.39; the later lookups favour LRU (LRU wins by 0.62 points)
    ("moon:12", 0.25, "lfu"),  # reuse 0.45; LFU on all counts (LFU wins by 2.5 points)
    ("wl:rag:1:0", 0.25, "lfu"),  # reuse 0.36 (LFU wins by 1.3 points)
])
def test_the_prior_leaves_lru_on_late_confident_evidence_where_the_traffic_reuses_less(
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
    leads, asked, _ = replay(Keeping(), policy._history, LRU(), LFU(), size)  # type: ignore[arg-type]
    mine, theirs = real.shadow(LRU()), real.shadow(LFU())
    plain: list[int] = []
    for ns, key, use in policy._history:
        if use is not None:
            mine.insert(ns, key, size, use)
            theirs.insert(ns, key, size, use)
        else:
            plain.append(theirs.match(ns, key) - mine.match(ns, key))
    assert leads == plain and len(asked) == len(reqs) and any(leads)
    assert len(made) == 1  # LFU's: LRU's is forked from it before the first eviction (below)
    real_keys = {id(n.key) for n in real.nodes()}
    held = sum(len(n.key) for n in _nodes(made[0]))
    assert made[0].used == size and sum(len(n.key) for n in _nodes(made[0]) if id(n.key) in real_keys) > 0.6 * held


def _nodes(shadow: ShadowTree) -> list[ShadowNode]:
    nodes = list(shadow.roots.values())
    for n in nodes:
        nodes.extend(n.children.values())
    return nodes


def _fields(shadow: ShadowTree) -> list[tuple]:
    """Every node's fields but hit counts (LFU's inserts count uses, LRU's do not), its parent's id and children."""
    return sorted((n.ns, n.id, n.key, n.depth, n.last_access, n.created, n.priority,
                   -1 if n.parent is None else n.parent.id, sorted(n.children)) for n in _nodes(shadow))


@pytest.mark.parametrize("page_size", [1, 16])
def test_a_shadow_forked_before_its_first_eviction_runs_as_one_fed_the_traffic_from_the_start(page_size: int) -> None:
    """The prior's replay runs one shadow (LFU's: it counts insert uses) until one of its size could first evict,
    then forks it for LRU (whose key reads no hit counts): from there on the fork holds, matches and evicts what
    an LRU shadow fed the whole traffic does (the replay's leads: the test above)."""
    total, real, history = _whole_history("agent", page_size)
    entries = list(history)
    size = total // 8 // page_size * page_size
    one, lru = real.shadow(LFU()), real.shadow(LRU())
    fork: ShadowTree | None = None
    for i, (ns, key, use) in enumerate(entries):
        if fork is None and use is not None and one.used + len(key) // 4 > size:  # as replay() forks
            fork, at = one.fork(LRU()), i
            assert _fields(fork) == _fields(lru) and (fork.used, fork.tick) == (lru.used, lru.tick)
        ahead = one if fork is None else fork
        if use is None:
            assert ahead.match(ns, key) == lru.match(ns, key)
        else:
            assert ahead.insert(ns, key, size, use) == lru.insert(ns, key, size, use)
    assert fork is not None and _fields(fork) == _fields(lru) and lru.used == size
    assert replay(real, history, LRU(), LFU(), size)[2] == at  # type: ignore[arg-type]


def _whole_history(sessions: str, page_size: int) -> tuple[int, RadixTree, History]:
    """SESSIONS[sessions] served by the bench lifecycle in a cache that holds it all: its tokens, the tree, and
    the adaptive policy's history of it (whole: no eviction)."""
    reqs = SESSIONS[sessions]
    total = sum(len(r.tokens) for r in reqs)
    cache = RadixCache(sim_config(total, page_size, "adaptive", 4096))
    for r in reqs:
        _serve(cache, r)
    policy = cache.tree.policy
    assert isinstance(policy, Adaptive) and policy._history is not None
    return total, cache.tree, policy._history


@pytest.mark.parametrize("page_size", [1, 16])
def test_dense_reuse_keeps_the_expert_followed_without_a_replay(page_size: int) -> None:
    """The history counts the tokens its inserts held, new or not; where the real cache holds no more than
    (1 - PRIOR_REUSE) of them at its first eviction, leaves_start says stay before it replays anything."""
    _, real, history = _whole_history("chat", page_size)
    assert history.inserted == sum(len(key) // 4 for _, key, use in history if use is not None)

    class NoReplay:  # a tree whose shadows the replay would ask for first
        @property
        def shadow_keys(self) -> None:
            raise AssertionError("replayed")

    rule = Adaptive()
    edge = int((1.0 - rule.PRIOR_REUSE) * history.inserted)
    assert not leaves_start(rule, NoReplay(), history, LRU(), LFU(), edge)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="replayed"):
        leaves_start(rule, NoReplay(), history, LRU(), LFU(), edge + 1)  # type: ignore[arg-type]
