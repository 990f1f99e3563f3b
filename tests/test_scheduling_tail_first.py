"""auto's due requests on a thin trace while heavy (radixkv/scheduling/auto.py, `Auto.PASSED_HEAVY`): those that
PASSED_HEAVY later arrivals were admitted before, not those whose FCFS turn passed; the due share (SHARE_PASSED) serves
them oldest first, the rest follow the deadline order (lpm's at K_PASSED 0), while under PASSED_MAX caches wait (then
K_THIN and SHARE_HEAVY, as before). Off (< 0) the due are as before, whose turn passed."""

from __future__ import annotations

import pytest

from test_scheduling import cache_prefix, make_cache, order, queued, tokens

pytestmark = pytest.mark.usefixtures("auto_own_order")  # auto's own rules (conftest.py)


def heavy_queue(passed: float, share: float = 1.0, thin: bool = True) -> tuple[object, list]:
    """Three cold 48-token requests, then six that share a cached 40-token prefix. Four of the hot ones are admitted
    one by one, as lpm's order would (K_THIN 0), on a thin trace the server does not keep up with: each passes every
    cold one, which is then due from PASSED_HEAVY 4 down. Every FCFS turn has passed."""
    cache = make_cache()
    hot = tokens(1, 40)
    cache_prefix(cache, hot)
    prompts = [tokens(10 + i, 48) for i in range(3)] + [hot + tokens(20 + i, 8) for i in range(6)]
    sched, reqs = queued(cache, prompts, "auto")
    policy = sched.policy
    policy.K_THIN, policy.SHARE_HEAVY, policy.AGED_HEAVY, policy.PASSED_HEAVY = 0.0, 0.0, 0.0, passed
    policy.SHARE_PASSED = share
    policy.thin = lambda: thin
    policy.shape.busy = lambda now, waiting: 1.0  # heavy: someone waited all along
    sched.planned = 10_000
    for i in (3, 4, 5, 6):
        sched.waiting.remove(reqs[i])
        policy.admitted(reqs[i], 0)
    return sched, reqs


@pytest.mark.parametrize("passed", [4.0, 3.0])
def test_at_a_share_of_1_the_often_passed_go_first_oldest_first(passed: float) -> None:
    sched, _ = heavy_queue(passed)
    assert sched.policy.overtaken[sched.waiting[0]] == 4
    assert order(sched) == [0, 1, 2, 7, 8]


def test_below_the_count_the_order_is_lpms() -> None:
    sched, _ = heavy_queue(5.0)
    assert order(sched) == [7, 8, 0, 1, 2]


def test_a_share_under_1_serves_the_often_passed_in_turn() -> None:
    sched, _ = heavy_queue(4.0, share=0.25)
    assert order(sched) == [0, 7, 8, 1, 2]  # the oldest, then lpm's order until the picks are under a quarter again


def test_off_the_order_is_lpms() -> None:
    sched, _ = heavy_queue(-1.0, share=0.0)
    assert order(sched) == [7, 8, 0, 1, 2]


def test_not_thin_the_count_changes_nothing() -> None:
    (on, _), (off, _) = heavy_queue(4.0, thin=False), heavy_queue(-1.0, thin=False)
    assert order(on) == order(off) != [0, 1, 2, 7, 8]


def test_the_count_rises_to_a_quantile_of_the_counts_at_admission() -> None:
    sched, _ = heavy_queue(4.0)
    policy = sched.policy
    assert policy.passes[0] == 4 and policy.prompts_admitted == 4  # the four hot ones, passed by none
    policy.PASSED_Q = 0.5
    assert policy._passes_quantile() == 1 and order(sched) == [0, 1, 2, 7, 8]  # 4 >= max(4, 1)
    policy.passes[9] += 10  # ten more admitted after 9 passes each: half of the 14 were passed 9 times or fewer
    policy.prompts_admitted += 10
    assert policy._passes_quantile() == 10 and order(sched) == [7, 8, 0, 1, 2]  # 4 < 10: lpm's order


@pytest.mark.parametrize("caches, first", [(1.0, [0, 1, 2, 7, 8]), (0.05, [7, 8, 0, 1, 2])])
def test_from_passed_max_caches_on_the_heavy_order_is_back(caches: float, first: list[int]) -> None:
    sched, _ = heavy_queue(4.0)
    sched.policy.PASSED_MAX = caches  # five 48-token prompts wait: 240 tokens, under one 4096-slot cache, over 0.05
    # over it: K_THIN 0 and SHARE_HEAVY 0 (heavy_queue), lpm's order
    assert order(sched) == first
