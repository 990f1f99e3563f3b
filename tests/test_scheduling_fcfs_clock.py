"""The fluid FCFS clock (radixkv/scheduling/fcfs_clock.py) and auto's overdue rule on it (Auto.FCFS_LATE): a request
that waited past (1 + FCFS_LATE) x its FCFS wait + FCFS_MARGIN goes first; off by default (main's decisions).
"""

from __future__ import annotations

import pytest

from radixkv.scheduling.auto import Auto
from radixkv.scheduling.fcfs_clock import FcfsClock
from radixkv.scheduling.scheduler import Request

from test_scheduling import cold_behind_cached, order


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


def overdue_queue() -> tuple[list[int], Auto]:
    """A cold request (1) behind a 40-token one (0), then three cached ones; 0 is admitted at clock 0, and the queue
    is ordered at clock 100: the fluid queue started 1 at clock 40 (one token a clock unit)."""
    sched, reqs = cold_behind_cached()
    policy = sched.policy
    assert isinstance(policy, Auto)
    sched.waiting.remove(reqs[0])
    policy.admitted(reqs[0], 0.0)  # 40 tokens admitted: under 1.5 x 40, 1 is not due
    sched.planned = 100
    return order(sched), policy


@pytest.mark.parametrize("late, first", [(-1.0, False), (0.0, True), (1.0, True), (1.6, False)])
def test_a_request_past_its_fcfs_start_goes_first(late: float, first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Waited 100 against an FCFS wait of 40: overdue with FCFS_LATE 0 or 1 (100 > 80), not with 1.6 (104), nor
    when off (-1: no clock at all); not overdue, the cold request waits behind the cached ones (deadline order)."""
    monkeypatch.setattr(Auto, "FCFS_LATE", late)
    got, policy = overdue_queue()
    assert (policy.fcfs is None) == (late < 0)
    assert got == ([1, 2, 3, 4] if first else [2, 3, 4, 1])


@pytest.mark.parametrize("passed, first", [(1, False), (2, True)])
def test_an_overdue_request_goes_first_only_once_fcfs_passed_later_arrivals_went_before_it(
        passed: int, first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """FCFS_PASSED 2: overdue (FCFS_LATE 0) only once two later arrivals were admitted before it. Its due share is
    spent, so only the overdue rule puts it first."""
    monkeypatch.setattr(Auto, "FCFS_LATE", 0.0)
    monkeypatch.setattr(Auto, "FCFS_PASSED", 2)
    got, policy = overdue_queue()
    assert got == [2, 3, 4, 1]  # passed by none yet
    policy.bound_tokens = policy.contested_tokens = 1000
    for r in [r for r in policy.turn if r.index in (2, 3)][:passed]:
        policy.admitted(r, 100.0)
    window = [r for r in policy.turn]
    policy.estimates.refresh(window)
    assert [r.index for r in policy.order(window, 100.0)][0] == (1 if first else 3)


@pytest.mark.parametrize("most, first", [(0.2, True), (0.1, False)])
def test_overdue_requests_go_first_only_while_fewer_than_fcfs_max_caches_wait(
        most: float, first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """504 prompt tokens wait, 0.12 of the 4,096-slot cache: under FCFS_MAX 0.2 the overdue request goes first, not
    under 0.1 (a deep queue, where fcfs's own waits are longer than the clock's)."""
    monkeypatch.setattr(Auto, "FCFS_LATE", 0.0)
    monkeypatch.setattr(Auto, "FCFS_MAX", most)
    got, policy = overdue_queue()
    assert policy.backlog == 504
    assert got == ([1, 2, 3, 4] if first else [2, 3, 4, 1])
