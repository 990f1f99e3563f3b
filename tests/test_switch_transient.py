"""bench/switch_transient.py: the adaptive policy's loss split by phase (lead-in, a switch's transient, steady state)
and by part (the decision an oracle that follows the same experts' plain hits makes, the state it lacks)."""

from __future__ import annotations

import pytest
from scripts import ROOT, load_script

from radixkv.bench.runner import replay

CELL, SHARE = "seed:2013", 0.1  # the held-out cell with three switches after the prior (test_adaptive.py)


@pytest.fixture(scope="module")
def st():  # noqa: ANN201 - a module
    return load_script(ROOT / "bench" / "switch_transient.py")


def test_the_parts_sum_to_the_loss_and_the_lead_in_follows_the_plain_expert_exactly(st) -> None:  # noqa: ANN001
    reqs, page, caps = st.shares(CELL)
    cap = dict(caps)[SHARE]
    row = st.decompose(reqs, cap, page)
    rates = {p: replay(reqs, cap, p, page).hit_rate for p in st.FIXED + ("adaptive",)}
    assert row.better == 1 and row.moves == [1, 0, 1]  # the prior's LRU, then LFU, LRU and LFU (RESULTS)
    assert row.expert == pytest.approx(100 * (rates["adaptive"] - rates["lfu"]), abs=1e-9)  # observing changes none
    assert row.margin == pytest.approx(100 * (rates["adaptive"] - max(rates[p] for p in st.FIXED)), abs=1e-9)
    loss = row.loss
    assert sum(loss[p, q] for p in st.PHASES for q in st.PARTS) == pytest.approx(row.expert, abs=1e-9)
    for p in st.PHASES:  # each phase's part is the sum of its experts'
        for q in st.PARTS:
            assert loss[p, q] == pytest.approx(sum(loss[p, q, e] for e in st.EXPERTS), abs=1e-12)
    # until its first switch the policy's real cache is the plain expert's, request for request (a phase read one
    # request late or early would give a switch's request the other expert's hit)
    assert loss["lead-in", "state"] == 0.0 and loss["lead-in", "decision"] < 0
    assert loss["transient", "state"] != 0.0 and row.pre > 0


def test_the_tables_class_each_cell_by_its_switches_and_sum_over_them(st) -> None:  # noqa: ANN001
    rows = [st.Row({(p, q): e / 6 for p in st.PHASES for q in st.PARTS}
                   | {(p, q, x): e / 12 for p in st.PHASES for q in st.PARTS for x in st.EXPERTS}, m, 1, e)
            for m, e in (([], 0.0), ([1], -1.0), ([0], 2.0), ([1, 0], -3.0), ([1], -0.5))]
    assert [r.kind for r in rows] == ["no switch", "one switch, to E", "one switch, from E", "two or more switches",
                                      "one switch, to E"]
    lines = st.table(rows)
    assert lines[0].startswith("| class | cells | adaptive - E | lead-in decision | lead-in state | transient")
    assert lines[4].startswith("| one switch, to E | 2 | -1.50 | -0.25 |")  # classes sorted by name
    assert lines[-2].startswith("| all | 5 | -2.50 |") and lines[-1].startswith("| share of the mean | | -0.500 |")
    by = st.by_expert(rows)
    assert len(by) == 2 + len(st.PHASES) * len(st.EXPERTS)
    assert by[2] == "| lead-in | lru | -0.21 | -0.21 | -0.042 | -0.042 |"  # -2.5 / 12 summed, then over 5 cells


def test_the_bounds_take_the_transients_state_or_every_state_part_off_the_margin(st) -> None:  # noqa: ANN001
    loss = {(p, q): 0.0 for p in st.PHASES for q in st.PARTS}
    rows = [st.Row(loss | {("transient", "state"): -0.75, ("steady", "state"): 2.0}, [1], 1, -0.8, margin=-0.8),
            st.Row(loss | {("transient", "state"): -0.5}, [1], 1, -1.5, margin=-1.5)]
    assert st.bounds(rows) == ["adaptive: worst -1.50, mean -1.150, below -0.5: 2, below -1: 1",
                               "no transient state: worst -1.00, mean -0.525, below -0.5: 1, below -1: 0",
                               "oracle: worst -2.05, mean -1.525, below -0.5: 2, below -1: 1"]
