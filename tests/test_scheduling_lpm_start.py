"""auto's start on a cache under one H100's KV (radixkv/scheduling/auto.py, LPM_UNTIL, LPM_BUSY, VALVE): lpm's order
with a valve for the first LPM_UNTIL arrivals, then one decision, kept for the rest of the run, by the share of the
clock some request waited: lpm's order with the valve, or auto's own order. On a cache of one H100's KV, auto's own
order from the first arrival. The starvation bound with the valve: tests/test_scheduling.py."""

from __future__ import annotations

import numpy as np
import pytest
from test_scheduling import cache_prefix, make_cache, order, tokens

from radixkv.scheduling.auto import Auto
from radixkv.scheduling.scheduler import Request, Scheduler

LPM = [2, 1, 0, 3]  # lpm's order of `queue`'s requests: cached 40, 20, 0, 0
OWN = [0, 2, 1, 3]  # auto's own: 0 is due (an idle queue's first), 2 is late at once, then deadlines 48, 480


def queue(full_cache: int | None = None) -> tuple[Scheduler, list[Request], list[float]]:
    """Four requests at clock 0 (a numpy clock, as `radixkv simulate`'s), two with cached prefixes; the queue waits."""
    cache = make_cache()
    hot, warm = tokens(1, 40), tokens(2, 40)
    cache_prefix(cache, hot)
    cache_prefix(cache, warm[:20])
    now = [0.0]
    sched = Scheduler(cache, 64, schedule="auto", clock=lambda: np.float64(now[0]), full_cache=full_cache)
    reqs = [Request(i, p, len(p), 1) for i, p in enumerate([tokens(3, 30), warm + [5], hot + [7], tokens(4, 10)])]
    for r in reqs:
        sched.add(r)
    return sched, reqs, now


def test_a_small_cache_starts_in_lpm_order_and_the_valve_goes_first() -> None:
    sched, reqs, now = queue()
    now[0] = 10.0
    assert order(sched) == LPM and sched.policy.lpm is None  # 4 of LPM_UNTIL arrivals: not decided
    sched.policy.overtaken[reqs[3]] = Auto.VALVE  # VALVE later arrivals were admitted before it
    sched.policy.overtaken[reqs[0]] = Auto.VALVE + 1
    assert order(sched) == [0, 3, 2, 1]  # the valve's, oldest first, then lpm's


@pytest.mark.parametrize("busy, lpm", [(1.0, True), (1.01, False)])
def test_the_start_ends_with_one_decision_kept_for_the_run(monkeypatch: pytest.MonkeyPatch, busy: float,
                                                          lpm: bool) -> None:
    """Once LPM_UNTIL requests arrived, the share of the clock some request waited (1 here: the queue never emptied)
    against LPM_BUSY decides, once: lpm's order for good, or auto's own order for good."""
    monkeypatch.setattr(Auto, "LPM_UNTIL", 4)
    monkeypatch.setattr(Auto, "LPM_BUSY", busy)
    sched, reqs, now = queue()
    now[0] = 10.0
    assert order(sched) == (LPM if lpm else OWN) and sched.policy.lpm is lpm
    monkeypatch.setattr(Auto, "LPM_BUSY", 1.01 if lpm else 1.0)  # it would go the other way now: it stands
    now[0] = 20.0
    assert order(sched) == (LPM if lpm else OWN) and sched.policy.lpm is lpm


def test_a_full_size_cache_orders_by_auto_from_the_first_arrival() -> None:
    sched, reqs, now = queue(full_cache=make_cache().config.num_slots)
    assert order(sched) == OWN and sched.policy.lpm is False


def test_lpm_until_0_turns_the_start_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Auto, "LPM_UNTIL", 0)
    sched, reqs, now = queue()
    assert order(sched) == OWN and sched.policy.lpm is False


@pytest.mark.parametrize("idle, lpm", [(1.01, False), (0.5, None)])
def test_from_lpm_early_arrivals_a_quiet_queue_decides_at_once(monkeypatch: pytest.MonkeyPatch, idle: float,
                                                               lpm: bool | None) -> None:
    """From LPM_EARLY arrivals on, a share under LPM_IDLE decides for auto's own order before LPM_UNTIL (the share is 1
    here: an idle level above it decides, one under it leaves the start undecided, in lpm's order)."""
    monkeypatch.setattr(Auto, "LPM_EARLY", 4)
    monkeypatch.setattr(Auto, "LPM_IDLE", idle)
    sched, reqs, now = queue()
    now[0] = 10.0
    assert order(sched) == (LPM if lpm is None else OWN) and sched.policy.lpm is lpm
