"""The fluid FCFS clock (radixkv/scheduling/fcfs_clock.py): what FCFS would have done on the same arrivals. Work is
the prompt (round 26) or, with a tree (round 27), what a metadata-only prefix tree fed in the fluid queue's order
lacks, drained at the uncached tokens the real server admitted. bench/sched_tail_clock.py measures it against fcfs's
own runs; auto's overdue rule on it is gone (rounds 26-27)."""

from __future__ import annotations

import pytest

from radixkv.scheduling.fcfs_clock import FcfsClock, make_clock
from radixkv.scheduling.scheduler import Request

from test_scheduling import make_cache, tokens


def req(i: int, n: int) -> Request:
    return Request(i, list(range(n)), n, 1)


def test_the_fluid_queue_starts_each_request_once_the_tokens_ahead_of_it_drained() -> None:
    """Before any saturated step the rate is one token a clock unit; then the admitted tokens over the saturated
    time (decayed alike, so a constant rate reads exactly); an unsaturated step's time and admissions do not count."""
    clock = FcfsClock(window=100.0)
    a, b, c = req(0, 10), req(1, 30), req(2, 5)
    for r in (a, b, c):
        clock.arrived(r, 0.0)
    assert clock.start(a) == 0.0 and clock.start(b) is None
    clock.advance(25.0)
    assert clock.start(b) == 10.0 and clock.start(c) is None  # 10 tokens ahead of b, 40 ahead of c
    clock.step(25.0, True)
    clock.admitted(a, 25.0)
    clock.admitted(b, 25.0)  # 40 tokens this step ...
    clock.step(35.0, False)  # ... over 10 saturated clock units: rate 4
    assert clock.rate == pytest.approx(4.0)
    assert clock.start(c) is None  # 35 of the 40 tokens ahead of it drained (25, then 10 at 1 a unit)
    clock.admitted(c, 35.0)  # not saturated: does not count
    clock.step(50.0, True)
    assert clock.rate == pytest.approx(4.0)
    d, e = req(3, 8), req(4, 20)
    clock.arrived(d, 50.0)  # all 45 tokens ahead of it drained
    clock.arrived(e, 50.0)
    clock.advance(52.0)  # 53 ahead of e: 8 more, 2 clock units at 4
    assert clock.start(d) == 50.0 and clock.start(e) == pytest.approx(52.0)


def clock(share: float, slots: int = 4096) -> FcfsClock:
    return make_clock(100.0, make_cache(slots).config, share, "lru")


def test_a_prompt_fcfs_s_cache_holds_costs_only_what_it_lacks() -> None:
    """b repeats a's 200 tokens and adds one: with the tree it costs 1 (matched on all but its last token), so c
    starts at 201, not at 401 as with the prompt as work."""
    a = tokens(1, 200)
    for share, start in [(1.0, 201.0), (0.0, 401.0)]:
        fluid = clock(share)
        reqs = [Request(0, a, 200, 1), Request(1, a + [7], 201, 1), Request(2, tokens(2, 300), 300, 1)]
        for r in reqs:
            fluid.arrived(r, 0.0)
        fluid.advance(1000.0)
        assert fluid.start(reqs[2]) == pytest.approx(start)
        if share:
            assert (fluid.prompts, fluid.work) == (701, 501)


def test_the_tree_holds_the_cache_s_size_and_evicts_the_least_recent() -> None:
    """A tree of 0.05 x 4096 slots (204 tokens): a second 200-token prompt evicts all but the first page (4 tokens)
    of the first, the least recently used, which then costs 197 of its 201 again."""
    a, x = tokens(1, 200), tokens(3, 200)
    fluid = clock(0.05)
    assert fluid.capacity == 204
    for i, p in enumerate([a, x, a + [7]]):
        fluid.arrived(Request(i, p, len(p), 1), 0.0)
    fluid.advance(1000.0)
    assert fluid.work == 200 + 200 + 197


def test_with_a_tree_the_rate_is_in_uncached_tokens() -> None:
    """A saturated step admits 100 prompt tokens, 60 of them cached, over 10 clock units: 4 a unit with a tree
    (the work it drains is uncached), 10 without."""
    for share, rate in [(1.0, 4.0), (0.0, 10.0)]:
        fluid = clock(share)
        r = Request(0, tokens(1, 100), 100, 1)
        fluid.arrived(r, 0.0)
        fluid.step(0.0, True)
        fluid.admitted(r, 0.0, 60)
        fluid.step(10.0, False)
        assert fluid.rate == pytest.approx(rate)


def test_admitted_requests_still_fill_fcfs_s_cache_but_are_not_read() -> None:
    """The real server admits b before the fluid queue reaches it: no start is read for it, its prompt still goes
    into FCFS's cache (c, which repeats it, costs 1), and its tokens growing by its output do not change that."""
    fluid = clock(1.0)
    a, b, c = Request(0, tokens(1, 200), 200, 1), Request(1, tokens(2, 100), 100, 1), None
    fluid.arrived(a, 0.0)
    fluid.arrived(b, 0.0)
    fluid.admitted(b, 0.0)
    b.tokens.append(5)  # its first output token
    c = Request(2, tokens(2, 100) + [9], 101, 1)
    fluid.arrived(c, 0.0)
    fluid.advance(1000.0)
    assert fluid.start(b) is None and fluid.start(c) == pytest.approx(300.0)
    assert fluid.work == 301
