"""Two `bench/sched_sweep.py --json` files cell by cell: which cells' verdicts differ, and by how much each
policy's mean and p99 TTFT and auto's goal ratios moved. Made to measure chance (the same code at loads
0.8, 1.2 and 0.80008, 1.20012) before reading a variant's count of cells (bench/RESULTS.md, issue 20, eighth round).

    python bench/sched_compare.py bench/out/main3k_tune.json bench/out/main3k_tune_perturbed.json
"""

from __future__ import annotations

import argparse
import json
import statistics


def ratios(cell: dict) -> tuple[float, float]:
    """auto's mean over lpm's and its p99 over min(fcfs's, lpm's)."""
    a, f, lpm = cell["auto"], cell["fcfs"], cell["lpm"]
    return a["ttft_mean_s"] / lpm["ttft_mean_s"], a["ttft_p99_s"] / min(f["ttft_p99_s"], lpm["ttft_p99_s"])


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values) * 100:.1f}%, max {max(values) * 100:.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    a = p.parse_args(argv)
    before, after = json.load(open(a.before))["cells"], json.load(open(a.after))["cells"]
    if [(c["trace"], c["capacity"]) for c in before] != [(c["trace"], c["capacity"]) for c in after]:
        p.error("the two files hold different cells")
    flips, goal_flips = 0, {"hit": 0, "mean": 0, "0.9f": 0, "p99": 0}
    moved: dict[str, list[float]] = {k: [] for k in ("mean/lpm", "p99/min", "fcfs mean", "fcfs p99", "lpm mean",
                                                     "lpm p99", "auto mean", "auto p99")}
    for x, y in zip(before, after):
        ok_x, ok_y = (all(v is not False for v in c["goals"].values()) for c in (x, y))
        flips += ok_x != ok_y
        for k in goal_flips:
            goal_flips[k] += x["goals"][k] != y["goals"][k]
        (m1, p1), (m2, p2) = ratios(x), ratios(y)
        moved["mean/lpm"].append(abs(m2 / m1 - 1))
        moved["p99/min"].append(abs(p2 / p1 - 1))
        for s in ("fcfs", "lpm", "auto"):
            moved[f"{s} mean"].append(abs(y[s]["ttft_mean_s"] / x[s]["ttft_mean_s"] - 1))
            moved[f"{s} p99"].append(abs(y[s]["ttft_p99_s"] / x[s]["ttft_p99_s"] - 1))
        print(f"{x['trace']} {x['capacity']} {x['load']:g} -> {y['load']:g}: every goal {ok_x} -> {ok_y}; "
              f"mean/lpm {m1:.3f} -> {m2:.3f}, p99/min {p1:.3f} -> {p2:.3f}")
    print(f"cells whose every-goal verdict differs: {flips} of {len(before)}; per goal: {goal_flips}")
    for k, v in moved.items():
        print(f"|change| of {k}: {spread(v)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
