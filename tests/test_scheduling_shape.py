"""auto on thin traces (radixkv/scheduling/policies.py, `Auto.thin`): K_THIN instead of K, and SHARE_OVER in a
backlog of OVER caches, only where the cache holds few prompts, the admitted prompts' cached share is low and
arrivals are not bursty, judged once WARMUP caches of prompt tokens were admitted."""

from __future__ import annotations

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.scheduling.scheduler import Request, Scheduler

SLOTS = 400


def make_cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=SLOTS, page_size=1,
                                  max_requests=64, max_context_len=512, dtype=torch.float32))


def run(gaps: list[float], cached: int, n: int = 40, **constants: float) -> tuple[Scheduler, list[bool]]:
    """`len(gaps) + 1` requests of `n` tokens arriving `gaps` apart, each with its first `cached` tokens in the
    tree, ordered and admitted one by one (so `cached / n` is the share the policy sees). Returns the scheduler
    and the policy's thin() after each admission."""
    now = [0.0]
    cache = make_cache()
    hot = list(range(100_000, 100_000 + cached))
    if cached:
        seq = cache.open(hot)
        cache.reserve(seq, cached)
        cache.commit(seq, hot)
        cache.close(seq)
    sched = Scheduler(cache, 64, schedule="auto", clock=lambda: now[0])
    policy = sched.policy
    for name, value in constants.items():
        setattr(policy, name, value)
    thin = []
    for i, gap in enumerate([0.0] + gaps):
        now[0] += gap
        req = Request(i, hot + [i * 1000 + j for j in range(n - cached)], n, 1)
        sched.add(req)
        sched.estimates.refresh([req])
        assert policy.order([req], now[0]) == [req]
        sched.waiting.remove(req)
        sched.estimates.drop(req)
        policy.admitted(req, now[0])
        thin.append(policy.thin())
    return sched, thin


SMALL = {"PROMPTS": 12.0}  # one cache (400 tokens) holds 10 prompts of 40 tokens: fewer than 12


def test_a_steady_low_reuse_trace_on_a_small_cache_is_thin_after_the_warmup() -> None:
    sched, thin = run([10.0] * 20, cached=8, **SMALL)  # 8 of 40 cached: 0.2 <= REUSE (0.33)
    assert thin == [False] * 9 + [True] * 12  # from the tenth admission on: one cache of tokens admitted
    assert sched.policy.seen == [21 * 40, 21 * 8, 21]


@pytest.mark.parametrize("gaps, cached, constants", [
    ([10.0] * 20, 16, SMALL),  # 16 of 40 cached (0.4): reused much
    (([100.0] + [1.0] * 9) * 2, 8, SMALL),  # bursts: the gaps' coefficient of variation is above 2 (2.6-2.7)
    ([10.0] * 20, 8, {"PROMPTS": 8.0}),  # a cache of 10 prompts holds more than 8
    ([10.0] * 20, 8, {**SMALL, "REUSE": -1.0}),  # the rule off (main's K and S everywhere)
])
def test_a_trace_that_reuses_much_comes_in_bursts_or_fits_the_cache_is_not(gaps, cached, constants) -> None:
    assert run(gaps, cached, **constants)[1] == [False] * (len(gaps) + 1)


def test_a_thin_trace_orders_by_k_thin_and_a_backlog_gets_share_over() -> None:
    """Once thin, a cold request 10 tokens longer than another, arriving 120 clock units before it, is ordered
    by deadlines with K_THIN (12: a tie, so arrival order) where K 48 would put the shorter first; with OVER
    caches waiting the due share is SHARE_OVER."""
    sched, thin = run([10.0] * 20, cached=8, **SMALL, OVER=1.0)
    policy, now = sched.policy, 1000.0
    assert thin[-1] and policy.K_THIN == 12.0 and policy.SLOWDOWN == 48.0
    longer, short = (Request(100 + i, [(200 + i) * 1000 + j for j in range(n)], n, 1) for i, n in enumerate((40, 30)))
    for req, arrival in ((longer, now - 132.0), (short, now - 12.0)):
        sched.add(req)
        req.arrival = arrival  # deadlines: longer now - 132 + 12 x 40, short now - 12 + 12 x 30 (equal)
    window = [longer, short]
    sched.estimates.refresh(window)
    policy.turn = {r: float("inf") for r in window}  # none due: the deadline order alone
    policy.arrived_tokens = policy.admitted_tokens + SLOTS - 1  # under one cache waits
    assert policy.order(window, now) == [longer, short] and policy.share == policy.SHARE == 0.15
    longer.arrival += 1.0  # its deadline after short's
    assert policy.order(window, now) == [short, longer]
    policy.arrived_tokens += 1  # one cache waits (OVER 1): the share drops, the order stays
    assert policy.order(window, now) == [short, longer] and policy.share == policy.SHARE_OVER == 0.05
    policy.REUSE = -1.0  # not thin: K 48, the shorter first whatever the arrivals; S again
    longer.arrival -= 1.0
    assert policy.order(window, now) == [short, longer] and policy.share == 0.15
