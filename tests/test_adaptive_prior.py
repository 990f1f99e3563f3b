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
