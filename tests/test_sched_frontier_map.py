"""bench/sched_frontier_map.py: sched_frontier's JSONs as one map of which misses any order reaches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts import ROOT, load_script

fmap = load_script(ROOT / "bench" / "sched_frontier_map.py")
BASE = {"fcfs_mean": 10.0, "fcfs_p99": 50.0, "lpm_mean": 8.0, "lpm_p99": 60.0, "lpm_hit": 0.3}


def point(mean_lpm: float, p99_min: float, hit_lpm: float = 0.0, mean_fcfs: float = 0.5) -> dict:
    meets = mean_lpm <= 1.02 and p99_min <= 1.0 and hit_lpm >= -0.01 and mean_fcfs <= 0.9
    return {"mean_lpm": mean_lpm, "p99_min": p99_min, "hit_lpm": hit_lpm, "mean_fcfs": mean_fcfs,
            "meets": meets, "runs_met": int(meets)}


def frontier_json(path: Path, settings: list[str], cells: dict[tuple[str, float], dict], base: dict = BASE) -> str:
    cells_out = [{"trace": t, "capacity": "1", "load": x, "base": base, "points": pts} for (t, x), pts in cells.items()]
    path.write_text(json.dumps({"replicates": 3, "requests": 3000, "settings": settings, "cells": cells_out}))
    return str(path)


def test_each_class_and_the_line_that_binds(tmp_path: Path) -> None:
    settings = ["main", "K=24"]
    a = frontier_json(tmp_path / "a.json", settings, {
        ("base-s1", 0.8): {"main": point(0.98, 0.95), "K=24": point(1.1, 0.9)},  # met
        ("base-s2", 0.8): {"main": point(0.98, 1.05), "K=24": point(1.01, 0.99), "hrrn": point(1.0, 1.2)},
        ("base-s3", 0.8): {"main": point(0.98, 1.05), "K=24": point(1.025, 1.004)},  # near: 0.005 over mean's line
        ("base-s4", 0.8): {"main": point(0.95, 1.10), "K=24": point(1.0, 1.02)},  # apart: best 0.02 over p99's
    })
    shallow = dict(BASE, lpm_mean=9.8)  # lpm's mean 0.98 of fcfs's: nobody gets to 0.9 of fcfs's
    b = frontier_json(tmp_path / "b.json", settings, {
        ("short-s12", 1.2): {"main": point(0.99, 0.9, mean_fcfs=0.97), "K=24": point(0.99, 0.95, mean_fcfs=0.96)}},
        base=shallow)
    cells = fmap.merged([a, b])
    rows = {key: fmap.classify(key[2], cell) for key, cell in cells.items()}
    kinds = {key[0]: r["class"] for key, r in rows.items()}
    assert kinds == {"base-s1": "met", "base-s2": "reached", "base-s3": "near", "base-s4": "apart",
                     "short-s12": "blocked"}
    s2, s3, s4 = (rows[("base-s%d" % i, "1", 0.8, 3)] for i in (2, 3, 4))
    assert s2["reached_by"] == ["K=24"] and s2["orders_meeting"] == [] and s2["main_binds"] == "p99"
    assert s3["best"] == "K=24" and s3["binds"] == "mean" and s3["gap"] == pytest.approx(0.005)
    assert s4["binds"] == "p99" and s4["gap"] == pytest.approx(0.02)
    short = rows[("short-s12", "1", 1.2, 3)]
    assert short["blocked"] == ["0.9f"] and short["least"]["0.9f"] == pytest.approx(0.96 - 0.9)
    assert short["lpm_mean_fcfs"] == pytest.approx(0.98) and short["least"]["p99"] == pytest.approx(-0.1)


def test_fcfs_and_lpm_count_as_points_and_a_blocked_line_needs_all_of_them_to_miss(tmp_path: Path) -> None:
    """0.9f: lpm's own mean 0.85 of fcfs's meets it, so the cell is not blocked; p99: fcfs's own tail (the min)."""
    path = frontier_json(tmp_path / "c.json", ["main"], {("base-s2", 1.2): {"main": point(1.0, 1.1, mean_fcfs=0.95)}},
                         base=dict(BASE, lpm_mean=8.5))
    row = fmap.classify(1.2, fmap.merged([path])[("base-s2", "1", 1.2, 3)])
    assert row["blocked"] == [] and row["class"] == "apart"
    assert row["least"]["0.9f"] == pytest.approx(0.85 - 0.9) and row["least"]["p99"] == pytest.approx(0.0)
    assert row["orders_meeting"] == []  # lpm's p99 is over fcfs's, fcfs's mean over 0.9 of its own
    tail = dict(BASE, lpm_mean=8.5, lpm_p99=45.0, fcfs_hit=0.25)  # lpm's tail the min: lpm meets every goal
    path = frontier_json(tmp_path / "d.json", ["main"], {("base-s2", 1.2): {"main": point(1.0, 1.1, mean_fcfs=0.95)},
                                                        ("base-s3", 0.8): {"main": point(1.0, 1.1)}}, base=tail)
    rows = {k: fmap.classify(k[2], c) for k, c in fmap.merged([path]).items()}
    assert [r["orders_meeting"] for r in rows.values()] == [["lpm"], ["lpm"]]
    light = dict(tail, lpm_p99=55.0, lpm_mean=9.9)  # at 0.8 fcfs meets them all (mean 1.01 of lpm's, its hit 0.05 off)
    cell = fmap.merged([frontier_json(tmp_path / "e.json", ["main"], {("base-s3", 0.8): {"main": point(1.0, 1.1)}},
                                      base=light)])[("base-s3", "1", 0.8, 3)]
    assert fmap.classify(0.8, cell)["orders_meeting"] == []  # fcfs's hit rate 0.05 under lpm's
    cell["base"] = dict(light, fcfs_hit=0.295)
    assert fmap.classify(0.8, cell)["orders_meeting"] == ["fcfs"]


def test_the_summary_counts_each_group_with_the_sweeps_cells(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two frontier JSONs of one cell merge their points; the sweep's met cells and its unmapped misses count."""
    a = frontier_json(tmp_path / "a.json", ["main"], {("base-s2", 0.8): {"main": point(0.98, 1.05)}})
    b = frontier_json(tmp_path / "b.json", ["main", "K=24"], {("base-s2", 0.8): {"main": point(0.98, 1.05),
                                                                                  "K=24": point(1.0, 0.98)}})
    met, miss = {"hit": True, "0.9f": None, "p99": True}, {"hit": True, "p99": False}
    sweep_cells = [{"trace": "base-s1", "capacity": "1", "load": 0.8, "goals": met},
                   {"trace": "base-s2", "capacity": "1", "load": 0.8, "goals": miss},
                   {"trace": "base-s3", "capacity": "1", "load": 0.8, "goals": miss},
                   {"trace": "base-s31", "capacity": "1", "load": 0.8, "goals": met}]
    (tmp_path / "sw.json").write_text(json.dumps({"replicates": 3, "cells": sweep_cells}))
    assert fmap.main(["--frontier", a, "--frontier", b, "--sweep", str(tmp_path / "sw.json"),
                      "--json", str(tmp_path / "map.json")]) == 0
    out = capsys.readouterr().out
    assert "| tune+held 1 | 3 | 3 | 1 | 1 | 0 | 0 | 0 | 1 |" in out  # s1 met, s2 reached (b's K=24), s3 unmapped
    assert "| fresh 1 | 3 | 1 | 1 | 0 |" in out
    rows = json.loads((tmp_path / "map.json").read_text())
    assert [(r["trace"], r["class"], r["reached_by"]) for r in rows] == [("base-s2", "reached", ["K=24"])]
