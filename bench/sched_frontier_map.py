"""Which of issue 20's misses can any order reach? bench/sched_frontier.py's JSONs read as one map: per cell, each
goal line's least excess over every point run there (auto's settings, the outside policies, fcfs and lpm
themselves), the orders other than auto's settings that meet every goal there, and a class:

    met       main's auto meets every goal (on the medians, as the sweep judges)
    reached   some setting of auto meets every goal (which, listed)
    blocked   some line no point reaches at all: no order tried meets it, whatever the others do
    near      no setting meets every goal; the best misses its binding line by at most NEAR
    apart     every line is met by some point, never all by one setting; the best misses by more than NEAR

then per group (half, capacity) how many cells fall in each; with `--sweep` (the sweep's JSONs) the group's cells
in all and those main meets come from the sweep, and its failing cells that no frontier JSON holds count as "not
mapped". A cell run by several frontier JSONs at the same replicates has the union of their points.

    python bench/sched_frontier_map.py --frontier bench/out/fr_q.json --sweep bench/out/sw_main_q3.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_frontier as fr  # noqa: E402  (bench/ is no package)

sweep = fr.sweep
NEAR = 0.01
CLASSES = ("met", "reached", "near", "apart", "blocked")


def half_of(trace: str) -> str:
    """tune and held are one group ("tune+held", as the sweep's `--half all`); fresh its own."""
    half = next(h for h, specs in sweep.TRACES.items() if trace in specs)
    return "fresh" if half == "fresh" else "tune+held"


def merged(paths: list[str]) -> dict[tuple, dict]:
    """Every frontier JSON's cells keyed (trace, capacity, load, replicates): base, points (the union), settings."""
    cells: dict[tuple, dict] = {}
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        for c in data["cells"]:
            key = (c["trace"], c["capacity"], c["load"], data["replicates"])
            cell = cells.setdefault(key, {"base": c["base"], "points": {}, "settings": set()})
            cell["points"].update({n: fr.Point(**p) for n, p in c["points"].items()})
            cell["settings"].update(data["settings"])
    return cells


def references(base: dict[str, float], load: float) -> dict[str, fr.Point]:
    """fcfs and lpm as points beside the settings, judged as a setting is (fcfs's hit rate NaN where a JSON lacks it:
    never the least excess, never inside the box)."""
    f = {"ttft_mean_s": base["fcfs_mean"], "ttft_p99_s": base["fcfs_p99"], "hit_rate": base.get("fcfs_hit", math.nan)}
    lpm = {"ttft_mean_s": base["lpm_mean"], "ttft_p99_s": base["lpm_p99"], "hit_rate": base["lpm_hit"]}
    return {"lpm": fr.judge([(f, lpm, lpm)], load), "fcfs": fr.judge([(f, lpm, f)], load)}


def inside(p: fr.Point, load: float) -> bool:
    """Every goal's line held (an unknown excess, NaN, holds none)."""
    return all(x <= 0 for x in p.over(load).values())


def classify(load: float, cell: dict) -> dict:
    """One cell's place on the map (the module's docstring)."""
    points, base = cell["points"], cell["base"]
    mine = {n: p for n, p in points.items() if n in cell["settings"]}
    refs = references(base, load)
    every = points | refs
    lines = list(mine["main"].over(load))
    least = {line: min((p.over(load)[line] for p in every.values() if not math.isnan(p.over(load)[line])))
             for line in lines}
    best = min(mine, key=lambda n: mine[n].gap(load))
    reached = [n for n, p in mine.items() if p.meets]
    blocked = [line for line, x in least.items() if x > 0]
    gap = mine[best].gap(load)
    kind = ("met" if mine["main"].meets else "reached" if reached else "blocked" if blocked
            else "near" if gap <= NEAR else "apart")
    binds = max(mine[best].over(load).items(), key=lambda kv: kv[1])[0]
    main_binds = max(mine["main"].over(load).items(), key=lambda kv: kv[1])[0]
    return {"class": kind, "reached_by": reached, "best": best, "gap": gap, "binds": binds,
            "main_gap": mine["main"].gap(load), "main_binds": main_binds, "blocked": blocked, "least": least,
            "orders_meeting": [n for n, p in points.items() if n not in mine and p.meets]
            + [n for n, p in refs.items() if inside(p, load)],
            "lpm_mean_fcfs": base["lpm_mean"] / base["fcfs_mean"], "lpm_p99_fcfs": base["lpm_p99"] / base["fcfs_p99"]}


def sweep_cells(paths: list[str]) -> dict[tuple, bool]:
    """(trace, capacity, load, replicates) -> whether main meets every goal there, from the sweep's JSONs."""
    out = {}
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        for c in data["cells"]:
            key = (c["trace"], c["capacity"], c["load"], data["replicates"])
            out[key] = all(v is not False for v in c["goals"].values())
    return out


def table(rows: dict[tuple, dict]) -> None:
    print("| cell | reps | class | main: gap, binds | best setting | its gap, binds | reached by | "
          "other orders meeting | least excess per line | lpm mean / fcfs's | lpm p99 / fcfs's |")
    print("|---|---:|---|---|---|---|---|---|---|---:|---:|")
    for (trace, cap, load, reps), r in rows.items():
        least = ", ".join(f"{line} {x:+.3f}" for line, x in r["least"].items())
        print(f"| {trace} {cap} {load:g} | {reps} | {r['class']} | {r['main_gap']:+.3f}, {r['main_binds']} | "
              f"{r['best']} | {r['gap']:+.3f}, {r['binds']} | {'; '.join(r['reached_by']) or '-'} | "
              f"{', '.join(r['orders_meeting']) or '-'} | {least} | {r['lpm_mean_fcfs']:.3f} | "
              f"{r['lpm_p99_fcfs']:.3f} |")


def summary(rows: dict[tuple, dict], swept: dict[tuple, bool]) -> None:
    """Per group: cells (the sweep's, else the mapped ones), met by main, then each class of the failing ones."""
    groups: dict[tuple[str, str, int], Counter] = {}
    for key in sorted(set(rows) | set(swept), key=lambda k: (half_of(k[0]), k[1], k[3])):
        trace, cap, _, reps = key
        count = groups.setdefault((half_of(trace), cap, reps), Counter())
        count["cells"] += 1
        if swept.get(key) is True or (key not in swept and rows[key]["class"] == "met"):
            count["met"] += 1
        elif key in rows:
            count[rows[key]["class"]] += 1
        else:
            count["not mapped"] += 1
    print("| group | reps | cells | " + " | ".join(CLASSES) + " | not mapped |")
    print("|---|---:|---:|" + "---:|" * (len(CLASSES) + 1))
    for (half, cap, reps), count in groups.items():
        print(f"| {half} {cap} | {reps} | {count['cells']} | "
              + " | ".join(str(count[c]) for c in CLASSES) + f" | {count['not mapped']} |")
    binds = Counter(r["binds"] for r in rows.values() if r["class"] in ("near", "apart"))
    blocked = Counter(line for r in rows.values() if r["class"] == "blocked" for line in r["blocked"])
    others = Counter(n for r in rows.values() if r["class"] not in ("met", "reached") for n in r["orders_meeting"])
    print(f"\nnear / apart cells by the best setting's binding line: {dict(binds) or '-'}; "
          f"blocked cells by the line no order reaches: {dict(blocked) or '-'}; cells no setting reaches that "
          f"another order meets, by order: {dict(others) or '-'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frontier", action="append", default=[], help="a sched_frontier --json (repeatable)")
    p.add_argument("--sweep", action="append", default=[], help="a sched_sweep --json (repeatable): cells, met")
    p.add_argument("--json", default=None, help="write each cell's place on the map here")
    a = p.parse_args(argv)
    cells = merged(a.frontier)
    rows = {key: classify(key[2], cell) for key, cell in cells.items()}
    swept = sweep_cells(a.sweep)
    for key, row in rows.items():
        if key in swept and swept[key] != (row["class"] == "met"):
            print(f"note: {key}: the sweep says main {'meets' if swept[key] else 'misses'}, the frontier's main "
                  f"{row['class']}", file=sys.stderr)
    table(rows)
    print()
    summary(rows, swept)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump([{"trace": k[0], "capacity": k[1], "load": k[2], "replicates": k[3], **r}
                       for k, r in rows.items()], fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
