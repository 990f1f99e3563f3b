"""auto's due share at 0 (radixkv/scheduling/auto.py, `Auto._interleave` and `Auto.admitted`): a share of 0 picks no
request oldest-first, and the tokens admitted while it is 0 are owed to nobody later. Before round 26 a share of 0
still put the oldest due request first in every order until one was admitted, and the tokens admitted at 0 counted in
the contended period, so that once the share rose again (SHARE_OVER 0 -> SHARE as a thin trace's backlog fell under
OVER caches) the oldest-first side took its share of the whole period in one run of arrival order (base-s1 1/4 1.2:
mean TTFT 34.3 s against 32.8 s, bench/RESULTS.md, issue 20, round 26, helper sched47)."""

from __future__ import annotations

import pytest
from test_scheduling import cache_prefix, make_cache, order, queued, tokens

pytestmark = pytest.mark.usefixtures("auto_own_order")  # auto's own rules (conftest.py)


def all_due_and_late() -> tuple[object, list]:
    """Six 48-token requests, 8 i of request i's tokens cached; every turn and every deadline has passed."""
    cache = make_cache()
    hot = tokens(1, 48)
    cache_prefix(cache, hot)
    prompts = [hot[:8 * i] + tokens(10 + i, 48 - 8 * i) for i in range(6)]
    sched, reqs = queued(cache, prompts, "auto")
    sched.policy.admitted_tokens = 10_000  # all due
    sched.planned = 10_000  # all late: longest cached prefix first
    return sched, reqs


def test_a_due_share_of_zero_picks_nobody_oldest_first() -> None:
    sched, _ = all_due_and_late()
    sched.policy.SHARE = 0.0
    assert order(sched) == [5, 4, 3, 2, 1, 0]  # lpm's order; before, 0 (the oldest) went first
    sched.policy.SHARE = 0.25
    assert order(sched) == [0, 5, 4, 3, 1, 2]  # a positive share is as before (test_scheduling.py)


def test_tokens_admitted_at_a_share_of_zero_are_owed_to_nobody_later() -> None:
    sched, reqs = all_due_and_late()
    policy = sched.policy
    policy.SHARE = 0.0
    for i in (5, 4, 3):  # admitted in lpm's order while the share is 0: 144 tokens, none oldest-first
        assert order(sched)[0] == i
        sched.waiting.remove(reqs[i])
        policy.admitted(reqs[i], 0)
    assert (policy.contested_tokens, policy.bound_tokens) == (0, 0)
    policy.SHARE = 0.25  # the share rises: the oldest goes first once, as at the start of a contended period
    assert order(sched) == [0, 2, 1]  # before: 0 then 1 (owed 0.25 x 144 + more), here 2 (more cached) before 1
