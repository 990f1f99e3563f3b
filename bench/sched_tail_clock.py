"""How late is `auto`'s tail against fcfs's own run, and how well does a fluid FCFS clock predict fcfs's admissions?

One run of a bench/sched_sweep.py cell under fcfs and one under auto. For the requests whose TTFT under auto is over
fcfs's p99 (the tail): how far auto admitted each past fcfs's admission of it (seconds). Then a fluid FCFS queue on
the same arrivals: the prompt blocks that arrived ahead of request i drain at a rate, and i's predicted FCFS
admission is when they have drained. The rate is read causally (a trailing window, over the time a queue stood):

    auto        prompt blocks auto's run admitted (cached ones included): what an online clock inside auto reads
    auto/h      blocks auto's run computed (uncached) / (1 - fcfs's final hit rate): auto's throughput of work
                priced at fcfs's hit rate (an oracle of the hit rate only)
    fcfs        prompt blocks fcfs's own run admitted: the fluid model's own error (an oracle)
    clock       radixkv/scheduling/fcfs_clock.py as auto would read it online (its window in cache-times of busy
                time; a run of auto feeding it, decisions unchanged), of three kinds (`--clocks`):
      prompt    work is the prompt, drained at the prompt tokens auto admitted (round 26's clock)
      oracle    work is (1 - fcfs's final hit rate) of the prompt, drained at the uncached tokens auto admitted
      tree      work is what FCFS's cache (a metadata-only tree fed in FCFS order, learned online) lacks, drained
                at the uncached tokens auto admitted (round 27's; the row gives the tree's hit rate)

Per estimator and window: the error (predicted - fcfs's admission, seconds) over all requests and over the tail, and
how many tail requests auto admitted after the prediction.

    python bench/sched_tail_clock.py base-s2 1 1.2 [--windows 5,15,60]
(from a git worktree, prefix `PYTHONPATH=.`.)
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_tail  # noqa: E402  (bench/ is no package)

from radixkv.scheduling.auto import Auto  # noqa: E402
from radixkv.scheduling.fcfs_clock import FcfsClock, make_clock  # noqa: E402
from radixkv.scheduling.simulate import Simulation  # noqa: E402

DT = 0.02  # seconds: the fluid queue's step


class Recording(FcfsClock):
    """The clock, keeping every request's FCFS start (admitted ones too)."""

    def admitted(self, req, now: float, cached: int = 0) -> None:
        self.count(req, now, cached)


class Oracle(Recording):
    """The clock with fcfs's final hit rate given (an oracle): each request's work is (1 - HIT) of its prompt,
    drained at the uncached prompt tokens the real server admitted."""
    HIT = 0.0

    def cost(self, req, n: int) -> float:
        return n * (1 - self.HIT)

    def count(self, req, now: float, cached: int) -> None:
        self.advance(now)
        if self.saturated:
            self.pending += len(req.tokens) - cached


class Clocked(Auto):
    """Auto (its decisions) feeding a Recording clock of WINDOW cache-times: KIND "prompt" (round 26's: work is the
    prompt), "oracle" (Oracle) or "tree" (FCFS's cache online, TREE caches under EVICT). The clock's rate counts the
    steps that began with BUSY caches of prompt tokens waiting (the server admitted at its capacity)."""
    WINDOW = 1.0
    KIND = "tree"
    BUSY = 0.1
    TREE = 1.0
    EVICT = "lru"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = self.estimates.cache.config
        window = self.WINDOW * config.num_slots
        if self.KIND == "oracle":
            self.fcfs = Oracle(window)
        else:
            self.fcfs = make_clock(window, config, self.TREE if self.KIND == "tree" else 0.0, self.EVICT, Recording)

    def arrived(self, req, now: float) -> None:
        self.fcfs.arrived(req, now)
        super().arrived(req, now)

    def order(self, window, now: float):
        self.fcfs.step(now, self.backlog >= self.BUSY * self.estimates.cache.config.num_slots)
        return super().order(window, now)

    def admitted(self, req, now: float) -> None:
        if req in self.turn:  # not a preempted request's resumption
            self.fcfs.admitted(req, now, self.lengths.get(req, 0))
        super().admitted(req, now)


def clocked_starts(name: str, cap: str, load: float, requests: int, traces_dir: str, window: float,
                   kind: str = "prompt") -> tuple[np.ndarray, np.ndarray, FcfsClock, float]:
    """Each request's FCFS start (seconds) as the clock of `kind` read it online in a run of auto, the run's TTFTs,
    the clock, and the run's process seconds."""
    Clocked.WINDOW, Clocked.KIND = window, kind
    began = time.process_time()
    sim, out = sched_tail.simulate_as(Clocked, name, cap, load, requests, traces_dir)
    took = time.process_time() - began
    clock = sim.sched.policy.fcfs
    clock.advance(float("inf"))
    per_unit = sim.sched.clock() / sim.now
    return np.array([clock.started.get(r, np.nan) / per_unit for r in sim.reqs]), out.ttft_s, clock, took


def tree_seconds(sim: Simulation, repeat: int) -> float:
    """Process seconds the tree clock's tree takes for every request of `sim` (its prompts, arrival order)."""
    best = math.inf
    for _ in range(repeat):
        fluid = make_clock(1.0, sim.cache.config, Clocked.TREE, Clocked.EVICT)
        began = time.process_time()
        for r in sim.reqs:
            fluid.cost(r, r.prompt_len)
        best = min(best, time.process_time() - began)
    return best


def trailing_rate(grid: np.ndarray, admit_s: np.ndarray, blocks: np.ndarray, busy: np.ndarray,
                  window: float) -> np.ndarray:
    """At each grid time t: blocks admitted in [t - window, t) / the time in it that some request waited."""
    order = np.argsort(admit_s, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(blocks[order])])
    times = admit_s[order]
    hi = np.searchsorted(times, grid, side="left")
    lo = np.searchsorted(times, grid - window, side="left")
    busy_cum = np.concatenate([[0.0], np.cumsum(busy * DT)])
    steps = int(round(window / DT))
    idx = np.arange(len(grid))
    busy_time = busy_cum[idx] - busy_cum[np.maximum(0, idx - steps)]
    rate = np.full(len(grid), np.nan)
    ok = busy_time > 0.25 * window
    rate[ok] = (cum[hi] - cum[lo])[ok] / busy_time[ok]
    for i in range(len(rate)):  # no busy time in the window: the last rate read (none yet: the first read)
        if np.isnan(rate[i]):
            rate[i] = rate[i - 1] if i else np.nan
    first = np.flatnonzero(~np.isnan(rate))
    rate[np.isnan(rate)] = rate[first[0]] if len(first) else 1.0
    return rate


def waiting(grid: np.ndarray, arrive: np.ndarray, admit: np.ndarray) -> np.ndarray:
    """1.0 where some request had arrived and was not admitted at the grid time."""
    arrived = np.searchsorted(np.sort(arrive), grid, side="right")
    admitted = np.searchsorted(np.sort(admit), grid, side="right")
    return (arrived > admitted).astype(np.float64)


def fluid(grid: np.ndarray, rate: np.ndarray, arrive: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Each request's predicted FCFS admission: when the blocks arrived ahead of it have drained at `rate`."""
    ahead = np.concatenate([[0.0], np.cumsum(blocks)[:-1]])
    arrived_cum = np.cumsum(blocks)
    pred = np.full(len(arrive), np.nan)
    drained, i, k, n = 0.0, 0, 0, len(arrive)
    for g, t in enumerate(grid):
        while k < n and arrive[k] <= t:
            k += 1
        while i < k and drained >= ahead[i] - 1e-9:  # its turn: everything ahead has drained
            pred[i] = max(t, arrive[i])
            i += 1
        if i >= n:
            break
        cap = arrived_cum[k - 1] if k else 0.0
        drained = min(cap, drained + rate[g] * DT)
    return pred


def quantiles(x: np.ndarray, sign: str = "+") -> str:
    if len(x) == 0:
        return "-"
    q = np.percentile(x, [10, 50, 90])
    return f"{q[0]:{sign}.2f} / {q[1]:{sign}.2f} / {q[2]:{sign}.2f}"


def row(name: str, window: str, pred: np.ndarray, arrive: np.ndarray, f_admit: np.ndarray, a_admit: np.ndarray,
        tail: np.ndarray) -> str:
    """One estimator's line: its error in seconds over all requests; its predicted wait / fcfs's over the requests
    fcfs kept waiting over a second, and over the tail; how long after the prediction auto admitted the tail."""
    err = pred - f_admit
    f_wait = f_admit - arrive
    long = f_wait > 1.0
    ratio = (pred - arrive) / np.maximum(f_wait, 1e-9)
    over = a_admit[tail] - pred[tail]
    return (f"| {name} | {window} | {quantiles(err)} | {quantiles(ratio[long], '')} | {quantiles(ratio[tail], '')} "
            f"| {np.median(over) if len(over) else 0:.2f}, {int((over > 0).sum())} |")


def main(argv: list[str] | None = None) -> int:
    p = sched_tail.cell_parser(__doc__)
    p.add_argument("--windows", default="5,15,60", help="trailing windows of the rate, seconds")
    p.add_argument("--clock-windows", default="0.33,1,4", help="the online clock's windows, cache-times")
    p.add_argument("--clocks", default="prompt,oracle,tree", help="the online clocks (Clocked.KIND)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each clock (and of auto with none) timed: the best")
    a = sched_tail.cell_args(p, argv)
    runs: dict[str, Simulation] = {}
    outs = {}
    for schedule in ("fcfs", "auto"):
        runs[schedule], outs[schedule] = sched_tail.simulate(a.trace, a.capacity, a.load, schedule, a.requests,
                                                             a.traces_dir)
    fs, au = runs["fcfs"].reqs, runs["auto"].reqs
    arrive = np.array([r.arrive_s for r in fs])
    blocks = np.array([r.prompt_len for r in fs], dtype=np.float64)
    f_admit = np.array([r.admitted_s for r in fs])
    a_admit = np.array([r.admitted_s for r in au])
    a_reused = np.array([r.reused_tokens for r in au], dtype=np.float64)
    f_hit = sum(r.reused_tokens for r in fs) / blocks.sum()
    a_hit = a_reused.sum() / blocks.sum()
    line = float(np.percentile(outs["fcfs"].ttft_s, 99))
    tail = np.flatnonzero(outs["auto"].ttft_s > line)
    late = a_admit[tail] - f_admit[tail]
    print(f"## {a.trace} {a.capacity} {a.load}: fcfs hit {f_hit:.3f}, p99 {line:.2f} s; auto hit {a_hit:.3f}, "
          f"p99 {np.percentile(outs['auto'].ttft_s, 99):.2f} s; tail {len(tail)} requests")
    print(f"auto's admission - fcfs's, s (p10 / median / p90): tail {quantiles(late)}, all "
          f"{quantiles(a_admit - f_admit)}; tail requests auto admitted later than fcfs: {int((late > 0).sum())}; "
          f"fcfs waits of the tail (median) {np.median(f_admit[tail] - arrive[tail]):.2f} s, auto's "
          f"{np.median(a_admit[tail] - arrive[tail]):.2f} s")
    grid = np.arange(0.0, max(f_admit.max(), a_admit.max()) + 1.0, DT)
    a_busy, f_busy = waiting(grid, arrive, a_admit), waiting(grid, arrive, f_admit)
    print("| rate | window | error, all: p10 / median / p90 s | wait / fcfs's, fcfs wait > 1 s | wait / fcfs's, tail "
          "| tail admitted after the prediction by: median s, count |")
    print("|---|---:|---|---|---|---|")
    for w in (float(x) for x in a.windows.split(",") if x):
        rates = {"auto": trailing_rate(grid, a_admit, blocks, a_busy, w),
                 "auto/h": trailing_rate(grid, a_admit, blocks - a_reused, a_busy, w) / (1 - f_hit),
                 "fcfs": trailing_rate(grid, f_admit, blocks, f_busy, w)}
        for name, rate in rates.items():
            print(row(name, f"{w:g} s", fluid(grid, rate, arrive, blocks), arrive, f_admit, a_admit, tail))
    Oracle.HIT = f_hit
    seconds: dict[str, float] = {}
    for w in (float(x) for x in a.clock_windows.split(",") if x):
        for kind in a.clocks.split(","):
            for _ in range(a.repeat):
                pred, _, clock, took = clocked_starts(a.trace, a.capacity, a.load, a.requests, a.traces_dir, w, kind)
                seconds[kind] = min(seconds.get(kind, took), took)
            learned = f", hit {1 - clock.work / clock.prompts:.3f}" if clock.tree is not None else ""
            print(row(f"clock {kind}{learned}", f"{w:g} caches", pred, arrive, f_admit, a_admit, tail))
    for _ in range(a.repeat):  # auto with no clock (main's)
        began = time.process_time()
        sched_tail.simulate(a.trace, a.capacity, a.load, "auto", a.requests, a.traces_dir)
        seconds["none"] = min(seconds.get("none", math.inf), time.process_time() - began)
    print(f"requests a process second of a run of auto feeding each clock (best of {a.repeat}): "
          + ", ".join(f"{k} {len(fs) / v:.0f}" for k, v in seconds.items()))
    print(f"the tree alone (a match and an insert a request, arrival order, best of {a.repeat}): "
          f"{tree_seconds(runs['auto'], a.repeat) / len(fs) * 1e6:.1f} us a request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
