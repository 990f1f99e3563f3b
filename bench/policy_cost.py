"""What the default policy's bookkeeping costs next to LRU's: same process, interleaved rounds.

Per cell (workload:capacity fraction:page size, sized as `radixkv bench` sizes it), `--rounds` rounds
of (lru, adaptive) replays one after the other, each timed by the CPU time of the whole replay
(`time.process_time`, less sensitive than wall time to the other tenants of a shared machine); each
policy keeps its best round and the cell reports adaptive / lru. Hit rates are printed too (they are
deterministic), so a speed-up that changes a decision shows.

    .venv/bin/python bench/policy_cost.py
    .venv/bin/python bench/policy_cost.py --cells chat:0.25:1,tools:0.25:16 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from radixkv.bench.opt import build_segments
from radixkv.bench.runner import capacity, replay
from radixkv.bench.workloads import Request, make_workload
from radixkv.cli_args import HelpFormatter, positive_int

CELLS = ("chat:0.25:1,agent:0.25:1,tools:0.25:1,gsp:0.25:1,rag:0.1:1,"
         "chat:0.25:16,agent:0.25:16,tools:0.1:16,gsp:0.25:16,longdoc:0.1:16")


def cell(spec: str, requests: int) -> tuple[list[Request], int, int]:
    """(requests, capacity in tokens, page size) of `workload:frac:page_size`."""
    name, frac, ps = spec.split(":")
    page = int(ps)
    reqs = make_workload(name)[:requests]
    unique = build_segments(reqs, page).total_pages * page
    return reqs, capacity(float(frac), unique, max(len(r.tokens) for r in reqs), page), page


def cost(reqs: list[Request], cap: int, page: int, policies: tuple[str, ...], rounds: int
         ) -> dict[str, tuple[float, float]]:
    """policy -> (best CPU seconds of a replay, hit rate), rounds interleaved."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for pol in policies:
            t0 = time.process_time()
            hit = replay(reqs, cap, pol, page).hit_rate
            dt = time.process_time() - t0
            if pol not in best or dt < best[pol][0]:
                best[pol] = (dt, hit)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--cells", default=CELLS, help="workload:frac:page_size,...")
    p.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds; the best of each policy counts")
    p.add_argument("--requests", type=positive_int, default=100_000, help="first N requests of each trace")
    p.add_argument("--policy", default="adaptive", help="the policy measured against lru")
    a = p.parse_args(argv)
    ratios = []
    print(f"| cell | lru req/CPU-s | {a.policy} req/CPU-s | {a.policy} / lru time | hit lru | hit {a.policy} |")
    print("|---|---:|---:|---:|---:|---:|")
    for spec in a.cells.split(","):
        reqs, cap, page = cell(spec, a.requests)
        best = cost(reqs, cap, page, ("lru", a.policy), a.rounds)
        ratio = best[a.policy][0] / best["lru"][0]
        ratios.append(ratio)
        print(f"| {spec} | {len(reqs) / best['lru'][0]:,.0f} | {len(reqs) / best[a.policy][0]:,.0f} | "
              f"{ratio:.3f} | {best['lru'][1]:.4f} | {best[a.policy][1]:.4f} |", flush=True)
    print(f"{a.policy} / lru CPU time: median {statistics.median(ratios):.3f}, max {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
