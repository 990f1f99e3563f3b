"""eviction/probation.py: the adaptive policy's LRU expert. A leaf not hit since its insert enters the
LRU order `demote` ticks back; its first hit puts it back at its own time; demote 0 is plain LRU."""

from __future__ import annotations

import pytest

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.eviction import POLICIES
from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.probation import ProbationLRU


@pytest.fixture
def probation():
    def register(demote: int) -> str:
        name = f"probation-test-{demote}"
        POLICIES[name] = lambda: ProbationLRU(demote)
        names.append(name)
        return name

    names: list[str] = []
    yield register
    for name in set(names):
        del POLICIES[name]


def _left_after_eviction(policy: str, hit_new: bool) -> list[int]:
    """A (hit once after its insert), then B (newer, hit only if `hit_new`) fill an 8-token cache; a
    third sequence evicts one of them. The first tokens of the sequences still cached."""
    cache = RadixCache(sim_config(8, 1, policy, 8))
    cache.insert([10, 1, 2, 3], cache.alloc(4))
    assert cache.match_prefix([10, 1, 2, 3]).length == 4
    cache.insert([20, 1, 2, 3], cache.alloc(4))
    if hit_new:
        assert cache.match_prefix([20, 1, 2, 3]).length == 4
    cache.insert([30, 1, 2, 3], cache.alloc(4))
    cache.check_invariants()
    return [first for first in (10, 20) if cache.match_prefix([first, 1, 2, 3]).length == 4]


def test_an_unhit_leaf_goes_before_a_slightly_older_hit_one(probation) -> None:
    assert _left_after_eviction("lru", hit_new=False) == [20]
    assert _left_after_eviction(probation(0), hit_new=False) == [20]  # plain LRU
    assert _left_after_eviction(probation(4), hit_new=False) == [10]  # B, one tick newer, was never hit
    assert _left_after_eviction(probation(4), hit_new=True) == [20]  # hit: back at its own time


def test_the_adaptive_policy_follows_it_as_its_lru_expert() -> None:
    policy = Adaptive()
    expert = policy.experts[0]
    assert isinstance(expert, ProbationLRU) and expert.demote == policy.DEMOTE > 0 and policy.leader == "lru"
