"""How many runs of consecutive page ids the cached nodes hold: what a run-length form of node pages would save.

A tree node keeps its device pages as int32 `[pages]` (radix/node.py): 4 bytes a cached token at
page_size 1, as much as the index's keys. A run-length form would keep (first page, length) per
maximal run of consecutive ids instead: two int32, 8 bytes a run. This replays a workload with the
`radixkv bench` lifecycle (match, lock, alloc, insert, unlock) in a cache of `--frac` of the first
seed's distinct tokens (`radixkv bench`'s sizing), chaining seeds 0, 1, ... until the cache has
evicted `--turnovers` cache sizes, then counts, node by node, the runs in each node's pages
(a run never spans two nodes: a split cuts a node's array, and each node would keep its own runs).

    PYTHONPATH=. .venv/bin/python bench/page_runs.py                    # tools, agent, rag, mooncake; page 1
    PYTHONPATH=. .venv/bin/python bench/page_runs.py --workloads agent --policies lru --page-size 16

Prints one row per workload and policy: cached tokens, nodes, runs, runs per cached token, mean
run length in pages, and the bytes per cached token of node pages now (4 per page) and as runs (8 per
run). Deterministic: the allocator's order and the policies are.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_memory.py beside this script

from policy_memory import one_seed  # noqa: E402

from radixkv import RadixCache  # noqa: E402
from radixkv.bench.opt import build_segments  # noqa: E402
from radixkv.bench.runner import capacity, sim_config  # noqa: E402
from radixkv.cli_args import HelpFormatter, csv_of, positive_int  # noqa: E402

MAX_SEEDS = 40  # a trace that has not turned the cache over by then never will


def replay(workload: str, policy: str, page_size: int, frac: float, turnovers: int) -> tuple[RadixCache, int, int]:
    """The cache after `turnovers` cache sizes evicted, the requests served and the seeds used."""
    first = one_seed(workload, 0)
    longest = max(len(r.tokens) for r in first)
    slots = capacity(frac, build_segments(first, page_size).total_pages * page_size, longest, page_size)
    cache = RadixCache(sim_config(slots, page_size, policy, 4 * longest))
    served = 0
    for seed in range(MAX_SEEDS):
        for r in first if seed == 0 else one_seed(workload, seed):
            if len(r.tokens) > cache.config.max_context_len or -(-len(r.tokens) // page_size) > cache.config.num_pages:
                continue
            m = cache.match_prefix(r.tokens[:r.prompt_len])
            cache.lock(m.node)
            cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
            cache.unlock(m.node)
            served += 1
            if cache.stats.evicted_tokens >= turnovers * slots:
                return cache, served, seed + 1
    raise SystemExit(f"{workload}: {MAX_SEEDS} seeds did not evict {turnovers} cache sizes")


def runs(cache: RadixCache) -> tuple[int, int]:
    """Nodes with device pages, and the maximal runs of consecutive page ids in them, node by node."""
    nodes = total = 0
    for node in cache.tree.nodes():
        pages = node.pages
        if pages is None or not len(pages):
            continue
        nodes += 1
        total += 1 + int(np.count_nonzero(np.diff(pages.astype(np.int64)) != 1))
    return nodes, total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--workloads", type=csv_of(str), default="tools,agent,rag,mooncake")
    p.add_argument("--policies", type=csv_of(str), default="lru,adaptive")
    p.add_argument("--page-size", type=positive_int, default=1)
    p.add_argument("--frac", type=float, default=0.25, help="cache size, a fraction of seed 0's distinct tokens")
    p.add_argument("--turnovers", type=positive_int, default=2, help="evicted tokens, in cache sizes")
    a = p.parse_args(argv)
    print("| workload | policy | requests | seeds | cached tokens | nodes | runs | runs / token | pages / run | "
          "node pages B/token | as runs B/token |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workload in a.workloads:
        for policy in a.policies:
            cache, served, seeds = replay(workload, policy, a.page_size, a.frac, a.turnovers)
            cached = cache.sizes().cached
            nodes, n = runs(cache)
            pages = cached // a.page_size
            print(f"| {workload} | {policy} | {served:,} | {seeds} | {cached:,} | {nodes:,} | {n:,} | {n / cached:.4f} | "
                  f"{pages / n:.1f} | {4 * pages / cached:.2f} | {8 * n / cached:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
