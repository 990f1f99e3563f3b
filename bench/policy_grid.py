"""The default policy's margin over the best fixed policy on a TUNING grid and a HELD-OUT grid.

    margin = hit(adaptive) - max(hit(lru), hit(lfu), hit(fifo), hit(slru))     (points of token hit rate)

at 5/10/25/50% of each trace's unique tokens. The grids:

  tune   the `radixkv bench` workloads at page 1 and longchat/longdoc at page 16 (seed 0), and
         Mooncake-shaped traces at seeds 11-13 (page 16; the held grid's worst lag cells are of that
         shape, rounds 3-6 tuned on none), and bench/policy_margins.py's random traces of the held
         grid's worst cell's shape (chat at page 16, seeds 3012/3021/3077; the held seeds are
         2000-2039): what the policy's constants may be chosen on (60 cells; `--only wl:` gives
         rounds 3-6's 36, `--only seed:30` the three added in round 8)
  check  bench/policy_margins.py's random traces at seeds 3000-3069 other than tune's (272 cells): a
         second sample of the random traces (more of them than tune has), to check that what a change
         gains on tune is not tune's alone; rounds 1-8 tuned on none of them
  held   what they may not: bench/policy_margins.py's random traces (seeds 2000-2039, pages 1/16),
         Mooncake-shaped traces (radixkv/scheduling/synth.py, 400 requests, seeds 1-3, page 16),
         tools/agent/longchat/chat at other seeds (5 at page 1, 6 at page 16), and any `--trace
         FILE:PAGE` (JSON lines, radixkv/bench/traces.py's formats)
  fit    bench/policy_margins.py's random traces at seeds 4000-4069 (280 cells): a fit grid for the prior's
         rules (round 21) where tune and bench hold too few cells of a kind; no other grid uses these seeds
  val    the same at seeds 5000-5069 (280 cells): to check a rule fit on fit before held and check see it
  fresh  the same at seeds 6000-6069 (280 cells, round 27): scored once per candidate that held everywhere else,
         since val, check and held have seen round 26's scouts; nobody tunes on it
  bench  issue 23's bench cells: agent, tools, rag, chat, longchat and gsp (seed 0) at pages 1 and 16
         (48 cells; the page-1 ones but longchat are tune's too): what `radixkv bench --workloads
         agent,tools,rag,chat,longchat,gsp` gives, without its timings

`--classes T` sorts the cells below T points by where the loss is: the best fixed policy, the part no
switch between the two experts reaches (the better of LRU and LFU against the best fixed policy) and the part
the switching loses (adaptive against that better expert), with a line a class (bench/RESULTS.md, round 18).

`--first lru|lfu` forces the prior's verdict (eviction/prior.py): every cell follows that expert from its first
eviction, whatever its history says, and decides as the policy does from then on. The prior's verdict is its only
output, so with a run of each a prior rule's margins follow from its verdicts alone (bench/prior_rules.py).

`--against FILE` compares with an earlier run's `--cells` output (FILE, the same grid): the cells whose margin
moved by more than 0.05 points, before and after, and those that fell below -1 (a `--set` scan's bar).

`--set NAME=VALUE` overrides a constant of the Adaptive class before the runs (a sweep; the class
attribute must exist). The fixed policies' hit rates do not depend on it: `--fixed-cache FILE` keeps
them between runs. `--jobs N` runs traces in N processes. Hit rates are deterministic. `--set` needs
RADIXKV_PURE_PYTHON=1: the compiled core's class reads its constants as they were built.

    .venv/bin/python bench/policy_grid.py tune
    .venv/bin/python bench/policy_grid.py held --fixed-cache fixed.json --set WINDOW=4.0
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import time
from multiprocessing import Pool
from typing import Callable, TypeVar

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # once: bench/e2e.py takes one such entry off before transformers looks for `kernels`
    sys.path.insert(0, HERE)  # policy_margins, beside this file

from policy_margins import random_trace  # noqa: E402

from radixkv import COMPILED_CORE  # noqa: E402
from radixkv.bench.opt import build_segments  # noqa: E402
from radixkv.bench.runner import capacity, replay  # noqa: E402
from radixkv.bench.traces import read_trace  # noqa: E402
from radixkv.bench.workloads import DEFAULT_WORKLOADS, Request, make_workload  # noqa: E402
from radixkv.cli_args import HelpFormatter  # noqa: E402
from radixkv.eviction import POLICIES  # noqa: E402
from radixkv.eviction.adaptive import Adaptive  # noqa: E402
from radixkv.eviction.view import CachedNodeView  # noqa: E402

FRACS = (0.05, 0.1, 0.25, 0.5)
J = TypeVar("J")  # a job (`each`)
R = TypeVar("R")  # its result
FIXED = ("lru", "lfu", "fifo", "slru")
TUNE = ([f"wl:{w}:1:0" for w in DEFAULT_WORKLOADS] + ["wl:longchat:16:0", "wl:longdoc:16:0"]
        + [f"moon:{s}" for s in (11, 12, 13)] + [f"seed:{s}" for s in (3012, 3021, 3077)])
CHECK = [f"seed:{s}" for s in range(3000, 3070) if f"seed:{s}" not in TUNE]
FIT = [f"seed:{s}" for s in range(4000, 4070)]
VAL = [f"seed:{s}" for s in range(5000, 5070)]
FRESH = [f"seed:{s}" for s in range(6000, 6070)]
BENCH = [f"wl:{w}:{p}:0" for p in (1, 16) for w in ("agent", "tools", "rag", "chat", "longchat", "gsp")]
HELD = ([f"seed:{s}" for s in range(2000, 2040)] + [f"moon:{s}" for s in (1, 2, 3)]
        + [f"wl:{w}:{p}:{s}" for w in ("tools", "agent", "longchat", "chat") for p, s in ((1, 5), (16, 6))])


def load(name: str) -> tuple[list[Request], int]:
    """(requests, page size) of a grid entry: wl:NAME:PAGE:SEED, seed:N, moon:SEED or file:PATH:PAGE."""
    kind, _, arg = name.partition(":")
    if kind == "wl":
        workload, page, seed = arg.split(":")
        return make_workload(workload, seed=int(seed)), int(page)
    if kind == "seed":
        _, reqs, page = random_trace(int(arg))
        return reqs, page
    if kind == "moon":
        from radixkv.scheduling.synth import mooncake_shaped
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for line in mooncake_shaped(400, seed=int(arg)):
                f.write(json.dumps(line) + "\n")
        try:
            return read_trace(f.name), 16
        finally:
            os.unlink(f.name)
    path, _, page = arg.rpartition(":")
    return read_trace(path), int(page)


class FirstExpert(Adaptive):
    """Adaptive whose prior's verdict is forced: it follows `first` (0: LRU, 1: LFU) from the first eviction on."""

    first = 0

    def on_evict(self, victim: CachedNodeView) -> None:
        if self._tree is None:  # no replay: the verdict is `first`
            self._history = None
            if self.mode != self.first:
                self._follow(self.first)
        super().on_evict(victim)


def shares(name: str) -> tuple[list[Request], int, list[tuple[float, int]]]:
    """A grid entry's requests, its page size, and (share, capacity in tokens) for every share in FRACS."""
    reqs, page = load(name)
    unique, longest = build_segments(reqs, page).total_pages * page, max(len(r.tokens) for r in reqs)
    return reqs, page, [(f, capacity(f, unique, longest, page)) for f in FRACS]


def run(job: tuple[str, dict[str, object], tuple[str, ...], int | None]) -> dict[str, float]:
    name, overrides, policies, first = job
    for key, value in overrides.items():
        setattr(Adaptive, key, value)
    FirstExpert.first = 0 if first is None else first
    POLICIES["adaptive"] = Adaptive if first is None else FirstExpert
    try:
        reqs, page, caps = shares(name)
        out = {}
        for f, cap in caps:
            for p in policies:
                out[f"{name}|{f}|{p}"] = replay(reqs, cap, p, page).hit_rate
        return out
    finally:
        POLICIES["adaptive"] = Adaptive


def held_names(traces: list[str]) -> list[str]:
    """The held grid's traces with `traces` (FILE:PAGE, `--trace`) added."""
    return HELD + [f"file:{t}" for t in traces]


def grid_args(ap: argparse.ArgumentParser, both: bool = False) -> None:
    """The arguments every grid script takes: the grid (`both`: tune and held, where the script offers it), `--only`
    and `--jobs`."""
    grids = ["tune", "check", "held", "both", "bench", "fit", "val", "fresh"] if both else \
        ["tune", "check", "held", "bench", "fit", "val", "fresh"]
    ap.add_argument("grid", choices=grids)
    ap.add_argument("--only", default="", help="keep the grid entries whose name contains this")
    ap.add_argument("--jobs", type=int, default=1, help="processes")


def grid_names(grid: str, held: list[str], only: str) -> list[str]:
    """The trace names of `grid` (`held`: the held grid's, held_names) that contain `only`."""
    chosen = {"tune": TUNE, "check": CHECK, "held": held, "both": TUNE + held, "bench": BENCH,
              "fit": FIT, "val": VAL, "fresh": FRESH}[grid]
    return [n for n in chosen if only in n]


def each(fn: Callable[[J], R], jobs: list[J], processes: int) -> list[R]:
    """`fn` of every job, in `processes` processes, in the order they finish (one: in this process, in order)."""
    if processes <= 1:
        return [fn(job) for job in jobs]
    with Pool(processes) as pool:
        return list(pool.imap_unordered(fn, jobs))


def gathered(fn: Callable[[J], list[R]], jobs: list[J], processes: int, order: Callable[[R], object]) -> list[R]:
    """Every item of `fn`'s lists over `jobs` (each()), sorted by `order`: the same whatever order the jobs finish."""
    return sorted((item for got in each(fn, jobs, processes) for item in got), key=order)


def summary(label: str, rows: list[tuple[str, float, float]]) -> str:
    m = np.array([r[2] for r in rows])
    worst = min(rows, key=lambda r: r[2])
    return (f"{label}: {len(m)} cells, worst {m.min():+.2f} ({worst[0]} {worst[1]:.0%}), mean {m.mean():+.3f}, "
            f"below -0.5: {int((m < -0.5).sum())}, below -1: {int((m < -1).sum())}")


def classify(rows: list[tuple[str, float, float]], hits: dict[str, dict[str, float]], below: float) -> str:
    """The cells of `rows` below `below` points, each with its best fixed policy, the gap of the better expert
    (LRU or LFU) to it and adaptive's to that expert (points), then per class: cells and both gaps summed."""
    lines, classes = ["| cell | share | best | best - expert | expert | adaptive - expert | margin |"], {}
    for n, f, margin in sorted(rows, key=lambda r: r[2]):
        if margin >= below:
            continue
        hit = hits[f"{n}|{f}"]
        best, expert = max(FIXED, key=lambda p: hit[p]), max(("lru", "lfu"), key=lambda p: hit[p])
        reach, switching = 100 * (hit[best] - hit[expert]), 100 * (hit["adaptive"] - hit[expert])
        lines.append(f"| {n} | {f:.0%} | {best} | {reach:.2f} | {expert} | {switching:+.2f} | {margin:+.2f} |")
        label = (f"{best} best, beyond the experts" if -reach < below else
                 f"{best} best, {expert} within {-below:g}" if best != expert else f"{best} best")
        c = classes.setdefault(label, [0, 0.0, 0.0])
        c[0], c[1], c[2] = c[0] + 1, c[1] - reach, c[2] + switching
    lines += [f"{label}: {c[0]} cells, better expert vs best {c[1]:+.2f}, adaptive vs better expert {c[2]:+.2f}"
              for label, c in sorted(classes.items(), key=lambda kv: -kv[1][0])]
    return "\n".join(lines)


def read_cells(path: str) -> dict[tuple[str, str], float]:
    """(name, share as printed) -> margin, from a `--cells` output (the classes' table and summaries skipped)."""
    out = {}
    with open(path) as f:
        for line in f:
            p = [x.strip() for x in line.strip().strip("|").split("|")]
            if line.startswith("| ") and len(p) == len(FIXED) + 4 and p[1].endswith("%"):
                out[(p[0], p[1])] = float(p[-1])
    return out


def against(rows: list[tuple[str, float, float]], before: dict[tuple[str, str], float], moved: float = 0.05) -> str:
    """`rows`' cells against `before` (read_cells; margins compared as printed): those new below -1, then every
    cell that moved by more than `moved` points, worst move first."""
    pairs = [(n, f"{f:.0%}", before[(n, f"{f:.0%}")], round(m, 2)) for n, f, m in rows if (n, f"{f:.0%}") in before]
    fell = [f"{n} {s} {b:+.2f} -> {a:+.2f}" for n, s, b, a in pairs if a < -1 <= b]
    move = sorted((p for p in pairs if abs(p[3] - p[2]) > moved + 1e-9), key=lambda p: p[3] - p[2])
    lines = [f"against: {len(pairs)} cells, {len(move)} moved by more than {moved:g} "
             f"({sum(a > b for _, _, b, a in move)} better), new below -1: {', '.join(fell) or 'none'}"]
    return "\n".join(lines + [f"| {n} | {s} | {b:+.2f} | {a:+.2f} |" for n, s, b, a in move])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    grid_args(ap, both=True)
    ap.add_argument("--trace", action="append", default=[], metavar="FILE:PAGE", help="add a trace to the held grid")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override an Adaptive constant")
    ap.add_argument("--fixed-cache", help="JSON file keeping the fixed policies' hit rates between runs")
    ap.add_argument("--cells", action="store_true", help="print every cell")
    ap.add_argument("--classes", type=float, metavar="T", help="classify the cells below T points (docstring)")
    ap.add_argument("--against", metavar="FILE", help="an earlier --cells output to compare with (docstring)")
    ap.add_argument("--first", choices=("lru", "lfu"), help="force the prior's verdict (docstring)")
    a = ap.parse_args(argv)
    overrides = {k: ast.literal_eval(v) for k, _, v in (s.partition("=") for s in a.set)}
    for key in overrides:
        if not key.isupper() or not hasattr(Adaptive, key):
            ap.error(f"Adaptive has no constant {key}")
    if overrides and COMPILED_CORE:  # the compiled class reads its constants as built: a --set would do nothing
        ap.error("--set needs the pure-Python core: run with RADIXKV_PURE_PYTHON=1")
    held = held_names(a.trace)
    names = grid_names(a.grid, held, a.only)
    fixed: dict[str, float] = {}
    if a.fixed_cache and os.path.exists(a.fixed_cache):
        with open(a.fixed_cache) as f:
            fixed = json.load(f)
    t0 = time.perf_counter()
    for r in each(run, [(n, {}, FIXED, None) for n in names if f"{n}|{FRACS[0]}|lru" not in fixed], a.jobs):
        fixed.update(r)
    got: dict[str, float] = {}
    first = None if a.first is None else ("lru", "lfu").index(a.first)
    for r in each(run, [(n, overrides, ("adaptive",), first) for n in names], a.jobs):
        got.update(r)
    if a.fixed_cache:
        with open(a.fixed_cache, "w") as f:
            json.dump(fixed, f)
    rows, hits = [], {}
    for n in names:
        for f in FRACS:
            hit = {p: fixed[f"{n}|{f}|{p}"] for p in FIXED}
            rows.append((n, f, 100 * (got[f"{n}|{f}|adaptive"] - max(hit.values()))))
            hits[f"{n}|{f}"] = {**hit, "adaptive": got[f"{n}|{f}|adaptive"]}
            if a.cells:
                print(f"| {n} | {f:.0%} | " + " | ".join(f"{hit[p]:.4f}" for p in FIXED)
                      + f" | {got[f'{n}|{f}|adaptive']:.4f} | {rows[-1][2]:+.2f} |")
    grids = {"bench": (("bench", BENCH),), "fit": (("fit", FIT),), "val": (("val", VAL),),
             "fresh": (("fresh", FRESH),)}.get(
        a.grid, (("tune", TUNE), ("check", CHECK), ("held", held)))
    for label, part in ((label, [r for r in rows if r[0] in grid]) for label, grid in grids):
        if part:
            print(summary(label, part))
            if a.classes is not None:
                print(classify(part, hits, a.classes))
            if a.against:
                print(against(part, read_cells(a.against)))
    forced = f", first {a.first}" if a.first else ""
    print(f"overrides {overrides}{forced}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
