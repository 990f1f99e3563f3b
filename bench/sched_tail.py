"""Who is in a sweep cell's TTFT tail, and what passed them: one run per schedule of one bench/sched_sweep.py cell
(trace, capacity, load), its k longest TTFTs with the prompt's size and cached part (in the trace's 512-token
blocks), the wait to admission, and how many later arrivals were admitted before it (and their blocks; one admitted
in the same step does not count). `--profile` says instead where the mean comes from: per tenth of the arrivals,
the mean TTFT, the cached share of its prompts and the largest backlog (prompt tokens waiting, in caches), and the
request at which the backlog first reached 1, 2, 3, 4 caches. `--episodes N` says it per congestion episode (a
run of arrivals each of which found some request waiting, cut where the first schedule's queue emptied): the N
episodes holding the first schedule's longest TTFTs, and on the same arrivals under every schedule the mean and
longest TTFT, the cached share, and the longest one's blocks and the blocks of later arrivals admitted before it.

    python bench/sched_tail.py base-s2 1 1.2 --schedules fcfs,lpm,auto [--set OVERTAKEN=8] [--k 35] [--profile]
    python bench/sched_tail.py base-s3 1/4 0.8 --schedules auto,fcfs,lpm --episodes 8
(from a git worktree, prefix `PYTHONPATH=.`.)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_sweep  # noqa: E402  (bench/ is no package)

from radixkv.scheduling import schedules  # noqa: E402
from radixkv.scheduling.auto import Auto  # noqa: E402
from radixkv.scheduling.cost_model import CostModel  # noqa: E402
from radixkv.scheduling.sim_trace import read_sim_trace  # noqa: E402
from radixkv.scheduling.simulate import Outcome, Simulation  # noqa: E402


def simulate(name: str, cap: str, load: float, schedule: str, requests: int,
             traces_dir: str) -> tuple[Simulation, Outcome]:
    half = next(h for h, specs in sched_sweep.TRACES.items() if name in specs)
    os.makedirs(traces_dir, exist_ok=True)
    path = sched_sweep.trace_path(traces_dir, name, sched_sweep.TRACES[half][name], requests)
    cost = CostModel()
    sim = Simulation(read_sim_trace(path, os.path.basename(path)), schedule, load,
                     sched_sweep.CAPACITIES[cap] or cost.kv_capacity_tokens, 16, cost)
    return sim, sim.run()


def simulate_as(policy: type, name: str, cap: str, load: float, requests: int,
                traces_dir: str) -> tuple[Simulation, Outcome]:
    """One run of the cell under `policy` (an Auto subclass) in auto's place; sim.sched.policy is its instance."""
    saved = schedules.POLICIES["auto"]
    schedules.POLICIES["auto"] = policy
    try:
        return simulate(name, cap, load, "auto", requests, traces_dir)
    finally:
        schedules.POLICIES["auto"] = saved


def passers(sim: Simulation) -> Callable[[int], list[int]]:
    """Request i -> the later arrivals admitted before it (admission order; ties: arrival)."""
    reqs = sim.reqs
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i].admitted_s, i))
    place = {i: p for p, i in enumerate(order)}
    return lambda i: [j for j in order[:place[i]] if j > i]


def tail(sim: Simulation, out: Outcome, k: int) -> list[dict[str, float | int]]:
    """The k longest TTFTs, longest first, each with the later arrivals admitted before it."""
    reqs, passed_by = sim.reqs, passers(sim)
    rows = []
    for i in np.argsort(-out.ttft_s, kind="stable")[:k].tolist():
        r = reqs[i]
        passed = passed_by(i)
        rows.append({"request": i, "ttft_s": float(out.ttft_s[i]), "wait_s": float(r.admitted_s - r.arrive_s),
                     "blocks": r.prompt_len, "cached": r.reused_tokens, "passed_by": len(passed),
                     "passed_blocks": sum(reqs[j].prompt_len for j in passed)})
    return rows


def profile(sim: Simulation, out: Outcome) -> tuple[list[dict[str, float]], list[int | None]]:
    """Per tenth of the arrivals: mean TTFT, cached share of its prompts, the largest backlog at an arrival (prompt
    blocks arrived and not admitted, in caches); and the request whose arrival first saw 1, 2, 3, 4 caches wait."""
    reqs, slots = sim.reqs, sim.cache.config.num_slots
    events = sorted([(r.arrive_s, 0, r.prompt_len) for r in reqs] + [(r.admitted_s, 1, -r.prompt_len) for r in reqs])
    backlog, at_arrival = 0, []
    for _, kind, n in events:  # an admission at the instant of an arrival counts first (kind 1 sorts after 0)
        backlog += n
        if kind == 0:
            at_arrival.append(backlog / slots)
    first = [next((i for i, b in enumerate(at_arrival) if b >= level), None) for level in (1, 2, 3, 4)]
    rows, n = [], len(reqs)
    for d in range(10):
        part = range(d * n // 10, (d + 1) * n // 10)
        rows.append({"ttft_s": float(out.ttft_s[list(part)].mean()),
                     "cached": sum(reqs[i].reused_tokens for i in part) / sum(reqs[i].prompt_len for i in part),
                     "backlog": max(at_arrival[i] for i in part)})
    return rows, first


def episodes(sim: Simulation) -> list[range]:
    """Arrival ranges, each starting at an arrival that found no request waiting (admitted at the same instant:
    not waiting)."""
    reqs, starts, last = sim.reqs, [0], sim.reqs[0].admitted_s
    for i in range(1, len(reqs)):
        if last <= reqs[i].arrive_s:  # every earlier arrival was admitted by now
            starts.append(i)
        last = max(last, reqs[i].admitted_s)
    return [range(a, b) for a, b in zip(starts, starts[1:] + [len(reqs)])]


def episode_row(sim: Simulation, out: Outcome, part: range) -> dict[str, float | int]:
    """Mean and longest TTFT over `part`'s arrivals, their cached share, and the longest one's blocks, cached blocks
    and the blocks of later arrivals (any, not only `part`'s) admitted before it."""
    reqs = sim.reqs
    worst = max(part, key=lambda i: out.ttft_s[i])
    w = reqs[worst]
    passed = sum(r.prompt_len for r in reqs[worst + 1:] if (r.admitted_s, r.index) < (w.admitted_s, w.index))
    return {"requests": len(part), "mean_s": float(out.ttft_s[list(part)].mean()),
            "max_s": float(out.ttft_s[worst]), "worst": worst, "blocks": w.prompt_len, "cached": w.reused_tokens,
            "passed_blocks": passed,
            "share": sum(reqs[i].reused_tokens for i in part) / sum(reqs[i].prompt_len for i in part)}


def print_episodes(runs: list[tuple[str, Simulation, Outcome]], n: int) -> None:
    name, sim, out = runs[0]
    parts = episodes(sim)
    top = sorted(parts, key=lambda p: -float(out.ttft_s[list(p)].max()))[:n]
    print(f"## episodes (of {name}'s run: {len(parts)}, {sum(len(p) > 1 for p in parts)} of more than one "
          "request); per schedule: mean / longest TTFT s, cached share, the longest one: request, blocks, cached, "
          "blocks of later arrivals admitted before it")
    print("| arrivals | " + " | ".join(s for s, _, _ in runs) + " |\n|---|" + "---|" * len(runs))
    for part in sorted(top, key=lambda p: p.start):
        cells = []
        for _, s, o in runs:
            e = episode_row(s, o, part)
            cells.append(f"{e['mean_s']:.2f} / {e['max_s']:.2f}, {e['share']:.2f}, #{e['worst']} "
                         f"{e['blocks']} {e['cached']} {e['passed_blocks']}")
        print(f"| {part.start}-{part.stop - 1} ({len(part)}) | " + " | ".join(cells) + " |")


def cell_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of every bench/sched_tail*.py script: one sweep cell (trace, capacity, load), --requests,
    --set (an Auto constant) and --traces-dir; `cell_args` parses them."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("trace", help="a trace name of bench/sched_sweep.py (any half)")
    p.add_argument("capacity", choices=list(sched_sweep.CAPACITIES))
    p.add_argument("load", type=float)
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override an Auto constant")
    p.add_argument("--traces-dir", default=os.path.join("bench", "out", "sweep_traces"))
    return p


def cell_args(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`p`'s arguments, with --set applied to Auto (each name must be a constant of it) and the trace checked."""
    a = p.parse_args(argv)
    for name, value in (s.split("=", 1) for s in a.set):
        if not hasattr(Auto, name):
            p.error(f"Auto has no constant {name}")
        setattr(Auto, name, float(value))
    if not any(a.trace in specs for specs in sched_sweep.TRACES.values()):
        p.error(f"no trace {a.trace!r} in bench/sched_sweep.py")
    return a


def main(argv: list[str] | None = None) -> int:
    p = cell_parser(__doc__)
    p.add_argument("--schedules", default="fcfs,lpm,auto")
    p.add_argument("--k", type=int, default=35, help="rows per schedule (3000 requests: the 30th is the p99)")
    p.add_argument("--profile", action="store_true", help="mean TTFT, cached share and backlog per tenth instead")
    p.add_argument("--episodes", type=int, default=0, metavar="N",
                   help="the N congestion episodes of the first schedule's longest TTFTs instead")
    a = cell_args(p, argv)
    runs = []
    for schedule in a.schedules.split(","):
        sim, out = simulate(a.trace, a.capacity, a.load, schedule, a.requests, a.traces_dir)
        runs.append((schedule, sim, out))
        t = out.ttft_s
        print(f"## {schedule}: hit {out.reused_tokens / out.prompt_tokens:.4f}, mean TTFT {t.mean():.3f} s, "
              f"p99 {np.percentile(t, 99):.2f} s")
        if a.episodes:
            continue
        if a.profile:
            rows, first = profile(sim, out)
            print(f"backlog first at 1, 2, 3, 4 caches: requests {first}")
            print("| tenth | mean TTFT s | cached | most caches waiting |\n|---:|---:|---:|---:|")
            for d, r in enumerate(rows):
                print(f"| {d} | {r['ttft_s']:.2f} | {r['cached']:.3f} | {r['backlog']:.2f} |")
            continue
        print("| request | TTFT s | wait s | blocks | cached | passed by | their blocks |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in tail(sim, out, a.k):
            print(f"| {r['request']} | {r['ttft_s']:.2f} | {r['wait_s']:.2f} | {r['blocks']} | {r['cached']} | "
                  f"{r['passed_by']} | {r['passed_blocks']} |")
    if a.episodes:
        print_episodes(runs, a.episodes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
