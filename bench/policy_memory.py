"""Host memory the bookkeeping takes per cached token, per eviction policy and page size.

A RadixCache of `--tokens` token slots (KV of one fp16 number per token: bookkeeping at full scale)
replays a workload with the bench lifecycle until it has evicted `--turnovers` cache sizes (it has
turned over that often), so an eviction policy's learned state is in steady state: `tools` (long
agent sessions, radixkv/bench/workloads.py; seeds 0, 1, ... one after the other, ~350k unique tokens
each, many nodes; it first evicts after ~4 cache sizes inserted, and has turned over twice after ~12)
or `mooncake` (radixkv/scheduling/synth.py: 512-token blocks, ~12k-token prompts, few large nodes).
`--inserted N` stops instead when the tokens inserted add up to N cache sizes (the measure of the
earlier sections of bench/RESULTS.md, with `--inserted 3 --cold`: the tools cache has then only just
filled, before the adaptive policy's shadow holds a cache's worth of its own keys).
Two measures, each in a fresh process (one does not disturb the other):

    traced   tracemalloc's growth from just before the cache is built to the end (Python objects and
             numpy arrays; torch tensors are not traced): deterministic
    rss      the process's resident set growth over the same span, less the torch buffers (KV pool,
             req_to_token), which are KV, not metadata: what the issue measures, but noisy (allocator)

both divided by the tokens cached at the end (`sizes().cached`). Two more of tracemalloc's reads: `traced
peak`, its high-water mark over the span (a shadow the adaptive policy stopped before the end is in it,
not in traced: the RSS keeps what the peak took), and `cycles`, what the final gc.collect() freed (objects
that only the cycle collector frees, held until a full collection). Before the span, a 4096-token cache
of the same policy and page size serves request tails until it has evicted (and stays alive, so the
measured cache cannot reuse its memory): the code the run needs is then loaded. Without this warm-up
(`--cold`) the resident set also grows by the pages of code and shared libraries a first call touches
(the compiled core, torch's and numpy's kernels: ~5 MB, ~5 B/token at 1M tokens, file-backed and
shared, not metadata; /proc/self/status RssFile counts them).

    .venv/bin/python bench/policy_memory.py                        # lru and adaptive, pages 1 and 16
    .venv/bin/python bench/policy_memory.py --workload mooncake --inserted 3 --cold
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
from radixkv.bench.workloads import Request, make_workload
from radixkv.cli_args import HelpFormatter, csv_of, nonneg_int, one_of, positive_int
from radixkv.scheduling.synth import BLOCK, mooncake_shaped


WARM_TOKENS = 4096  # the warm-up cache's size
TRACE_BOUND = 6  # cache sizes of tokens generated per turnover asked, and 6 more (tools needs ~4 + 4 per turnover)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def one_seed(workload: str, seed: int) -> list[Request]:
    """One seed of `mooncake` (Mooncake-shaped lines, their blocks' tokens) or of a `radixkv bench` workload."""
    if workload != "mooncake":
        return make_workload(workload, seed)
    lines = mooncake_shaped(256, seed=seed)
    return [Request(t, len(t)) for t in (hash_block_tokens(d["hash_ids"], BLOCK)[:d["input_length"]] for d in lines)]


def trace(workload: str, tokens: int, inserted: int) -> list[Request]:
    """Requests of `workload` (seeds 0, 1, ...) whose tokens add up to `inserted` x `tokens`."""
    reqs: list[Request] = []
    seed = 0
    while sum(len(r.tokens) for r in reqs) < inserted * tokens:
        reqs += one_seed(workload, seed)
        seed += 1
    return reqs


def serve(cache: RadixCache, reqs: list[Request], evicted: int | None = None) -> int:
    """Serve `reqs` in order, stopping once the cache has evicted `evicted` tokens (if given).
    Returns the requests served."""
    for i, r in enumerate(reqs):
        if evicted is not None and cache.stats.evicted_tokens >= evicted:
            return i
        m = cache.match_prefix(r.tokens)
        cache.lock(m.node)
        new = cache.alloc(len(r.tokens) - m.length)
        cache.insert(r.tokens, torch.cat([m.slots, new]))
        cache.unlock(m.node)
    if evicted is not None:
        raise SystemExit(f"the trace ended before the cache evicted {evicted} tokens")
    return len(reqs)


def warm_up(reqs: list[Request], policy: str, page_size: int) -> RadixCache:
    """A small cache that served request tails (1024 tokens) until it evicted, and 8 requests more."""
    cache = RadixCache(sim_config(WARM_TOKENS, page_size, policy, WARM_TOKENS // 4))
    more = 8
    for r in reqs:
        serve(cache, [Request(r.tokens[-WARM_TOKENS // 4:], WARM_TOKENS // 4)])
        more -= cache.stats.evicted_tokens > 0
        if not more:
            return cache
    raise SystemExit("warm-up: the trace never made the small cache evict")


def measure(workload: str, policy: str, page_size: int, tokens: int, turnovers: int, method: str,
            warm: bool = True, inserted: int = 0) -> dict[str, float]:
    """One cell: served until `turnovers` cache sizes were evicted, or `inserted` inserted if > 0."""
    reqs = trace(workload, tokens, inserted or TRACE_BOUND * turnovers + TRACE_BOUND)
    warm_cache = warm_up(reqs, policy, page_size) if warm else None
    gc.collect()
    if method == "traced":
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if method == "traced" else _rss()
    cache = RadixCache(sim_config(tokens, page_size, policy, max(len(r.tokens) for r in reqs)))
    served = serve(cache, reqs, None if inserted else turnovers * tokens)
    uncollected, peak = tracemalloc.get_traced_memory() if method == "traced" else (0, 0)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] if method == "traced" else _rss()
    grown = after - before
    if method == "rss":
        kv = sum(t.numel() * t.element_size() for t in (*cache.kv_pool.k_buffer, *cache.kv_pool.v_buffer))
        grown -= kv + cache.req_pool.req_to_token.numel() * 4
    cached = cache.sizes().cached
    del warm_cache
    return {"policy": policy, "page_size": page_size, "method": method, "cached": cached,
            "bytes_per_token": grown / cached, "requests": served,
            "peak_per_token": (peak - before) / cached, "garbage_per_token": (uncollected - after) / cached}


def fresh(workload: str, policy: str, page_size: int, tokens: int, turnovers: int, method: str,
          warm: bool = True, inserted: int = 0) -> dict[str, float]:
    """`measure` in a child process: in this one, objects an earlier cell freed would serve the next from
    Python's free lists, which tracemalloc does not see (adaptive after lru, pure: 1.1 B/token low)."""
    out = subprocess.run([sys.executable, __file__, "--workload", workload, "--tokens", str(tokens),
                          "--turnovers", str(turnovers), "--inserted", str(inserted),
                          "--one", f"{policy}:{page_size}:{method}", *([] if warm else ["--cold"])],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--policies", type=csv_of(str), default="lru,adaptive")
    p.add_argument("--page-sizes", type=csv_of(positive_int), default="1,16")
    p.add_argument("--workload", type=one_of(("tools", "mooncake")), default="tools")
    p.add_argument("--tokens", type=positive_int, default=1 << 20, help="cache size in tokens")
    p.add_argument("--turnovers", type=positive_int, default=2, help="evicted tokens, in cache sizes")
    p.add_argument("--inserted", type=nonneg_int, default=0,
                   help="stop at inserted tokens instead, in cache sizes (0: at --turnovers)")
    p.add_argument("--cold", action="store_true", help="no warm-up: count the code a first call loads too")
    p.add_argument("--one", metavar="POLICY:PAGE:METHOD", help=argparse.SUPPRESS)  # a child process's cell
    a = p.parse_args(argv)
    if a.one:
        pol, ps, method = a.one.split(":")
        print(json.dumps(measure(a.workload, pol, int(ps), a.tokens, a.turnovers, method, not a.cold, a.inserted)))
        return 0
    print("| policy | page size | requests | cached tokens | traced B/token | RSS B/token | traced peak | cycles |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for ps in a.page_sizes:
        for pol in a.policies:
            t, r = (fresh(a.workload, pol, ps, a.tokens, a.turnovers, method, not a.cold, a.inserted)
                    for method in ("traced", "rss"))
            print(f"| {pol} | {ps} | {t['requests']:,} | {t['cached']:,} | {t['bytes_per_token']:.1f} | "
                  f"{r['bytes_per_token']:.1f} | {t['peak_per_token']:.1f} | {t['garbage_per_token']:.1f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
