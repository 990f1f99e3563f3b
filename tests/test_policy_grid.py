"""bench/policy_grid.py's `--classes`: where a grid cell's margin is lost, split into the part no switch
between the adaptive policy's two experts reaches (the better of LRU and LFU against the best fixed
policy) and the part the switching loses (adaptive against that better expert)."""

from __future__ import annotations

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
