"""bench/policy_grid.py's `--classes`: where a grid cell's margin is lost, split into the part no switch
between the adaptive policy's two experts reaches (the better of LRU and LFU against the best fixed
policy) and the part the switching loses (adaptive against that better expert); `--against`: what a
scan moved against an earlier run."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import ROOT, load_script


def test_classes_split_each_cells_loss_between_the_experts_reach_and_the_switching() -> None:
    grid = load_script(ROOT / "bench" / "policy_grid.py")
    hits = {  # cell|share -> hit rates; margins below in points
        "a|0.1": {"lru": 0.50, "lfu": 0.40, "fifo": 0.50, "slru": 0.53, "adaptive": 0.505},  # slru 3 above lru
        "b|0.05": {"lru": 0.30, "lfu": 0.35, "fifo": 0.30, "slru": 0.34, "adaptive": 0.335},  # lfu best
        "c|0.25": {"lru": 0.60, "lfu": 0.62, "fifo": 0.60, "slru": 0.624, "adaptive": 0.608},  # slru 0.4 above lfu
        "d|0.5": {"lru": 0.80, "lfu": 0.70, "fifo": 0.80, "slru": 0.75, "adaptive": 0.797},  # -0.3: kept out
        "e|0.1": {"lru": 0.40, "lfu": 0.30, "fifo": 0.40, "slru": 0.30, "adaptive": 0.38},  # lru best
    }
    rows = [(k.split("|")[0], float(k.split("|")[1]),
             100 * (h["adaptive"] - max(h[p] for p in grid.FIXED))) for k, h in hits.items()]
    assert grid.classify(rows, hits, -1.0).splitlines() == [  # worst first; then a line a class
        "| cell | share | best | best - expert | expert | adaptive - expert | margin |",
        "| a | 10% | slru | 3.00 | lru | +0.50 | -2.50 |",
        "| e | 10% | lru | 0.00 | lru | -2.00 | -2.00 |",
        "| c | 25% | slru | 0.40 | lfu | -1.20 | -1.60 |",
        "| b | 5% | lfu | 0.00 | lfu | -1.50 | -1.50 |",
        "slru best, beyond the experts: 1 cells, better expert vs best -3.00, adaptive vs better expert +0.50",
        "lru best: 1 cells, better expert vs best +0.00, adaptive vs better expert -2.00",
        "slru best, lfu within 1: 1 cells, better expert vs best -0.40, adaptive vs better expert -1.20",
        "lfu best: 1 cells, better expert vs best +0.00, adaptive vs better expert -1.50"]
    assert len(grid.classify(rows, hits, -2.2).splitlines()) == 3  # a alone, and its class


def test_against_lists_the_cells_that_moved_and_those_new_below_minus_one(tmp_path: Path) -> None:
    grid = load_script(ROOT / "bench" / "policy_grid.py")
    before = tmp_path / "before.txt"
    before.write_text("\n".join([  # a --cells output: the cells, a summary, the classes' table (skipped)
        "| seed:1 | 5% | 0.5000 | 0.4000 | 0.5000 | 0.4500 | 0.5000 | +0.00 |",
        "| seed:1 | 10% | 0.6000 | 0.6500 | 0.6000 | 0.6400 | 0.6400 | -1.00 |",
        "| seed:1 | 25% | 0.7000 | 0.7200 | 0.7000 | 0.7100 | 0.7150 | -0.50 |",
        "| seed:2 | 5% | 0.3000 | 0.3300 | 0.3000 | 0.3300 | 0.3000 | -3.00 |",
        "tune: 4 cells, worst -3.00 (seed:2 5%), mean -1.125, below -0.5: 2, below -1: 1",
        "| cell | share | best | best - expert | expert | adaptive - expert | margin |",
        "| seed:2 | 5% | lfu | 0.00 | lfu | -3.00 | -3.00 |"]) + "\n")
    cells = grid.read_cells(str(before))
    assert cells == {("seed:1", "5%"): 0.0, ("seed:1", "10%"): -1.0, ("seed:1", "25%"): -0.5, ("seed:2", "5%"): -3.0}
    rows = [("seed:1", 0.05, -0.3), ("seed:1", 0.1, -1.006), ("seed:1", 0.25, -0.449), ("seed:2", 0.05, -1.2),
            ("seed:3", 0.05, -9.0)]  # seed:3 is not in `before`: left out; 25% moved by 0.05 exactly: not listed
    assert grid.against(rows, cells).splitlines() == [
        "against: 4 cells, 2 moved by more than 0.05 (1 better), new below -1: seed:1 10% -1.00 -> -1.01",
        "| seed:1 | 5% | +0.00 | -0.30 |",
        "| seed:2 | 5% | -3.00 | -1.20 |"]


def test_the_fresh_grid_is_seeds_6000_to_6069_that_no_other_grid_uses_and_prints_its_own_summary(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Round 27's fresh grid: scored once per candidate, tuned on by nobody, so no other grid holds its seeds."""
    grid = load_script(ROOT / "bench" / "policy_grid.py")
    others = set(grid.TUNE + grid.CHECK + grid.held_names([]) + grid.BENCH + grid.FIT + grid.VAL)
    assert grid.FRESH == [f"seed:{s}" for s in range(6000, 6070)] and not set(grid.FRESH) & others
    assert grid.grid_names("fresh", [], "seed:600") == grid.FRESH[:10]

    def fake(job: tuple[str, dict[str, object], tuple[str, ...], int | None]) -> dict[str, float]:
        """lru best everywhere; adaptive 0.8 points below it."""
        name, _, policies, _ = job
        rate = {"lru": 0.5, "lfu": 0.4, "fifo": 0.3, "slru": 0.45, "adaptive": 0.492}
        return {f"{name}|{f}|{p}": rate[p] for f in grid.FRACS for p in policies}

    monkeypatch.setattr(grid, "run", fake)
    grid.main(["fresh", "--only", "seed:6001"])
    out = capsys.readouterr().out
    assert "fresh: 4 cells, worst -0.80 (seed:6001 5%), mean -0.800, below -0.5: 4, below -1: 0" in out
