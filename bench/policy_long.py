"""Margins of the default policy over the best of LRU and LFU on 4x longer versions of the built-in
workloads (more turnovers of the cache, so the lag before a switch weighs less), page size 16.

    .venv/bin/python bench/policy_long.py
"""

from __future__ import annotations

import argparse
import time

from radixkv.bench.opt import build_segments
from radixkv.bench.runner import capacity, replay
from radixkv.bench.workloads import agent, chat, gsp, longchat, longdoc, rag, tot
from radixkv.cli_args import HelpFormatter, positive_int

LONG = {
    "gsp x4": lambda: gsp(num_groups=256),
    "chat x4": lambda: chat(num_convs=512),
    "tot x4": lambda: tot(num_trees=64),
    "agent x4": lambda: agent(num_agents=192),
    "rag x4": lambda: rag(num_requests=4096),
    "longchat x4": lambda: longchat(num_sessions=384),
    "longdoc x4": lambda: longdoc(num_requests=1920),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--page-size", type=positive_int, default=16, help="tokens per page")
    t0, page = time.perf_counter(), ap.parse_args(argv).page_size
    for name, make in LONG.items():
        reqs = make()
        unique = build_segments(reqs, page).total_pages * page
        longest = max(len(r.tokens) for r in reqs)
        row = []
        for f in (0.05, 0.1, 0.25, 0.5):
            cap = capacity(f, unique, longest, page)
            hit = {p: replay(reqs, cap, p, page).hit_rate for p in ("lru", "lfu", "adaptive")}
            row.append(f"{hit['lru']:.3f} / {hit['lfu']:.3f} / {hit['adaptive']:.3f} "
                       f"({100 * (hit['adaptive'] - max(hit['lru'], hit['lfu'])):+.2f})")
        print(f"| {name} | {len(reqs)} | " + " | ".join(row) + " |", flush=True)
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
