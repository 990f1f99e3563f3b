"""auto's keeping-up rule (radixkv/scheduling/auto.py, `Auto._keeps_up`): on a cache of at least one H100's KV
(`full_cache`), while the prompt tokens arrived so far came at under HRRN_LOAD per unit of the clock since the first
arrival (shape.py's `TraceShape.rate`), auto's order is hrrn's alone (policies.py's key: no due share, no aged request
first); on a smaller cache, at a higher rate or with HRRN_LOAD 0 (off: the order before the rule) auto's own. The
queue: a 100-token request (A) and a 20-token one (B, 50 later), both past their deadlines, so that the deadline order
keeps arrival order (A, B) and hrrn's puts B first.
"""

from __future__ import annotations

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.scheduling.auto import Auto
from radixkv.scheduling.policies import ResponseRatio
from radixkv.scheduling.scheduler import Request, Scheduler
from radixkv.scheduling.shape import TraceShape

SLOTS = 400


def cold(i: int, n: int) -> list[int]:
    return [i * 1000 + j for j in range(n)]  # distinct first tokens: nothing cached


def late_pair(full_cache: int, idle: float, first_len: int = 10) -> tuple[Scheduler, list[float], list[Request]]:
    """A `first_len`-token request arrives at clock 0 and is admitted at once; the queue stays empty for `idle`, then
    A (100 tokens) and B (20 tokens, 50 later) arrive; the clock is 5,000 past A's arrival (both deadlines passed: 4,800
    and 1,010 after their arrivals). The due share is spent, so the order behind it is the one that shows."""
    now = [0.0]
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=SLOTS, page_size=1,
                                   max_requests=64, max_context_len=512, dtype=torch.float32))
    sched = Scheduler(cache, 64, schedule="auto", clock=lambda: now[0], full_cache=full_cache)
    first = Request(0, cold(0, first_len), first_len, 1)
    sched.add(first)
    sched.waiting.remove(first)
    sched.policy.admitted(first, 0.0)
    reqs = []
    for i, (n, at) in enumerate([(100, idle), (20, idle + 50)], start=1):
        now[0] = at
        reqs.append(Request(i, cold(i, n), n, 1))
        sched.add(reqs[-1])
    now[0] = idle + 5000
    sched.policy.bound_tokens = sched.policy.contested_tokens = 1000
    return sched, now, reqs


@pytest.fixture(autouse=True)
def no_warmup_or_reuse_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The queues here are a few hundred tokens with nothing cached: the rate is read at once, any reuse and any queue
    pass."""
    monkeypatch.setattr(Auto, "HRRN_AFTER", 0.0)
    monkeypatch.setattr(Auto, "HRRN_REUSE", 1.0)
    monkeypatch.setattr(Auto, "HRRN_QUEUE", float("inf"))


def ordered(sched: Scheduler, now: list[float]) -> list[int]:
    window = list(sched.waiting)
    sched.estimates.refresh(window)
    return [r.index for r in sched.policy.order(window, now[0])]


def test_the_rate_is_prompt_tokens_per_unit_of_the_clock_since_the_first_arrival() -> None:
    shape = TraceShape()
    assert shape.rate(5.0, 0) == float("inf")  # no arrival yet
    shape.arrived(100.0, False)
    assert shape.rate(100.0, 40) == float("inf")  # the clock has not moved past it
    assert shape.rate(300.0, 40) == 0.2


@pytest.mark.parametrize("load, full_cache, idle, first_len, hrrn", [
    (0.0, SLOTS, 10_000, 10, False),  # off: main's deadline order
    (0.015, SLOTS, 10_000, 10, True),  # full cache, 130 tokens in 15,000 (0.009): keeps up
    (0.015, 4 * SLOTS, 10_000, 10, False),  # a quarter of a full cache: the deadline order
    (0.015, SLOTS, 1_000, 10, False),  # 130 in 6,000 (0.022): under load
    (0.03, SLOTS, 1_000, 10, True),  # ... under a laxer bound
    (0.015, SLOTS, 10_000, 200, False),  # 320 in 15,000 (0.021): the same waits as the second case, more load
])
def test_auto_orders_as_hrrn_while_the_server_keeps_up_on_a_full_cache(
        load: float, full_cache: int, idle: float, first_len: int, hrrn: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Auto, "HRRN_LOAD", load)
    sched, now, reqs = late_pair(full_cache, idle, first_len)
    assert sched.policy.turn[reqs[0]] <= sched.policy.admitted_tokens  # A is due; the share is spent
    assert sorted(reqs, key=lambda r: ResponseRatio.key(r, now[0]))[0] is reqs[1]
    assert ordered(sched, now) == ([2, 1] if hrrn else [1, 2])


@pytest.mark.parametrize("after, hrrn", [(0.0, True), (0.3, True), (0.4, False)])
def test_the_rate_is_read_once_enough_prompt_tokens_arrived(
        after: float, hrrn: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """130 tokens arrived, a third of the cache's 400 slots: HRRN_AFTER 0.3 reads the rate, 0.4 not yet."""
    monkeypatch.setattr(Auto, "HRRN_LOAD", 0.015)
    monkeypatch.setattr(Auto, "HRRN_AFTER", after)
    sched, now, reqs = late_pair(SLOTS, 10_000)
    assert ordered(sched, now) == ([2, 1] if hrrn else [1, 2])


@pytest.mark.parametrize("reuse, hrrn", [(1.0, True), (0.7, True), (0.5, False)])
def test_not_where_most_admitted_prompt_tokens_were_cached(
        reuse: float, hrrn: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """6 of the 10 admitted prompt tokens cached (0.6): hrrn's size is not the work there; HRRN_REUSE 0.5 keeps
    auto's order, which counts the cached prefix."""
    monkeypatch.setattr(Auto, "HRRN_LOAD", 0.015)
    monkeypatch.setattr(Auto, "HRRN_REUSE", reuse)
    sched, now, reqs = late_pair(SLOTS, 10_000)
    assert sched.policy.shape.admitted == 10
    sched.policy.shape.cached = 6
    assert ordered(sched, now) == ([2, 1] if hrrn else [1, 2])


@pytest.mark.parametrize("queue, hrrn", [(float("inf"), True), (0.5, True), (0.25, False)])
def test_not_while_hrrn_queue_caches_of_prompt_tokens_wait(
        queue: float, hrrn: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A and B wait: 120 prompt tokens, 0.3 of the cache's 400 slots."""
    monkeypatch.setattr(Auto, "HRRN_LOAD", 0.015)
    monkeypatch.setattr(Auto, "HRRN_QUEUE", queue)
    sched, now, reqs = late_pair(SLOTS, 10_000)
    assert sched.policy.backlog == 120
    assert ordered(sched, now) == ([2, 1] if hrrn else [1, 2])


@pytest.mark.parametrize("load, first", [(0.0, 1), (0.015, 2)])
def test_while_it_keeps_up_neither_the_due_share_nor_aging_puts_a_request_first(
        load: float, first: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """hrrn's order alone: A, due with the share unspent and aged, goes first in auto's order, not in hrrn's."""
    monkeypatch.setattr(Auto, "HRRN_LOAD", load)
    sched, now, reqs = late_pair(SLOTS, 10_000)
    sched.policy.bound_tokens = sched.policy.contested_tokens = 0
    sched.policy.aged.add(reqs[0])
    assert ordered(sched, now)[0] == first
