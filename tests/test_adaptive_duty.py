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
        duty = DutyCycle(1.0, 3.0, span, 2.0, 8.0, 0.5, 0.03, 0.5)
        got = [_window(duty, leads)]
        if between:
            assert not _window(duty, [1])
        got.append(_window(duty, leads))
        assert got == stops, (span, between)
        assert (duty.left, len(duty.run)) == ((200, 0) if stops[-1] else (0, 1))  # a stop: OFF turnovers, no run


def test_a_window_whose_differing_lookups_all_favour_the_followed_expert_stops_at_sign_of_them() -> None:
    """A sign test beside the z: SIGN differing lookups in a window, every one for the followed expert, stop
    the shadow though their sum is under QUIET_Z sd (one long lookup and five short ones: 1.46 sd); a bar of
    seven does not, nor the same window with one lookup for the other expert, nor any window at SIGN 0."""
    few = [-10, -1, -1, -1, -1, -1, 0, 0]  # 6 differing lookups, all for the followed expert: sum -15, 1.46 sd
    for sign, leads, stops in ((6, few, True), (7, few, False), (0, few, False), (6, few + [1], False)):
        duty = DutyCycle(1.0, 3.0, 1, 2.0, 8.0, 0.5, 0.03, 0.5, sign)
        assert _window(duty, leads) == stops, (sign, leads)
        assert duty.left == (200 if stops else 0) and (duty.calm_for, duty.calm_against) == (0, 0)


def test_the_policys_duty_cycle_stops_on_ten_lookups_all_one_way_and_its_canary_waits_out_a_small_dip() -> None:
    """Adaptive's constants: a window of ten differing lookups, all for the followed expert, stops the shadow at
    1.8 sd (QUIET_SIGN 10; nine do not); stopped at a hit ratio of 0.70, a canary window at 0.66 (a dip of
    0.04: chat's windows swing by more) keeps it off (DROP 0.05), one at 0.60 restarts it."""
    assert not _window(Adaptive()._duty, [-10] + [-1] * 8)  # sum -18, squares 108: 1.73 sd
    duty = Adaptive()._duty
    for lead in [-10] + [-1] * 9:  # sum -19, squares 109: 1.82 sd
        duty.lookup(lead, 70, 100)
    assert duty.cached(100, 100, True)
    canary = int(duty.canary * 100)
    duty.idle_lookup(66, 100)
    assert not duty.idle(canary, 100)
    duty.idle_lookup(60, 100)
    assert duty.idle(canary, 100) and duty.warm > 0
