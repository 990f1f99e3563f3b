"""Does `auto` meet issue 20's goals on many traces, not one? fcfs, lpm and auto on Mooncake-shaped
traces of several seeds and shapes (radixkv/scheduling/synth.py: prompt length, shared prefixes,
follow-up turns, burstiness), at one H100's KV and a quarter of it, loads 0.8 and 1.2 (`--capacities` also takes
1/2 and 1/8: sizes no round tuned on, round 29).

The traces come in four halves: `tune` (to choose auto's constants on), `held` (to check a variant
that did well on tune), `fresh` (held's shapes on seeds no earlier round ran: look at it once per round, for
the final choice only, so that it stays out of sample; `--half all` is tune and held, never fresh) and `fresh2`
(held's shapes on yet other seeds, added in round 28 once rounds 26-27 had chosen rules while looking at fresh).
Per cell (trace, capacity, load) it prints auto's ratios and which goals hold:

    hit   auto's hit rate >= lpm's - 0.01
    mean  auto's mean TTFT <= lpm's x 1.02
    0.9f  at load >= 1.2: auto's mean TTFT <= 0.9 x fcfs's
    p99   auto's p99 TTFT <= fcfs's and lpm's

fcfs and lpm runs are kept in `--cache` (keyed by trace, capacity, load, requests) so that trying
a variant of auto reruns only auto; `--set NAME=VALUE` overrides a constant of auto.Auto. The
cache holds runs of one version of radixkv's sources (`code_version`: the simulator runs the real
Scheduler and the default eviction, so any change there changes fcfs's and lpm's runs too), less
Auto's own files (scheduling/auto.py, shape.py) and fcfs_clock.py (only bench/sched_tail_clock.py runs it),
which those runs never execute: an edited Auto keeps the baselines, an edit anywhere else drops them at load, with
a line saying so (round 15 found baselines a round old).

    python bench/sched_sweep.py --half tune --jobs 2
    python bench/sched_sweep.py --half tune --set SHARE=0.3          # a variant: only auto reruns
    python bench/sched_sweep.py --half held --json bench/out/sweep_held.json
    python bench/sched_sweep.py --half tune --loads 0.80008,1.20012  # the same cells, arrivals moved by 0.01%
The last line measures chance: lpm's order reads the cache, so a 0.01% shift of the arrivals moves lpm's and
auto's mean by up to ~8% and p99 by up to ~19% in a cell, and main's auto scored 12, 15 and 14 of the tune half's
32 cells at three such loads (bench/RESULTS.md, issue 20, eighth round; bench/sched_compare.py compares two runs):
compare variants over such replicates, not by one run per cell: `--replicates K` runs every cell at K such loads
(load x (1 + j x 1e-4), j < K) and judges each goal on each policy's median over them (hit rate, mean and p99
TTFT), printing beside each missed goal in how many of the K runs it held, and in how many runs every goal held.

    python bench/sched_sweep.py --half tune --replicates 3 --json bench/out/sweep_tune_r3.json

`--schedule NAME` judges another policy in auto's place (the table's and the JSON's "auto" columns are then its
runs, cached like fcfs's and lpm's): which cells any ordering reaches at all, e.g. `--schedule hrrn`.
(from a git worktree, prefix `PYTHONPATH=.` so that its radixkv/ is the one imported.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from radixkv.scheduling import schedules
from radixkv.scheduling.auto import Auto
from radixkv.scheduling.cost_model import CostModel
from radixkv.scheduling.sim_report import Run
from radixkv.scheduling.sim_trace import read_sim_trace
from radixkv.scheduling.simulate import Simulation
from radixkv.scheduling.synth import mooncake_shaped

# name: synth.mooncake_shaped arguments. The same families in every half; tune's parameters differ from held's,
# fresh and fresh2 have held's on other seeds.
TRACES: dict[str, dict[str, dict]] = {
    "tune": {
        "base-s1": {"seed": 1}, "base-s2": {"seed": 2}, "base-s3": {"seed": 3},
        "long-s11": {"seed": 11, "prompt_tokens": 20000, "output_tokens": 500},
        "short-s12": {"seed": 12, "prompt_tokens": 6000},
        "shared-s13": {"seed": 13, "prefixes": 16, "turn_share": 0.5, "prefix_blocks": 24},
        "sparse-s14": {"seed": 14, "prefixes": 256, "turn_share": 0.1},
        "bursty-s15": {"seed": 15, "burst": 3.0},
    },
    "held": {
        "base-s4": {"seed": 4}, "base-s5": {"seed": 5}, "base-s6": {"seed": 6},
        "long-s21": {"seed": 21, "prompt_tokens": 16000, "output_tokens": 250},
        "short-s22": {"seed": 22, "prompt_tokens": 4000, "output_tokens": 500},
        "shared-s23": {"seed": 23, "prefixes": 24, "turn_share": 0.45, "zipf": 1.3},
        "sparse-s24": {"seed": 24, "prefixes": 512, "turn_share": 0.15, "zipf": 0.8},
        "bursty-s25": {"seed": 25, "burst": 2.5},
    },
}
for half, seeds in (("fresh", (31, 32, 33, 41, 42, 43, 44, 45)), ("fresh2", (51, 52, 53, 61, 62, 63, 64, 65))):
    TRACES[half] = {f"{name.split('-')[0]}-s{seed}": {**spec, "seed": seed}
                    for (name, spec), seed in zip(TRACES["held"].items(), seeds)}
CAPACITIES = {"1": None, "1/2": 200_000, "1/4": 100_000, "1/8": 50_000}  # None: the cost model's KV of one H100
# Auto, what only it reads, and the FCFS clock (bench/sched_tail_clock.py's): not in the runs' key
AUTO_FILES = ("scheduling/auto.py", "scheduling/shape.py", "scheduling/fcfs_clock.py")
# Issue 20's goal lines, which goals() judges and bench/sched_frontier.py measures distances to: auto's hit rate -
# lpm's >= "hit"; its mean TTFT / lpm's <= "mean"; at a load >= HEAVY its mean / fcfs's <= "0.9f"; its p99 TTFT /
# min(fcfs's, lpm's) <= "p99".
LINES = {"hit": -0.01, "mean": 1.02, "0.9f": 0.9, "p99": 1.0}
HEAVY = 1.2


def code_version(package: str = os.path.dirname(os.path.dirname(os.path.abspath(schedules.__file__)))) -> str:
    """A digest of every .py file of the radixkv package (sorted paths and contents) but `Auto`'s own (AUTO_FILES):
    the key of the cached runs, which never execute Auto (`cached`), so that a variant of Auto reuses them."""
    digest = hashlib.sha256()
    for top, dirs, files in sorted(os.walk(package)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, package)
            if rel.replace(os.sep, "/") in AUTO_FILES:
                continue
            digest.update(rel.encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:16]


def cached(schedule: str) -> bool:
    """Whether runs of `schedule` go in the cache: those of a policy that is not Auto and does not derive from it
    (its code is not in `code_version`)."""
    return not issubclass(schedules.POLICIES[schedule], Auto)


def load_cache(path: str, version: str) -> dict[str, dict]:
    """The cached runs at `path` if they were made by sources of `version`, else none (said on stderr)."""
    cache: dict = json.load(open(path)) if os.path.exists(path) else {}
    if cache and cache.get("code") != version:
        print(f"{path}: runs of other radixkv sources ({cache.get('code', 'unversioned')}), not {version}: "
              "rebuilt", file=sys.stderr)
        cache = {}
    cache["code"] = version
    return cache


def trace_path(out: str, name: str, spec: dict, requests: int) -> str:
    path = os.path.join(out, f"{name}-{requests}.jsonl")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            for line in mooncake_shaped(requests, **spec):
                f.write(json.dumps(line) + "\n")
        os.replace(path + ".tmp", path)
    return path


def run_one(job: tuple[str, str, str, float, str, dict[str, float]]) -> tuple[str, dict, float]:
    """One simulated run: (key, its summary, CPU seconds); `Auto`'s constants as `overrides` says for this run only."""
    key, path, cap, load, schedule, overrides = job
    before = {name: getattr(Auto, name) for name in overrides}
    for name, value in overrides.items():
        setattr(Auto, name, value)
    try:
        cost = CostModel()
        trace = read_sim_trace(path, os.path.basename(path))
        capacity = CAPACITIES[cap] or cost.kv_capacity_tokens
        sim = Simulation(trace, schedule, load, capacity, 16, cost)
        t0 = time.process_time()
        out = sim.run()
        summary = Run(trace.name, schedule, load, out, sim.capacity, 0.0).summary()
    finally:
        for name, value in before.items():
            setattr(Auto, name, value)
    return key, summary, time.process_time() - t0


def run_all(jobs: list[tuple], workers: int) -> Iterator[tuple[str, dict, float]]:
    """run_one of every job, in order, in `workers` processes; one: in this process. (Never a pool of one: a forked
    child of a process whose torch ran its OpenMP thread pool hangs in its first parallel op, as a test's did.)"""
    if workers <= 1:
        yield from map(run_one, jobs)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(run_one, jobs)


def goals(f: dict, lpm: dict, a: dict, load: float) -> dict[str, bool | None]:
    """Which of LINES auto's run `a` meets beside fcfs's `f` and `lpm` ("0.9f": None below HEAVY)."""
    return {"hit": a["hit_rate"] >= lpm["hit_rate"] + LINES["hit"],
            "mean": a["ttft_mean_s"] <= lpm["ttft_mean_s"] * LINES["mean"],
            "0.9f": a["ttft_mean_s"] <= LINES["0.9f"] * f["ttft_mean_s"] if load >= HEAVY else None,
            "p99": a["ttft_p99_s"] <= min(f["ttft_p99_s"], lpm["ttft_p99_s"]) * LINES["p99"]}


def median_run(runs: list[dict]) -> dict:
    """One policy's replicates of a cell as one summary: the median of each goal's metric."""
    return {k: statistics.median(r[k] for r in runs) for k in ("hit_rate", "ttft_mean_s", "ttft_p99_s")}


def replicate_loads(load: float, k: int) -> list[float]:
    """The loads of a cell's k replicates: `load` and k - 1 others, each 0.01% further (arrivals moved so little
    that only chance changes; bench/RESULTS.md, issue 20, eighth round)."""
    return [load * (1 + j * 1e-4) for j in range(k)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--half", choices=["tune", "held", "fresh", "fresh2", "all"], default="tune")
    p.add_argument("--requests", type=int, default=2000, help="first N requests of each trace")
    p.add_argument("--loads", default="0.8,1.2")
    p.add_argument("--replicates", type=int, default=1, help="runs per cell at loads 0.01%% apart; goals on medians")
    p.add_argument("--capacities", default="1,1/4", help=f"of {','.join(CAPACITIES)}")
    p.add_argument("--only", default="", help="comma-separated trace names (default: the whole half)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--schedule", default="auto", choices=list(schedules.POLICIES),
                   help="the policy judged in auto's place (default auto)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override an Auto constant")
    p.add_argument("--traces-dir", default=os.path.join("bench", "out", "sweep_traces"))
    p.add_argument("--cache", default=os.path.join("bench", "out", "sweep_baselines.json"))
    p.add_argument("--json", default=None, help="write every cell's summaries and goals here")
    a = p.parse_args(argv)
    overrides = {k: float(v) for k, v in (s.split("=", 1) for s in a.set)}
    for k in overrides:
        if not hasattr(Auto, k):
            p.error(f"Auto has no constant {k}")
    halves = ["tune", "held"] if a.half == "all" else [a.half]
    specs = {n: s for h in halves for n, s in TRACES[h].items() if not a.only or n in a.only.split(",")}
    loads = [float(x) for x in a.loads.split(",")]
    caps = a.capacities.split(",")
    os.makedirs(a.traces_dir, exist_ok=True)
    cache = load_cache(a.cache, code_version())
    results: dict[str, dict] = {}
    jobs = []
    for name, spec in specs.items():
        path = trace_path(a.traces_dir, name, spec, a.requests)
        for cap in caps:
            for load in (r for x in loads for r in replicate_loads(x, a.replicates)):
                for sched in ("fcfs", "lpm", a.schedule):
                    key = f"{name}|{cap}|{load:g}|{a.requests}|{sched}"
                    if cached(sched) and key in cache:
                        results[key] = cache[key]
                    else:
                        jobs.append((key, path, cap, load, sched, overrides))
    cpu = 0.0
    os.makedirs(os.path.dirname(a.cache) or ".", exist_ok=True)
    for done, (key, summary, sec) in enumerate(run_all(jobs, a.jobs), 1):
        results[key] = summary
        cpu += sec
        print(f"{done}/{len(jobs)} {key} {sec:.1f} s", file=sys.stderr, flush=True)
        if cached(key.rsplit("|", 1)[1]):
            cache[key] = summary
            with open(a.cache + ".tmp", "w") as f:
                json.dump(cache, f, indent=1, sort_keys=True)
            os.replace(a.cache + ".tmp", a.cache)
    print(f"# {len(jobs)} runs, {cpu:.0f} s of CPU in the workers; judged: {a.schedule}; "
          f"auto overrides: {overrides or 'none'}")
    print("| trace | cap | load | lpm hit / mean / p99 | fcfs mean / p99 | auto hit / mean / p99 "
          "| mean/lpm | mean/fcfs | p99/min | goals missed |")
    print("|---|---|---:|---|---|---|---:|---:|---:|---|")
    cells, missed = [], {"hit": 0, "mean": 0, "0.9f": 0, "p99": 0}
    worst = {"mean/lpm": 0.0, "p99/min": 0.0}
    for name in specs:
        for cap in caps:
            for load in loads:
                reps = [[results[f"{name}|{cap}|{r:g}|{a.requests}|{s}"] for s in ("fcfs", "lpm", a.schedule)]
                        for r in replicate_loads(load, a.replicates)]
                f, lpm, au = reps[0] if len(reps) == 1 else [median_run([rep[i] for rep in reps]) for i in range(3)]
                g = goals(f, lpm, au, load)
                each = [goals(*rep, load) for rep in reps]
                held = {k: sum(e[k] is not False for e in each) for k in g}
                miss = [k + (f" ({held[k]}/{len(reps)})" if len(reps) > 1 else "") for k, v in g.items() if v is False]
                met = sum(all(v is not False for v in e.values()) for e in each)  # every goal
                miss += [f"[{met}/{len(reps)} runs meet all]"] if len(reps) > 1 else []
                for k, v in g.items():
                    missed[k] += v is False
                r_l, r_f = au["ttft_mean_s"] / lpm["ttft_mean_s"], au["ttft_mean_s"] / f["ttft_mean_s"]
                r_p = au["ttft_p99_s"] / min(f["ttft_p99_s"], lpm["ttft_p99_s"])
                worst["mean/lpm"], worst["p99/min"] = max(worst["mean/lpm"], r_l), max(worst["p99/min"], r_p)
                print(f"| {name} | {cap} | {load:g} | {lpm['hit_rate']:.3f} / {lpm['ttft_mean_s']:.2f} / "
                      f"{lpm['ttft_p99_s']:.1f} | {f['ttft_mean_s']:.2f} / {f['ttft_p99_s']:.1f} | "
                      f"{au['hit_rate']:.3f} / {au['ttft_mean_s']:.2f} / {au['ttft_p99_s']:.1f} | {r_l:.3f} | "
                      f"{r_f:.3f} | {r_p:.3f} | {', '.join(miss) or '-'} |")
                cells.append({"trace": name, "capacity": cap, "load": load, "fcfs": f, "lpm": lpm, "auto": au,
                              "goals": g, "replicates_held": held, "replicates_met": met})
    n_all = sum(all(v is not False for v in c["goals"].values()) for c in cells)
    print(f"\n{n_all} of {len(cells)} cells meet every goal; cells missing each goal: "
          + ", ".join(f"{k} {v}" for k, v in missed.items())
          + f"; worst auto mean / lpm's {worst['mean/lpm']:.3f}, "
          f"worst auto p99 / min(fcfs, lpm) {worst['p99/min']:.3f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"schedule": a.schedule, "overrides": overrides, "requests": a.requests,
                       "replicates": a.replicates, "cells": cells}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
