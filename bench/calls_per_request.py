"""Python-level work per request of the bench lifecycle (match, lock, alloc, insert, unlock), counted
with `sys.setprofile`: Python function calls and C function calls (numpy, torch, builtins) per
request, and where they go. Deterministic, unlike a timing, so it shows an interpreter-overhead cut
on a noisy machine.

    .venv/bin/python bench/calls_per_request.py                       # the cells below, 300 requests each
    .venv/bin/python bench/calls_per_request.py --top 12 --cells tools:0.25:1
    .venv/bin/python bench/calls_per_request.py --profile 15 --cells tools:0.25:1 --requests 458
    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/calls_per_request.py --events --cells chat:0.25:1  # KV events on

With `--events` the cache records XXH3 KV events (16-token blocks) and they are taken after every
request (`take_events`, as bench/events_cost.py and a publisher do), inside the count.

A cell is workload:capacity fraction:page size, the capacity a share of the trace's unique tokens
(at least one request's worth, as `radixkv bench` sizes it).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from collections import Counter
from types import FrameType

from radixkv.bench.opt import build_segments
from radixkv.bench.runner import capacity, replay
from radixkv.bench.workloads import Request, make_workload
from radixkv.cli import core_build
from radixkv.cli_args import HelpFormatter

CELLS = "gsp:0.1:1,gsp:1.0:1,gsp:0.25:16,chat:0.25:1,agent:0.25:1,tools:0.25:1,tools:0.1:16"


def _cell(workload: str, frac: float, page_size: int, requests: int) -> tuple[list[Request], int]:
    """The first `requests` of the workload and the cache size `radixkv bench` gives that share."""
    reqs = make_workload(workload)[:requests]
    unique = build_segments(reqs, page_size).total_pages * page_size
    return reqs, capacity(frac, unique, max(len(r.tokens) for r in reqs), page_size)


def count(workload: str, frac: float, page_size: int, requests: int, policy: str,
          events: bool = False) -> tuple[int, Counter, Counter]:
    """(requests replayed, Python calls by function, C calls by function) of one replay."""
    reqs, cap = _cell(workload, frac, page_size, requests)
    py: Counter = Counter()
    c: Counter = Counter()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            py[f"{frame.f_code.co_filename.rpartition('radixkv/')[2]}:{frame.f_code.co_name}"] += 1
        elif event == "c_call":
            c[getattr(arg, "__qualname__", repr(arg))] += 1

    sys.setprofile(profile)
    try:
        replay(reqs, cap, policy, page_size, events=events)
    finally:
        sys.setprofile(None)
    return len(reqs), py, c


def profile(workload: str, frac: float, page_size: int, requests: int, policy: str, top: int,
            events: bool = False) -> None:
    """Own time per call of the `top` costliest functions of one replay, in µs per request."""
    reqs, cap = _cell(workload, frac, page_size, requests)
    prof = cProfile.Profile()
    prof.runcall(replay, reqs, cap, policy, page_size, events=events)
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (primitive calls, calls, own s, cumulative s, callers)
    total = sum(v[2] for v in stats.values())
    print(f"{workload}:{frac}:{page_size}, {len(reqs)} requests: "
          f"{total / len(reqs) * 1e6:.0f} µs/request under cProfile")
    print(f"{'own µs/req':>10} {'calls/req':>9}  function")
    for (file, line, name), (_, calls, own, _, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        where = f"{file.rpartition('radixkv/')[2]}:{line}" if file != "~" else "builtin"
        print(f"{own / len(reqs) * 1e6:>10.1f} {calls / len(reqs):>9.2f}  {name} ({where})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--cells", default=CELLS, help="workload:frac:page_size,...")
    p.add_argument("--requests", type=int, default=300, help="first N requests of each trace")
    p.add_argument("--policy", default="lru")
    p.add_argument("--events", action="store_true", help="KV events on (XXH3), taken after every request")
    p.add_argument("--top", type=int, default=0, help="also list the N most called functions per cell")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="instead: cProfile each cell's replay, the N functions with the most own time")
    args = p.parse_args(argv)
    if args.profile:
        for cell in args.cells.split(","):
            w, frac, ps = cell.split(":")
            profile(w, float(frac), int(ps), args.requests, args.policy, args.profile, args.events)
        return 0
    note = ": compiled functions are not counted (RADIXKV_PURE_PYTHON=1 counts them)"
    print(f"{core_build()}{note if core_build() == 'compiled core' else ''}")
    print(f"{'cell':<18} {'Python calls/req':>16} {'C calls/req':>12}")
    for cell in args.cells.split(","):
        w, frac, ps = cell.split(":")
        n, py, c = count(w, float(frac), int(ps), args.requests, args.policy, args.events)
        print(f"{cell:<18} {sum(py.values()) / n:>16.1f} {sum(c.values()) / n:>12.1f}")
        for name, k in (py + c).most_common(args.top):
            print(f"    {k / n:6.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
