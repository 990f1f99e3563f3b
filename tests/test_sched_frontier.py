"""bench/sched_frontier.py: auto over a grid of its constants on sched_sweep's cells, judged as the sweep judges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts import ROOT, load_script

from radixkv.scheduling.auto import Auto

frontier = load_script(ROOT / "bench" / "sched_frontier.py")
sweep = frontier.sweep


def run(hit: float, mean: float, p99: float) -> dict[str, float]:
    return {"hit_rate": hit, "ttft_mean_s": mean, "ttft_p99_s": p99}


def test_settings_start_with_main_and_name_every_axis() -> None:
    grid = frontier.settings(["SLOWDOWN=24,48 OVERTAKEN=8,16", "SHARE=0.3 SLOWDOWN=96"])
    assert grid[0] == {"SLOWDOWN": Auto.SLOWDOWN, "OVERTAKEN": Auto.OVERTAKEN, "SHARE": Auto.SHARE}
    assert len(grid) == 5  # main is (48, 16): in the first product, listed once
    assert all(set(s) == {"SLOWDOWN", "OVERTAKEN", "SHARE"} for s in grid)
    assert [frontier.label(s) for s in grid] == ["main", "OVERTAKEN=8 SLOWDOWN=24", "SLOWDOWN=24",
                                                 "OVERTAKEN=8", "SHARE=0.3 SLOWDOWN=96"]
    with pytest.raises(SystemExit):
        frontier.settings(["NOT_A_CONSTANT=1"])


def test_a_point_is_judged_on_the_medians_as_the_sweep_judges() -> None:
    f, lpm = run(0.10, 10.0, 50.0), run(0.20, 7.0, 80.0)
    reps = [(f, lpm, run(0.195, 7.0, 49.0)), (f, lpm, run(0.195, 7.1, 51.0)), (f, lpm, run(0.18, 9.0, 45.0))]
    p = frontier.judge(reps, 1.2)
    assert p.mean_lpm == pytest.approx(7.1 / 7.0) and p.p99_min == pytest.approx(49.0 / 50.0)
    assert p.hit_lpm == pytest.approx(-0.005) and p.mean_fcfs == pytest.approx(0.71)
    assert p.meets and p.runs_met == 1  # the second run's p99 and the third's hit rate and mean miss
    assert p.gap(1.2) == pytest.approx(-0.005)  # the hit rate's line is the nearest: 0.005 inside it
    slow = frontier.judge([(f, lpm, run(0.2, 9.5, 40.0))], 1.2)  # mean under lpm's x 1.02? no; under 0.9 fcfs? no
    assert not slow.meets and slow.gap(1.2) == pytest.approx(9.5 / 7.0 - 1.02)
    assert frontier.judge([(f, lpm, run(0.2, 9.5, 40.0))], 0.8).gap(0.8) == slow.gap(1.2)


def test_the_sweeps_goals_and_a_points_gap_read_one_table_of_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """sweep.LINES is the goals' one table: a line moved there moves both the sweep's verdict and the gap."""
    f, lpm, x = run(0.10, 10.0, 50.0), run(0.20, 7.0, 60.0), run(0.185, 7.5, 49.0)
    p = frontier.judge([(f, lpm, x)], 1.2)
    assert p.over(1.2) == pytest.approx({"hit": 0.005, "mean": 7.5 / 7 - 1.02, "0.9f": -0.15, "p99": -0.02})
    assert list(p.over(0.8)) == ["hit", "mean", "p99"] and p.gap(1.2) == pytest.approx(7.5 / 7 - 1.02)
    assert sweep.goals(f, lpm, x, 1.2) == {"hit": False, "mean": False, "0.9f": True, "p99": True}
    monkeypatch.setitem(sweep.LINES, "mean", 1.1)
    monkeypatch.setitem(sweep.LINES, "hit", -0.02)
    monkeypatch.setattr(sweep, "HEAVY", 1.0)
    assert sweep.goals(f, lpm, x, 1.0) == {"hit": True, "mean": True, "0.9f": True, "p99": True}
    assert frontier.judge([(f, lpm, x)], 1.2).meets and p.gap(1.0) == pytest.approx(-0.005)
    assert p.over(1.0)["0.9f"] == pytest.approx(-0.15)


def test_cells_from_a_sweeps_json_and_the_settings_met_together(tmp_path: Path) -> None:
    cells = [{"trace": "base-s1", "capacity": "1", "load": 0.8, "goals": {"hit": True, "0.9f": None}},
             {"trace": "base-s2", "capacity": "1", "load": 1.2, "goals": {"hit": True, "p99": False}}]
    (tmp_path / "sw.json").write_text(json.dumps({"cells": cells}))
    assert frontier.cells_from_json(str(tmp_path / "sw.json"), "failing") == [frontier.Cell("base-s2", "1", 1.2)]
    assert frontier.cells_from_json(str(tmp_path / "sw.json"), "met") == [frontier.Cell("base-s1", "1", 0.8)]
    assert len(frontier.cells_from_json(str(tmp_path / "sw.json"), "all")) == 2
    assert frontier.parse_cells("base-s2|1/4|0.8") == [frontier.Cell("base-s2", "1/4", 0.8)]
    yes, no = frontier.Point(1, 1, 0, 0.5, True, 1), frontier.Point(1, 2, 0, 0.5, False, 0)
    points = {"a": {"main": no, "K": yes}, "b": {"main": yes, "K": yes}}
    assert frontier.joint(points) == [("K", ["a", "b"]), ("main", ["b"])]


def test_a_settings_constants_do_not_leak_into_the_next_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """One process (`--jobs 1` runs in this one: no fork) runs main, then (K 1, OVERTAKEN 64), then OVERTAKEN 64
    alone: each run is the sweep's own auto run with those constants (K 1 does not stay on), and Auto's constants
    are its own again after them."""
    constants = {name: getattr(Auto, name) for name in ("SLOWDOWN", "OVERTAKEN")}
    args = ["--cells", "base-s1|1|1.2", "--requests", "60", "--replicates", "1", "--jobs", "1",
            "--grid", "SLOWDOWN=1,48 OVERTAKEN=64", "--outside", "hrrn", "--plots", "1",
            "--png-dir", str(tmp_path / "png"), "--traces-dir", str(tmp_path / "traces"),
            "--cache", str(tmp_path / "base.json"), "--runs", str(tmp_path / "runs.json"),
            "--json", str(tmp_path / "f.json")]
    assert frontier.main(args) == 0
    assert {name: getattr(Auto, name) for name in constants} == constants
    runs = json.loads((tmp_path / "runs.json").read_text())
    mine = runs["base-s1|1|1.2|60|auto|main"]
    path = sweep.trace_path(str(tmp_path / "traces"), "base-s1", sweep.TRACES["tune"]["base-s1"], 60)
    assert sweep.run_one(("k", path, "1", 1.2, "auto", {}))[1] == mine
    late = sweep.run_one(("k", path, "1", 1.2, "auto", {"OVERTAKEN": 64.0}))[1]
    assert runs["base-s1|1|1.2|60|auto|OVERTAKEN=64"] == late and Auto.OVERTAKEN == constants["OVERTAKEN"]
    assert runs["base-s1|1|1.2|60|auto|OVERTAKEN=64 SLOWDOWN=1"]["ttft_mean_s"] != late["ttft_mean_s"]
    out = json.loads((tmp_path / "f.json").read_text())
    assert list(out["cells"][0]["points"]) == ["main", "OVERTAKEN=64 SLOWDOWN=1", "OVERTAKEN=64", "hrrn"]
    assert json.loads((tmp_path / "base.json").read_text())["base-s1|1|1.2|60|hrrn"]["schedule"] == "hrrn"
    assert (tmp_path / "png" / "base-s1_1_1.2.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "### base-s1 1 1.2" in printed and "| base-s1 1 1.2 | " in printed  # its table, the summary's row
    runs["base-s1|1|1.2|60|auto|main"]["ttft_mean_s"] = 1e6  # marked: with no --grid, main comes from the runs
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    assert frontier.main(args[:args.index("--grid")] + args[args.index("--outside"):]) == 0
    again = json.loads((tmp_path / "f.json").read_text())["cells"][0]
    assert list(again["points"]) == ["main", "hrrn"] and again["points"]["main"]["mean_lpm"] > 1e3
