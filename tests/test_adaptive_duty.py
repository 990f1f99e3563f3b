"""The adaptive policy's duty-cycled shadow (eviction/adaptive.py): the other expert's shadow stops while
the followed expert clearly leads, and restarts, warm, after OFF turnovers or at once when the real
cache's hit ratio falls (the canary)."""

from __future__ import annotations

import torch

from radixkv import RadixCache
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import capacity, sim_config
from radixkv.bench.workloads import Request, make_workload
from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.duty import DutyCycle


def _serve(cache: RadixCache, r: Request) -> None:
    m = cache.match_prefix(r.tokens[:r.prompt_len])
    cache.lock(m.node)
    cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
    cache.unlock(m.node)


def test_the_other_experts_shadow_stops_while_the_followed_one_leads_and_restarts_warm() -> None:
    """tools at page 16, 10% of its unique tokens: LRU leads clearly, the shadow stops (freed, with no
    twin), and restarts as a copy of the real cache whose leads count only after REWARM turnovers. Two
    caches on the same trace, the first one's canary made to fire (its floor set above any hit ratio),
    the second's never: they stop together, the first restarts after one CANARY window, the second
    only after OFF turnovers."""
    reqs, page = make_workload("tools"), 16
    cap = capacity(0.1, build_segments(reqs, page).total_pages * page, max(len(r.tokens) for r in reqs), page)
    caches = [RadixCache(sim_config(cap, page, "adaptive", 4096)) for _ in range(2)]
    policies = [c.tree.policy for c in caches]
    stops: list[list[int]] = [[], []]
    restarts: list[list[int]] = [[], []]
    for i, r in enumerate(reqs):
        for j, (cache, policy) in enumerate(zip(caches, policies)):
            assert isinstance(policy, Adaptive)
            running, mode = bool(policy._shadows), policy.mode
            _serve(cache, r)
            if policy._tree is None:
                continue
            if running and not policy._shadows:  # stopped: freed, twin too, and it stays with its expert
                assert policy.mode == mode and policy._twin is None and policy._duty.left > 0
                policy._duty.floor = 1.0 if j == 0 else -1.0
                stops[j].append(i)
                cache.check_invariants()
            elif policy._shadows and not running and stops[j]:  # restarted: the other expert's copy, warming
                assert list(policy._shadows) == [1 - policy.mode] and policy._duty.warm > 0
                restarts[j].append(i)
                cache.check_invariants()
            if policy._duty.warm > 0:  # a warming shadow's leads do not count
                assert policy._duty.calm == 0 and policy._duty.calm_lead == 0 and policy._duty.calm_var == 0
    assert stops[0] and stops[0][0] == stops[1][0], stops
    assert restarts[0] and restarts[1] and restarts[0][0] < restarts[1][0], restarts
    for cache in caches:
        cache.check_invariants()


def _window(duty: DutyCycle, leads: list[int]) -> bool:
    """One window of `leads` (one turnover of a 100-token cache, steady): whether it stops the shadow."""
    for lead in leads:
        duty.lookup(lead, 0, 1)
    return duty.cached(100, 100, True)


def test_a_stop_judges_the_window_alone_and_with_the_windows_just_before_it_in_the_same_favour() -> None:
    """Two windows each 2.5 sd in the followed expert's favour: not a stop alone (QUIET_Z 3), a stop
    together (5 / sqrt(2) = 3.5 sd) with a span of 2, never with a span of 1; a window in the other
    expert's favour between them breaks the run."""
    leads = [-3, -1, -1, -1, -1, -1, -1, -2]  # sum -11, squares 19: 2.52 sd
    for span, between, stops in ((1, False, [False, False]), (2, False, [False, True]), (2, True, [False, False])):
        duty = DutyCycle(1.0, 3.0, span, 2.0, 0.0, 2.0, 8.0, 0.5, 0.03, 0.5)  # (no stop on a tie)
        got = [_window(duty, leads)]
        if between:
            assert not _window(duty, [1])
        got.append(_window(duty, leads))
        assert got == stops, (span, between)
        assert (duty.left, len(duty.run)) == ((200, 0) if stops[-1] else (0, 1))  # a stop: OFF turnovers, no run


def _duty(tie_eps: float) -> DutyCycle:
    a = Adaptive
    return DutyCycle(a.QUIET, a.QUIET_Z, a.QUIET_SPAN, a.TIE_Z, tie_eps, a.OFF, a.OFF_MAX, a.REWARM, a.DROP, a.CANARY)


def test_a_window_that_bounds_the_other_experts_lead_under_tie_eps_stops_and_one_that_does_not_never() -> None:
    """400 lookups of 1,000 tokens in a window (one turnover): leads of +-5 tokens in turn are a tie (lead
    0 + 2 sd = 200 < 0.002 x 400,000); the other expert ahead by 5 tokens a lookup, or by 200 tokens at a
    time in one lookup of 20, is not; a window with no lead but 0 bounds nothing; TIE_EPS 0 never stops."""
    def window(duty: DutyCycle, leads: list[int]) -> bool:
        for lead in leads:
            duty.lookup(lead, 500, 1000)
        return duty.cached(100, 100, True)
    tied, ahead, lumpy, flat = [5, -5] * 200, [5] * 400, ([200] + [0] * 19) * 20, [0] * 400
    assert window(_duty(0.002), tied) and _duty(0.002).tie_z == 2.0
    assert not window(_duty(0.0), tied)
    for leads in (ahead, lumpy, flat):
        duty = _duty(0.002)
        assert not window(duty, leads) and not window(duty, leads), leads[:3]


def _rag_stops(duty: DutyCycle) -> tuple[int, list[int]]:
    """rag at page 1, its first 150 requests in a cache of 25% of their unique tokens (one of
    bench/events_instructions.py's cells) under the default policy with `duty`: requests served with
    the other expert's shadow stopped, and the modes followed after each request."""
    reqs, page = make_workload("rag")[:150], 1
    cap = capacity(0.25, build_segments(reqs, page).total_pages * page, max(len(r.tokens) for r in reqs), page)
    cache = RadixCache(sim_config(cap, page, "adaptive", 4096))
    policy = cache.tree.policy
    assert isinstance(policy, Adaptive)
    policy._duty = duty
    stopped, modes = 0, []
    for r in reqs:
        stopped += policy._tree is not None and not policy._shadows
        _serve(cache, r)
        modes.append(policy.mode)
    cache.check_invariants()
    return stopped, modes


def test_a_short_rag_run_whose_experts_tie_stops_its_shadow_on_the_tie_rule_alone() -> None:
    """rag p1 150: no window favours the followed expert by QUIET_Z (3) sd, alone or over two, so the
    lead rule never stops it (TIE_EPS 0); its other expert's lead is bounded under TIE_EPS, so the tie rule
    does, with the same experts followed request for request."""
    tie, modes = _rag_stops(_duty(Adaptive.TIE_EPS))
    no_tie, same_modes = _rag_stops(_duty(0.0))
    assert no_tie == 0 and tie > 0 and modes == same_modes, (tie, no_tie)
