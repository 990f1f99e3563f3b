"""auto's live load estimate and the rule it drives (radixkv/scheduling/policies.py; round 15's variant,
off by default: LPM_CACHE 0).

`Auto.load`, at each arrival: the share of the clock since the arrival LPM_WINDOW arrivals before in which
some request waited, from what the Scheduler sees (arrival and admission times). On a cache under half a full
H100 whose queue has not emptied over that window (load >= LPM_BUSY) and holds more than LPM_QUEUE caches
of prompt tokens, auto orders the queue as lpm does, until it falls to LPM_EXIT caches; a request that
LPM_AGED later requests arrived after still gets the due share, so no wait is unbounded.
"""

from __future__ import annotations

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.scheduling import PrefixEstimates, make_policy
from radixkv.scheduling.policies import Auto
from radixkv.scheduling.scheduler import Request, Scheduler

SLOTS = 400


def make_cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=SLOTS, page_size=1,
                                  max_requests=64, max_context_len=512, dtype=torch.float32))


def distinct(i: int, n: int) -> list[int]:
    return [i * 1000 + j for j in range(n)]  # nothing shared with another request


def policy_on(full_cache: int | None = None) -> Auto:
    policy = make_policy("auto", PrefixEstimates(make_cache(), None, 1), full_cache)
    assert isinstance(policy, Auto)
    return policy


def test_load_is_the_waiting_share_of_the_clock_over_the_last_arrivals() -> None:
    """Arrivals every 10 clock units, each admitted 4 units later: some request waits 40% of the time.
    The estimate reads 0 until LPM_WINDOW + 1 requests have arrived, then 0.4 at every arrival; once
    admissions stop (a queue that never empties) it reads 1 a window later. Between arrivals it does
    not move: a burst that is being served is no new evidence."""
    policy = policy_on()
    n = policy.LPM_WINDOW
    reqs = [Request(i, distinct(i, 10), 10, 1) for i in range(3 * n + 1)]
    for i, r in enumerate(reqs[:2 * n]):
        policy.arrived(r, 10.0 * i)
        assert policy.load == (0.0 if i < n else pytest.approx(0.4))
        policy.admitted(r, 10.0 * i + 4)
    t0 = 10.0 * 2 * n
    for i, r in enumerate(reqs[2 * n:]):  # nothing admitted any more
        policy.arrived(r, t0 + 10.0 * i)
        assert policy.load > 0.4 or i == 0
    assert policy.load == pytest.approx(1.0)


def flood(full_cache: int | None, kept_up: bool) -> tuple[Scheduler, list[Request]]:
    """A 60-token prefix in the tree; LPM_WINDOW cold 40-token requests arrive 10 clock units apart
    (kept_up: each admitted 1 unit after it arrived; else none is), then 30 more of them, a 12-token
    cold one and a warm one (the prefix + 30 tokens) all at once: far more than LPM_QUEUE caches wait.
    Returns the Scheduler, ordered once at the last arrival, and the window in lpm's order."""
    cache = make_cache()
    hot = distinct(999, 60)
    seq = cache.open(hot)
    cache.reserve(seq, 60)
    cache.commit(seq, hot)
    cache.close(seq)
    now = [0.0]
    sched = Scheduler(cache, 64, schedule="auto", clock=lambda: now[0], full_cache=full_cache)
    sched.policy.LPM_CACHE = 0.5  # the rule on (main's default keeps it off)
    n = sched.policy.LPM_WINDOW
    for i in range(n):
        now[0] = 10.0 * i
        r = Request(i, distinct(i, 40), 40, 1)
        sched.add(r)
        if kept_up:
            sched.waiting.remove(r)
            sched.policy.admitted(r, now[0] + 1)
    now[0] = 10.0 * n
    for i in range(n, n + 30):
        sched.add(Request(i, distinct(i, 40), 40, 1))
    sched.add(Request(n + 30, distinct(n + 30, 12), 12, 1))
    warm = Request(n + 31, hot + distinct(n + 31, 30), 90, 1)
    sched.add(warm)
    window = list(sched.waiting)
    while len(sched.estimates.known) < len(window):
        sched.estimates.refresh(window)
    ordered = sched.policy.order(window, now[0])
    assert set(ordered) == set(window)
    return sched, [warm] + [r for r in window if r is not warm], ordered


def test_a_small_cache_that_cannot_keep_up_takes_lpms_order() -> None:
    """The queue has not emptied since the first arrival (load 1) and holds far more than
    LPM_QUEUE caches: beside the Engine's default full cache (400k tokens; this one is 400 slots)
    the order is lpm's (the warm request first, the rest in arrival order)."""
    sched, lpm, ordered = flood(None, kept_up=False)
    assert sched.policy.load == pytest.approx(1.0)
    assert ordered == lpm


@pytest.mark.parametrize("full_cache, kept_up", [(SLOTS, False), (None, True)])
def test_a_full_cache_or_a_burst_keeps_autos_order(full_cache: int | None, kept_up: bool) -> None:
    """The same queue where this cache is a full H100's (the rule is for small caches), or where the
    server kept up until the burst that arrived at once (load 0.1: a burst is no overload):
    auto's order (its first request is due: nothing waited ahead of it when it arrived)."""
    sched, lpm, ordered = flood(full_cache, kept_up)
    assert sched.policy.load == pytest.approx(1.0 if not kept_up else 0.1)
    assert ordered != lpm and ordered[0] is not lpm[0]


def test_lpms_order_still_bounds_every_wait() -> None:
    """In lpm's order a cold request that LPM_AGED later requests arrived after gets the due share,
    oldest first: here (LPM_AGED set on this instance) the 12 oldest of the flood, within 15% of the tokens."""
    sched, lpm, ordered = flood(None, kept_up=False)
    assert ordered == lpm  # the default LPM_AGED is far above the 64 arrivals
    policy = sched.policy
    policy.LPM_AGED = policy.arrivals - 12  # the 12 oldest have seen LPM_AGED later arrivals
    window = list(sched.waiting)
    ordered = policy.order(window, sched.clock())
    assert ordered[0] is window[0] and ordered[1] is lpm[0]  # the oldest, then lpm's first: 40 > 0.15 x 130
    assert window[0] in policy.picked and policy.picked <= set(window[:12])
