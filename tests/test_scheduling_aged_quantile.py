"""auto's aging count on a full-size cache while the server does not keep up (radixkv/scheduling/auto.py,
`Auto._ages_at`): a request ages once passed by as many later arrivals as the AGED_Q quantile of the counts at
admission so far (within AGED_MIN and AGED_TOP), not after OVERTAKEN; elsewhere, before AGED_AFTER admissions,
while prompt tokens arrive under AGED_RATE or AGED_QUEUE caches wait, and off (AGED_Q >= 1), after OVERTAKEN as
before. A probe of round 28, off by default (bench/RESULTS.md)."""

from __future__ import annotations

import pytest

from test_scheduling import make_cache, queued, tokens

SLOTS = 4096


def passed_queue(q: float = 0.9, full: int = SLOTS, rate: float = 1.0, seen: int = 100,
                 counts: int = 1, queue: float = 1.0, strict: float = 1.0) -> tuple[object, list]:
    """One cold request, then five later ones admitted before it, one by one: it is passed five times. Before,
    `seen` requests were admitted having been passed `counts` times each (the quantile's histogram); prompt tokens
    arrive at `rate` (AGED_RATE is 0.55); the count reads while under `queue` caches wait (one 48-token request
    waits: 0.012)."""
    sched, reqs = queued(make_cache(SLOTS), [tokens(10 + i, 48) for i in range(6)], "auto", full_cache=full)
    policy = sched.policy
    policy.AGED_Q, policy.AGED_MIN, policy.AGED_TOP, policy.AGED_AFTER = q, 2.0, 4.0, 50
    policy.AGED_RATE, policy.AGED_QUEUE, policy.AGED_STRICT = 0.55, queue, strict
    policy.shape.rate = lambda now, arrived: rate
    policy.passes[counts] += seen
    policy.prompts_admitted += seen
    for r in reqs[1:]:
        sched.waiting.remove(r)
        policy.admitted(r, 0.0)
    return policy, reqs


def test_the_count_is_the_quantiles_within_its_bounds() -> None:
    policy, _ = passed_queue(counts=2)  # 90% of the admitted were passed twice: ages at the third pass
    assert policy._ages_at(0.0) == 3
    policy, _ = passed_queue(counts=0)  # ... never passed: ages at AGED_MIN (2), not at 1
    assert policy._ages_at(0.0) == 2
    policy, _ = passed_queue(counts=9)  # ... passed 9 times: at AGED_TOP (4), not at 10
    assert policy._ages_at(0.0) == 4


def test_the_most_passed_age_before_overtaken() -> None:
    policy, reqs = passed_queue(counts=2)
    assert reqs[0] in policy.aged and policy.turn[reqs[0]] <= policy.admitted_tokens  # aged, and due
    assert policy.overtaken[reqs[0]] == 5 and policy.OVERTAKEN == 16


@pytest.mark.parametrize("kw", [{"q": 1.0}, {"full": 4 * SLOTS}, {"rate": 0.5}, {"seen": 20}, {"queue": 0.01}])
def test_off_below_a_full_cache_light_or_early_the_count_is_overtaken(kw: dict) -> None:
    policy, reqs = passed_queue(counts=2, **kw)
    assert policy._ages_at(0.0) == policy.OVERTAKEN == 16
    assert reqs[0] not in policy.aged


def test_not_strict_the_counted_are_due_not_aged() -> None:
    policy, reqs = passed_queue(counts=2, strict=0.0)
    assert reqs[0] not in policy.aged and policy.turn[reqs[0]] <= policy.admitted_tokens
