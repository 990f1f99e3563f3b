"""bench/switch_scout.py: scouts in the lead-in (a small LRU/LFU pair from the first eviction to the first switch).
Without scouts it is the policy to the digit; with them (SCOUT 0.5, to LRU only, after their warmup) it leaves the
prior's LFU verdict sooner on longchat 25%; without the warmup the shrunk copies' transient takes moon:12 25% off
LFU, which wins there by 3.65 points (bench/RESULTS.md, round 26). With SCOUT_QUIET they act only while the real size
is silent (round 27); with SMALL_MAX a switch to LFU waits while a pair at half their size leads for LFU by more
(round 27, a second section). With PROBE the scouts' switch to LFU is undone at the real size's first word for LRU
(round 28); with PROBE_KEEP a switch back in the probation keeps the LFU shadow that ran from the first eviction.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scripts import ROOT, load_script

from radixkv.bench.runner import replay
from radixkv.eviction import POLICIES

SCOUT = load_script(ROOT / "bench" / "switch_scout.py").Scout
GRID = load_script(ROOT / "bench" / "policy_grid.py")


@pytest.fixture
def scout() -> Iterator[type]:
    """The Scout class registered as a policy, its constants restored after the test."""
    names = ("SCOUT", "SCOUT_TO", "SCOUT_WARM", "SCOUT_QUIET", "SMALL_MAX", "PROBE", "PROBE_FIRST", "PROBE_BACK",
             "PROBE_KEEP")
    before = {k: getattr(SCOUT, k) for k in names}
    POLICIES["scout"] = SCOUT
    try:
        yield SCOUT
    finally:
        del POLICIES["scout"]
        for k, v in before.items():
            setattr(SCOUT, k, v)


def _hits(name: str, share: float) -> dict[str, float]:
    """adaptive's and scout's hit rates on a grid cell."""
    reqs, page, caps = GRID.shares(name)
    cap = dict(caps)[share]
    return {p: replay(reqs, cap, p, page).hit_rate for p in ("adaptive", "scout")}


def test_without_scouts_it_is_the_policy(scout: type) -> None:
    scout.SCOUT = 0.0
    hits = _hits("wl:longchat:16:0", 0.25)
    assert hits["scout"] == hits["adaptive"]


def test_scouts_leave_a_wrong_lfu_verdict_sooner(scout: type) -> None:
    scout.SCOUT, scout.SCOUT_TO, scout.SCOUT_WARM = 0.5, 0, True
    hits = _hits("wl:longchat:16:0", 0.25)
    assert hits["scout"] > hits["adaptive"] + 0.002  # -1.06 -> -0.76 points


def test_the_scouts_warmup_keeps_a_right_lfu_verdict(scout: type) -> None:
    scout.SCOUT, scout.SCOUT_TO = 0.5, 0
    scout.SCOUT_WARM = False
    cold = _hits("moon:12", 0.25)
    assert cold["scout"] < cold["adaptive"] - 0.01  # +0.00 -> -2.21 points
    scout.SCOUT_WARM = True
    assert _hits("moon:12", 0.25)["scout"] == cold["adaptive"]


def test_quiet_scouts_keep_quiet_once_the_real_size_spoke(scout: type) -> None:
    """fit's seed:4036 10%: the scouts leave LFU after two lookups differed at the real size (+1.23 -> +0.56 points);
    quiet, they are dropped there and the cell is the policy's. seed:4060 10%: nothing differed at the real size
    when they leave (-1.12 -> +1.03 points), quiet or not."""
    scout.SCOUT, scout.SCOUT_TO, scout.SCOUT_WARM = 0.5, 0, True
    spoke = _hits("seed:4036", 0.1)
    assert spoke["scout"] < spoke["adaptive"] - 0.005
    silent = _hits("seed:4060", 0.1)
    assert silent["scout"] > silent["adaptive"] + 0.02
    scout.SCOUT_QUIET = True
    assert _hits("seed:4036", 0.1)["scout"] == spoke["adaptive"]
    assert _hits("seed:4060", 0.1)["scout"] == silent["scout"]


def test_a_small_pairs_lfu_lead_holds_a_silent_switch_to_lfu(scout: type) -> None:
    """fit's seed:4055 25%: quiet scouts in both directions leave LRU for LFU, which loses there by 9.27 points
    (+0.00 -> -0.98); the pair at half their size leads for LFU by 0.26 of its size, and at SMALL_MAX 0.25 the switch
    waits (the cell is the policy's). seed:4024 5% keeps its gain (-1.22 -> +0.00: LFU wins, the small lead 0.10);
    a bound no lead reaches changes nothing."""
    scout.SCOUT, scout.SCOUT_TO, scout.SCOUT_WARM, scout.SCOUT_QUIET = 0.5, -1, True, True
    wrong = _hits("seed:4055", 0.25)
    assert wrong["scout"] < wrong["adaptive"] - 0.005
    right = _hits("seed:4024", 0.05)
    assert right["scout"] > right["adaptive"] + 0.005
    scout.SMALL_MAX = 1e9
    assert _hits("seed:4055", 0.25)["scout"] == wrong["scout"]
    scout.SMALL_MAX = 0.25
    assert _hits("seed:4055", 0.25)["scout"] == wrong["adaptive"]
    assert _hits("seed:4024", 0.05)["scout"] == right["scout"]


def test_a_probation_undoes_a_silent_switch_to_lfu_at_the_real_sizes_first_word(scout: type) -> None:
    """fit's seed:4051 50%: quiet scouts in both directions leave LRU for LFU (-3.26 -> -0.25 points); on probation
    to the first lookup where LRU's match at the real size beats the real cache's, a later such lookup undoes it
    (-3.28); where the first lookup that differs ends the probation (PROBE_FIRST, it was for LFU) the gain stays.
    seed:4034 25%: there the first word is for LRU; the switch back loses (-1.22 -> -2.29) unless it keeps the LFU
    shadow that ran from the first eviction (PROBE_KEEP, -0.76). seed:4055 25%: the bounce comes at the first lookup
    that differs, where the policy already switches back: a probation changes nothing (-0.98)."""
    scout.SCOUT, scout.SCOUT_TO, scout.SCOUT_WARM, scout.SCOUT_QUIET = 0.5, -1, True, True
    gain = _hits("seed:4051", 0.5)["scout"]
    back = _hits("seed:4034", 0.25)["scout"]
    bounce = _hits("seed:4055", 0.25)["scout"]
    scout.PROBE = 1000
    assert _hits("seed:4051", 0.5)["scout"] < gain - 0.01
    scout.PROBE_FIRST = True
    assert _hits("seed:4051", 0.5)["scout"] == gain
    assert _hits("seed:4034", 0.25)["scout"] < back - 0.005
    scout.PROBE_KEEP = True
    assert _hits("seed:4034", 0.25)["scout"] > back + 0.002
    assert _hits("seed:4055", 0.25)["scout"] == bounce


def test_a_switch_back_in_the_probation_can_keep_the_steady_lfu_shadow(scout: type) -> None:
    """val's seed:5029 10%: quiet scouts leave LRU for LFU, the policy bounces back 3 lookups later (a cheap bounce,
    -0.08 points), then its later switches to LFU come later than main's (-0.71 -> -3.15 points); where the bounce
    keeps the LFU shadow that ran from the first eviction (no undo of the probation's own: PROBE_BACK off) its later
    path is main's again (-0.15). A probation with neither changes nothing."""
    scout.SCOUT, scout.SCOUT_TO, scout.SCOUT_WARM, scout.SCOUT_QUIET = 0.5, -1, True, True
    b = _hits("seed:5029", 0.1)
    scout.PROBE, scout.PROBE_BACK = 1000, False
    assert _hits("seed:5029", 0.1)["scout"] == b["scout"]
    scout.PROBE_KEEP = True
    assert _hits("seed:5029", 0.1)["scout"] > b["scout"] + 0.02
