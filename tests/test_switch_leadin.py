"""bench/switch_leadin.py (pure core only): the adaptive policy's lead-in (the first eviction to the first switch),
read off one run: the prior's pick and how it was made, the lead-in's length and loss, and first-switch tests
read off the evidence the policy's own test read."""

from __future__ import annotations

import numpy as np
import pytest
from scripts import ROOT, load_script

from radixkv import COMPILED_CORE
from radixkv.bench.runner import replay

pytestmark = pytest.mark.skipif(COMPILED_CORE, reason="wraps the prior's replay, which the compiled class calls "
                                "natively")
CELL, SHARE = "seed:2013", 0.1  # the held-out cell with three switches after the prior (test_adaptive.py)


@pytest.fixture(scope="module")
def sl():  # noqa: ANN201 - a module
    return load_script(ROOT / "bench" / "switch_leadin.py")


@pytest.fixture(scope="module")
def cell(sl):  # noqa: ANN001, ANN201 - the module, a Cell
    reqs, page, caps = sl.shares(CELL)
    cap = dict(caps)[SHARE]
    return sl.trace_cell(reqs, cap, page, CELL, SHARE), reqs, cap, page


def test_the_lead_in_is_the_priors_wrong_pick_and_its_loss_the_plain_experts_gap(sl, cell) -> None:  # noqa: ANN001
    c, reqs, cap, page = cell
    st = load_script(ROOT / "bench" / "switch_transient.py")
    rates = {p: replay(reqs, cap, p, page).hit_rate for p in ("lru", "lfu")}
    assert [float(h.sum()) / c.asked.sum() for h in c.hits] == [pytest.approx(rates[p]) for p in ("lru", "lfu")]
    assert c.how == "replay 0" and c.prior == 0 and c.better == 1  # the replay kept LRU; LFU wins the trace
    row = sl.lead_in_row(c)
    assert row["wrong"] and row["switched"] and 0 < row["requests"] < row["of"] and row["turnovers"] > 0
    # the lead-in's loss is switch_transient's lead-in decision part, from the same requests
    assert row["loss"] == pytest.approx(st.decompose(reqs, cap, page).loss["lead-in", "decision"], abs=1e-9)
    assert row["loss"] < row["after"] <= 0 and row["differ"] > 0 and 0 <= row["first_differ"] < row["requests"]
    # the evidence the switch was made on favoured the expert it went to (read before the switch's flip)
    assert row["lead"] > 0 and row["zeff"] > sl.Adaptive.Z ** 2


def test_the_policys_own_test_never_passes_before_its_first_switch_and_a_laxer_one_can(sl) -> None:  # noqa: ANN001
    """fit's seed 4042 (60 requests): at 50% the replay saw no lookup differ, kept LRU, and LFU wins (a 34-request
    lead-in, 3.26 points lost); at 10% LRU wins. Any lead for the other expert (no veto) passes 6 requests before
    the policy's switch at 50%, and 7 requests before the end at 10%, where it would leave the right expert."""
    reqs, page, caps = sl.shares("seed:4042")
    right, wrong = (sl.trace_cell(reqs, dict(caps)[f], page) for f in (0.1, 0.5))
    assert wrong.how == right.how == "replay 0" and wrong.prior == right.prior == right.better == 0 != wrong.better
    for c in (right, wrong):
        assert sl.test_reads(c, sl.parse_test("base"), 0.2) == (0, 0.0)
    at = np.flatnonzero(wrong.lead_in)
    sooner, gap = sl.test_reads(wrong, sl.parse_test("0/1/0/0"), 0.2)
    assert sooner == 6 and gap == pytest.approx(wrong.points(slice(int(at[-1]) + 1 - sooner, int(at[-1]) + 1)))
    assert gap > 0  # the lead-in loss it would end sooner
    sooner, gap = sl.test_reads(right, sl.parse_test("0/1/0/0"), 0.2)
    assert sooner == 7 and gap < 0  # the other expert's gap after it: a loss
    assert sl.parse_test("0.02/4/0.5/0") == (0.02, 4.0, 0.5, 0.0)
    with pytest.raises(Exception, match="MIN_LEAD/UNANIMOUS/Z/VETO"):
        sl.parse_test("0.02/4")


def test_the_report_groups_the_cells_by_the_priors_decision(sl, cell) -> None:  # noqa: ANN001
    out = sl.report([cell[0]], ["base", "0/1/0/0"], 0.2, 0.0)
    assert out[0].startswith("| cell | share | E | prior | how |")
    assert out[2].startswith(f"| {CELL} | 10% | LFU | LRU | replay 0 | 23 (320) |")  # (the replay saw none differ)
    assert any(line.startswith("| LRU | replay 0 | 1 | 1 | -0.18 (-0.178) |") for line in out)
    assert [sl.group(h) for h in ("dense", "replay 0", "replay 7", "no history")] == [
        "dense", "replay 0", "replay 1+", "no history"]
