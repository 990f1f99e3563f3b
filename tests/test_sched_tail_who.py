"""bench/sched_tail_who.py: its recording copy of auto orders exactly as auto does, and it says for every request
which side of auto's order admitted it."""

from __future__ import annotations

import numpy as np
import pytest

from scripts import ROOT, load_script


@pytest.mark.usefixtures("auto_own_order")
def test_the_watched_auto_decides_as_auto_and_records_every_admission(tmp_path) -> None:
    who = load_script(ROOT / "bench" / "sched_tail_who.py")
    tail = load_script(ROOT / "bench" / "sched_tail.py")
    _, plain = tail.simulate("short-s12", "1/4", 1.2, "auto", 300, str(tmp_path))
    sim, out = who.watch("short-s12", "1/4", 1.2, 300, str(tmp_path))
    pol = sim.sched.policy
    assert isinstance(pol, who.Watched)
    np.testing.assert_array_equal(out.ttft_s, plain.ttft_s)  # the same decisions
    assert sorted(pol.log) == list(range(300))
    hows = [rec["how"] for rec in pol.log.values()]
    assert set(hows) <= {"first", "due", "late", "deadline", "resumed"}
    assert {"due", "late"} <= set(hows)  # load 1.2 on a quarter H100: requests wait, some become due
    assert all(rec["wait"] >= 0 and rec["ahead"] >= 0 for rec in pol.log.values())


def test_the_watched_auto_records_its_lpm_start(tmp_path) -> None:
    """The first LPM_UNTIL (300) arrivals on a quarter H100 are ordered as lpm orders them (auto.py): all 300 here."""
    who = load_script(ROOT / "bench" / "sched_tail_who.py")
    tail = load_script(ROOT / "bench" / "sched_tail.py")
    _, plain = tail.simulate("short-s12", "1/4", 1.2, "auto", 300, str(tmp_path))
    sim, out = who.watch("short-s12", "1/4", 1.2, 300, str(tmp_path))
    np.testing.assert_array_equal(out.ttft_s, plain.ttft_s)
    assert {rec["how"] for rec in sim.sched.policy.log.values()} == {"lpm"}
