"""Host memory the bookkeeping takes per cached token, per eviction policy and page size.

A RadixCache of `--tokens` token slots (KV of one fp16 number per token: bookkeeping at full scale)
replays a workload with the bench lifecycle until the tokens it inserted add up to `--turnovers`
cache sizes, so an eviction policy's learned state is in steady state: `tools` (long agent sessions,
radixkv/bench/workloads.py; seeds 0, 1, ... one after the other, ~350k unique tokens each, many
nodes) or `mooncake` (radixkv/scheduling/synth.py: 512-token blocks, ~12k-token prompts, few large
nodes). Two measures, each in a fresh process (one does not disturb the other):

    traced   tracemalloc's growth from just before the cache is built to the end (Python objects and
             numpy arrays; torch tensors are not traced): deterministic
    rss      the process's resident set growth over the same span, less the torch buffers (KV pool,
             req_to_token), which are KV, not metadata: what the issue measures, but noisy (allocator)

both divided by the tokens cached at the end (`sizes().cached`).

    .venv/bin/python bench/policy_memory.py                        # lru and adaptive, pages 1 and 16
    .venv/bin/python bench/policy_memory.py --policies adaptive --page-sizes 1 --tokens 200000
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc

import torch

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.bench.traces import hash_block_tokens
from radixkv.bench.workloads import Request, tools
from radixkv.cli_args import HelpFormatter, csv_of, one_of, positive_int
from radixkv.scheduling.synth import BLOCK, mooncake_shaped


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _one_seed(workload: str, seed: int) -> list[Request]:
    if workload == "tools":
        return tools(seed)
    lines = mooncake_shaped(256, seed=seed)
    return [Request(t, len(t)) for t in (hash_block_tokens(d["hash_ids"], BLOCK)[:d["input_length"]] for d in lines)]


def trace(workload: str, tokens: int, turnovers: int) -> list[Request]:
    """Requests of `workload` (seeds 0, 1, ...) whose tokens add up to `turnovers` x `tokens`."""
    reqs: list[Request] = []
    seed = 0
    while sum(len(r.tokens) for r in reqs) < turnovers * tokens:
        reqs += _one_seed(workload, seed)
        seed += 1
    return reqs


def serve(cache: RadixCache, reqs: list[Request]) -> None:
    for r in reqs:
        m = cache.match_prefix(r.tokens)
        cache.lock(m.node)
        new = cache.alloc(len(r.tokens) - m.length)
        cache.insert(r.tokens, torch.cat([m.slots, new]))
        cache.unlock(m.node)


def measure(workload: str, policy: str, page_size: int, tokens: int, turnovers: int, method: str
            ) -> dict[str, float]:
    reqs = trace(workload, tokens, turnovers)
    gc.collect()
    if method == "traced":
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if method == "traced" else _rss()
    cache = RadixCache(sim_config(tokens, page_size, policy, max(len(r.tokens) for r in reqs)))
    serve(cache, reqs)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] if method == "traced" else _rss()
    grown = after - before
    if method == "rss":
        kv = sum(t.numel() * t.element_size() for t in (*cache.kv_pool.k_buffer, *cache.kv_pool.v_buffer))
        grown -= kv + cache.req_pool.req_to_token.numel() * 4
    cached = cache.sizes().cached
    return {"policy": policy, "page_size": page_size, "method": method, "cached": cached,
            "bytes_per_token": grown / cached, "requests": len(reqs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--policies", type=csv_of(str), default="lru,adaptive")
    p.add_argument("--page-sizes", type=csv_of(positive_int), default="1,16")
    p.add_argument("--workload", type=one_of(("tools", "mooncake")), default="tools")
    p.add_argument("--tokens", type=positive_int, default=1 << 20, help="cache size in tokens")
    p.add_argument("--turnovers", type=positive_int, default=3, help="inserted tokens, in cache sizes")
    p.add_argument("--one", metavar="POLICY:PAGE:METHOD", help=argparse.SUPPRESS)  # a child process's cell
    a = p.parse_args(argv)
    if a.one:
        pol, ps, method = a.one.split(":")
        print(json.dumps(measure(a.workload, pol, int(ps), a.tokens, a.turnovers, method)))
        return 0
    print(f"| policy | page size | cached tokens | traced B/token | RSS B/token |")
    print("|---|---:|---:|---:|---:|")
    for ps in a.page_sizes:
        for pol in a.policies:
            row = {}
            for method in ("traced", "rss"):
                out = subprocess.run([sys.executable, __file__, "--workload", a.workload, "--tokens", str(a.tokens), "--turnovers",
                                      str(a.turnovers), "--one", f"{pol}:{ps}:{method}"],
                                     check=True, capture_output=True, text=True).stdout
                row[method] = json.loads(out.strip().splitlines()[-1])
            print(f"| {pol} | {ps} | {row['traced']['cached']:,} | {row['traced']['bytes_per_token']:.1f} | "
                  f"{row['rss']['bytes_per_token']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
