"""Is issue 20's bar reachable cell by cell? `auto` over a grid of its constants, on chosen cells of
bench/sched_sweep.py, with other policies as outside points: per cell, where each setting lands against the goals'
box, its best setting and how far that lies from the box, and the settings that meet the most cells together.

Every run goes through sched_sweep's own machinery (its traces, `run_one`, replicate loads, medians and `goals`):
fcfs, lpm and the outside points are kept in the sweep's cache (`--cache`, the same file and keys), auto's runs
under each setting in this script's own (`--runs`, keyed also by Auto's sources). Per cell and setting it prints

    mean/lpm   auto's mean TTFT / lpm's        (goal: <= 1.02)
    p99/min    auto's p99 / min(fcfs's, lpm's) (goal: <= 1)
    hit-lpm    auto's hit rate - lpm's         (goal: >= -0.01)
    mean/fcfs  at load >= 1.2, mean / fcfs's   (goal: <= 0.9)

on the medians over `--replicates` loads 0.01% apart, as the sweep judges. `--from-json` takes the cells from a
sweep's JSON (`--which failing` / `met`: those that miss a goal there / meet every one); `--cells` names them
(trace|cap|load). A setting is one point of a `--grid "NAME=V1,V2 NAME=V1,V2"` product (several grids: their
union; every setting names every axis, so its label is every constant it ran with); main's constants always run
too, as "main". `--plots N` draws the cells met by fewest settings, farthest from the box first: mean/lpm against
p99/min, the box, each setting a point.

    python bench/sched_frontier.py --from-json bench/out/sw_main_full3.json --which failing --replicates 3 \\
        --grid "SLOWDOWN=24,48,96 OVERTAKEN=8,16,32" --grid "SHARE=0.05,0.3" --jobs 2
(from a git worktree, prefix `PYTHONPATH=.` so that its radixkv/ is the one imported.)
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_sweep as sweep  # noqa: E402  (bench/ is no package)

from radixkv.scheduling import schedules  # noqa: E402
from radixkv.scheduling.auto import Auto  # noqa: E402

OUTSIDE = ("hrrn", "dfs-weight", "fcfs-match")


class Cell(NamedTuple):
    trace: str
    cap: str  # a key of sweep.CAPACITIES
    load: float

    def __str__(self) -> str:
        return f"{self.trace} {self.cap} {self.load:g}"


class Point(NamedTuple):
    """One setting (or policy) on one cell: the ratios of its medians to fcfs's and lpm's medians."""
    mean_lpm: float
    p99_min: float
    hit_lpm: float  # auto's hit rate - lpm's
    mean_fcfs: float
    meets: bool  # every goal of sweep.goals on the medians
    runs_met: int  # replicates meeting every goal

    def over(self, load: float) -> dict[str, float]:
        """The excess over each goal's line of sweep.LINES, keyed as sweep.goals (<= 0: that goal holds)."""
        line = sweep.LINES
        over = {"hit": line["hit"] - self.hit_lpm, "mean": self.mean_lpm - line["mean"]}
        over |= {"0.9f": self.mean_fcfs - line["0.9f"]} if load >= sweep.HEAVY else {}
        return over | {"p99": self.p99_min - line["p99"]}

    def gap(self, load: float) -> float:
        """How far outside the goals' box: the largest excess over a goal's line (0 or less: inside)."""
        return max(self.over(load).values())


def settings(grids: list[str]) -> list[dict[str, float]]:
    """main's constants, then each grid's product ("NAME=V1,V2 NAME=V1,..."), each setting naming every axis of any
    grid (Auto's value where its grid has none), duplicates dropped."""
    products = []
    for text in grids:
        grid = {}
        for axis in text.split():
            name, values = axis.split("=", 1)
            if not hasattr(Auto, name):
                raise SystemExit(f"Auto has no constant {name}")
            grid[name] = [float(v) for v in values.split(",")]
        products.append(grid)
    names = list(dict.fromkeys(n for grid in products for n in grid))
    main = {n: float(getattr(Auto, n)) for n in names}
    out = [main]
    for grid in products:
        for values in itertools.product(*grid.values()):
            s = {**main, **dict(zip(grid, values))}
            if s not in out:
                out.append(s)
    return out


def label(setting: dict[str, float]) -> str:
    """The constants where `setting` differs from Auto's (sorted; "main" where none): one name and key per setting
    whatever axes an invocation named."""
    return " ".join(f"{k}={v:g}" for k, v in sorted(setting.items()) if v != getattr(Auto, k)) or "main"


def cells_from_json(path: str, which: str) -> list[Cell]:
    """A sweep's cells: `all`, those `failing` a goal there, or those that `met` every one."""
    with open(path) as f:
        cells = json.load(f)["cells"]
    return [Cell(c["trace"], c["capacity"], c["load"]) for c in cells
            if which == "all" or (which == "failing") == any(v is False for v in c["goals"].values())]


def parse_cells(text: str) -> list[Cell]:
    """`trace|cap|load,...` as Cells."""
    return [Cell(t, c, float(x)) for t, c, x in (item.split("|") for item in text.split(",") if item)]


def auto_version() -> str:
    """sweep.code_version() and a digest of Auto's own files: the key of this script's runs."""
    digest = hashlib.sha256(sweep.code_version().encode())
    package = os.path.dirname(os.path.dirname(os.path.abspath(schedules.__file__)))
    for rel in sweep.AUTO_FILES:
        with open(os.path.join(package, rel), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def judge(reps: list[tuple[dict, dict, dict]], load: float) -> Point:
    """A setting's replicates (fcfs, lpm, it) as one Point, judged on the medians as the sweep judges."""
    f, lpm, x = reps[0] if len(reps) == 1 else [sweep.median_run([r[i] for r in reps]) for i in range(3)]
    met = sum(all(v is not False for v in sweep.goals(*r, load).values()) for r in reps)
    return Point(x["ttft_mean_s"] / lpm["ttft_mean_s"], x["ttft_p99_s"] / min(f["ttft_p99_s"], lpm["ttft_p99_s"]),
                 x["hit_rate"] - lpm["hit_rate"], x["ttft_mean_s"] / f["ttft_mean_s"],
                 all(v is not False for v in sweep.goals(f, lpm, x, load).values()), met)


def joint(points: dict[Cell, dict[str, Point]]) -> list[tuple[str, list[Cell]]]:
    """Every setting with the cells it meets, most cells first (ties: the order the settings ran in)."""
    names = list(next(iter(points.values()))) if points else []
    met = [(n, [c for c, row in points.items() if row[n].meets]) for n in names]
    return sorted(met, key=lambda m: -len(m[1]))


def run_key(cell: Cell, load: float, requests: int, schedule: str, setting: str = "") -> str:
    """The sweep's key of a run (its cache's), or with `setting` (auto's constants) this script's."""
    key = f"{cell.trace}|{cell.cap}|{load:g}|{requests}|{schedule}"
    return f"{key}|{setting}" if setting else key


def run_all(jobs: list[tuple], caches: dict[bool, tuple[dict, str]], workers: int) -> dict[str, dict]:
    """Run `jobs` (sweep.run_one's tuples) in `workers` processes; each result goes in caches[whether its key names
    a setting], written back as it comes (a stopped run keeps what it made)."""
    out = {}
    for done, (key, summary, sec) in enumerate(sweep.run_all(jobs, workers), 1):
        out[key] = summary
        print(f"{done}/{len(jobs)} {key} {sec:.1f} s", file=sys.stderr, flush=True)
        cache, path = caches[key.count("|") == 5]
        cache[key] = summary
        with open(path + ".tmp", "w") as fh:
            json.dump(cache, fh, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)
    return out


def plot(cell: Cell, base: dict[str, float], row: dict[str, Point], path: str) -> None:
    """mean/lpm against p99/min for every setting (dots) and outside policy (squares), fcfs and lpm themselves
    (crosses), the goals' box shaded; a hit-rate miss is drawn hollow."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    line, heavy = sweep.LINES, cell.load >= sweep.HEAVY
    fig, ax = plt.subplots(figsize=(7, 5.5))
    right = min(line["mean"], line["0.9f"] * base["fcfs_mean"] / base["lpm_mean"]) if heavy else line["mean"]
    lo = min([p.mean_lpm for p in row.values()] + [right, 0.9]) - 0.02
    ax.add_patch(plt.Rectangle((lo, 0), right - lo, line["p99"], color="tab:green", alpha=0.12, label="goals' box"))
    ax.axvline(line["mean"], color="tab:green", lw=0.8, ls="--")
    ax.axhline(line["p99"], color="tab:green", lw=0.8, ls="--")
    names: dict[tuple[float, float], list[str]] = {}  # settings that land on one point share one label
    for name, p in row.items():
        outside = name in OUTSIDE
        ax.scatter(p.mean_lpm, p.p99_min, marker="s" if outside else "o", s=40,
                   facecolors="none" if p.hit_lpm < line["hit"] else ("tab:orange" if outside else "tab:blue"),
                   edgecolors="tab:orange" if outside else "tab:blue", zorder=3)
        short = name.replace("SLOWDOWN", "K").replace("OVERTAKEN", "O").replace("SHARE", "S")
        names.setdefault((p.mean_lpm, p.p99_min), []).append(short)
    for xy, shorts in names.items():
        ax.annotate("; ".join(shorts), xy, fontsize=6, xytext=(3, 3), textcoords="offset points")
    for name in ("fcfs", "lpm"):
        x, y = base[f"{name}_mean"] / base["lpm_mean"], base[f"{name}_p99"] / min(base["fcfs_p99"], base["lpm_p99"])
        ax.scatter(x, y, marker="x", c="k")
        ax.annotate(name, (x, y), fontsize=8)
    fast = f", <= {line['0.9f']:g}x fcfs's" if heavy else ""
    ax.set_xlabel(f"mean TTFT / lpm's (box: <= {line['mean']:g}{fast})")
    ax.set_ylabel(f"p99 TTFT / min(fcfs's, lpm's) (box: <= {line['p99']:g})")
    ax.set_title(f"{cell}: auto's settings (dots), outside policies (squares); hollow: hit-rate miss", fontsize=9)
    ax.set_xlim(left=lo)
    ax.set_ylim(bottom=min(0.9, min(p.p99_min for p in row.values()) - 0.02))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def collect(a: argparse.Namespace, cells: list[Cell], grid: list[dict[str, float]], outside: list[str]) -> dict:
    """Every run the cells need, from the caches or run now."""
    base_cache = sweep.load_cache(a.cache, sweep.code_version())
    mine = sweep.load_cache(a.runs, auto_version())
    specs = {n: s for half in sweep.TRACES.values() for n, s in half.items()}
    os.makedirs(a.traces_dir, exist_ok=True)
    results, jobs, later = {}, [], []
    for cell in cells:
        path = sweep.trace_path(a.traces_dir, cell.trace, specs[cell.trace], a.requests)
        for load in sweep.replicate_loads(cell.load, a.replicates):
            wanted = [(run_key(cell, load, a.requests, s), s, {}) for s in ("fcfs", "lpm", *outside)]
            wanted += [(run_key(cell, load, a.requests, "auto", label(s)), "auto", s) for s in grid]
            for key, schedule, setting in wanted:  # main with no --grid is the empty setting: auto's all the same
                cache = mine if schedule == "auto" else base_cache
                if key in cache:
                    results[key] = cache[key]
                else:  # baselines first, then auto setting by setting
                    (later if schedule == "auto" else jobs).append((key, path, cell.cap, load, schedule, setting))
    later.sort(key=lambda job: [label(s) for s in grid].index(label(job[5])))
    os.makedirs(os.path.dirname(a.cache) or ".", exist_ok=True)
    results.update(run_all(jobs + later, {False: (base_cache, a.cache), True: (mine, a.runs)}, a.jobs))
    return results


def frontier(a: argparse.Namespace, cells: list[Cell], grid: list[dict[str, float]], outside: list[str],
             results: dict) -> tuple[dict[Cell, dict[str, float]], dict[Cell, dict[str, Point]]]:
    """Per cell: fcfs's and lpm's medians, and each setting's and outside policy's Point."""
    bases, points = {}, {}
    for cell in cells:
        loads = sweep.replicate_loads(cell.load, a.replicates)
        fl = [(results[run_key(cell, x, a.requests, "fcfs")], results[run_key(cell, x, a.requests, "lpm")])
              for x in loads]
        f, lpm = (fl[0] if len(fl) == 1 else [sweep.median_run([r[i] for r in fl]) for i in range(2)])
        bases[cell] = {"fcfs_mean": f["ttft_mean_s"], "fcfs_p99": f["ttft_p99_s"], "lpm_mean": lpm["ttft_mean_s"],
                       "lpm_p99": lpm["ttft_p99_s"], "lpm_hit": lpm["hit_rate"], "fcfs_hit": f["hit_rate"]}
        names = [(label(s), "auto", label(s)) for s in grid] + [(o, o, "") for o in outside]
        points[cell] = {name: judge([(f_, l_, results[run_key(cell, x, a.requests, sched, setting)])
                                     for (f_, l_), x in zip(fl, loads)], cell.load)
                        for name, sched, setting in names}
    return bases, points


def report(a: argparse.Namespace, bases: dict, points: dict[Cell, dict[str, Point]], outside: list[str]) -> None:
    k = a.replicates
    for cell, row in points.items():
        b = bases[cell]
        print(f"\n### {cell}: lpm hit {b['lpm_hit']:.3f} mean {b['lpm_mean']:.2f} p99 {b['lpm_p99']:.1f}; "
              f"fcfs mean {b['fcfs_mean']:.2f} p99 {b['fcfs_p99']:.1f}")
        print("| setting | mean/lpm | p99/min | hit-lpm | mean/fcfs | gap | meets | runs |")
        print("|---|---:|---:|---:|---:|---:|---|---:|")
        for name, p in row.items():
            print(f"| {name} | {p.mean_lpm:.3f} | {p.p99_min:.3f} | {p.hit_lpm:+.3f} | {p.mean_fcfs:.3f} | "
                  f"{p.gap(cell.load):+.3f} | {'Y' if p.meets else '-'} | {p.runs_met}/{k} |")
    print("\n## Per cell: the best setting of auto (least gap: the largest excess over a goal's line), who meets it")
    print("| cell | main's gap | best setting | its mean/lpm, p99/min, mean/fcfs | gap | settings meeting | outside "
          "meeting |\n|---|---:|---|---|---:|---:|---|")
    for cell, row in points.items():
        mine = {n: p for n, p in row.items() if n not in outside}
        best = min(mine, key=lambda n: mine[n].gap(cell.load))
        b = mine[best]
        print(f"| {cell} | {row['main'].gap(cell.load):+.3f} | {best} | {b.mean_lpm:.3f}, {b.p99_min:.3f}, "
              f"{b.mean_fcfs:.3f} | {b.gap(cell.load):+.3f} | {sum(p.meets for p in mine.values())} of {len(mine)} "
              f"| {', '.join(o for o in outside if row[o].meets) or '-'} |")
    ranked = [(n, c) for n, c in joint(points) if n not in outside]
    main_met = dict(ranked).get("main", [])
    print(f"\n## Settings by cells met together (of {len(points)}; main meets {len(main_met)})")
    for name, met in ranked[:a.top]:
        lost = [str(c) for c in main_met if c not in met]
        runs = sum(points[c][name].runs_met for c in points)
        print(f"- {name}: {len(met)} cells, {runs} runs meet all; gains "
              f"{', '.join(str(c) for c in met if c not in main_met) or '-'}; loses {', '.join(lost) or '-'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from-json", default=None, help="a sweep's --json: its cells")
    p.add_argument("--which", choices=["all", "failing", "met"], default="all", help="of --from-json's cells")
    p.add_argument("--cells", default="", help="comma-separated trace|cap|load (added to --from-json's)")
    p.add_argument("--grid", action="append", default=[], metavar="'NAME=V1,V2 ...'",
                   help="a product of Auto constants' values (repeatable: the union)")
    p.add_argument("--outside", default=",".join(OUTSIDE), help="other policies drawn as points")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--replicates", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--top", type=int, default=8, help="settings listed by cells met together")
    p.add_argument("--plots", type=int, default=4, help="PNGs of the cells farthest from the box")
    p.add_argument("--png-dir", default=os.path.join("bench", "out", "frontier"))
    p.add_argument("--traces-dir", default=os.path.join("bench", "out", "sweep_traces"))
    p.add_argument("--cache", default=os.path.join("bench", "out", "sweep_baselines.json"))
    p.add_argument("--runs", default=os.path.join("bench", "out", "frontier_runs.json"), help="auto's runs")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    cells = (cells_from_json(a.from_json, a.which) if a.from_json else []) + parse_cells(a.cells)
    grid = settings(a.grid)
    outside = [o for o in a.outside.split(",") if o]
    for o in outside:
        if o not in schedules.POLICIES or not sweep.cached(o):
            p.error(f"--outside {o}: not a policy outside auto")
    results = collect(a, cells, grid, outside)
    bases, points = frontier(a, cells, grid, outside, results)
    print(f"# {len(cells)} cells, {len(grid)} settings of auto, outside: {', '.join(outside) or '-'}; "
          f"medians of {a.replicates} loads 0.01% apart, {a.requests} requests")
    report(a, bases, points, outside)
    order = sorted(points, key=lambda c: (sum(p.meets for n, p in points[c].items() if n not in outside),
                                          -min(p.gap(c.load) for p in points[c].values())))
    os.makedirs(a.png_dir, exist_ok=True)
    for cell in order[:a.plots]:
        path = os.path.join(a.png_dir, f"{cell.trace}_{cell.cap.replace('/', 'q')}_{cell.load:g}.png")
        plot(cell, bases[cell], points[cell], path)
        print(f"wrote {path}", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"replicates": a.replicates, "requests": a.requests, "settings": [label(s) for s in grid],
                       "cells": [{"trace": c.trace, "capacity": c.cap, "load": c.load, "base": bases[c],
                                  "points": {n: p._asdict() for n, p in points[c].items()}} for c in points]},
                      fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
