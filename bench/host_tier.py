"""Host tier and KV events on the request path: a small device pool with and without a host tier.

Replays multi-turn chat and RAG through the request-level API (open -> reserve -> commit -> close;
open promotes host-tier hits back to the device) with real KV copies between the two pools, and
reports, per configuration: token hit rate (prompt tokens reused / prompt tokens), prefill tokens
computed, bytes copied device->host and host->device, and requests/s of the bookkeeping. A second
table times the same device-only run with KV events off and on (the overhead of recording them).

    python bench/host_tier.py                      # defaults: ~1 minute on 2 cores
    python bench/host_tier.py --scale 0.25         # quicker
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch
from rich.console import Console
from rich.table import Table

from radixkv import CacheConfig, RadixCache
from radixkv.bench.opt import unique_prefix_tokens
from radixkv.bench.workloads import Request, make_workload
from radixkv.cli_args import HelpFormatter, fraction, positive_int


def replay(reqs: list[Request], cfg: CacheConfig) -> dict[str, float]:
    cache = RadixCache(cfg)
    prompt = reused = 0
    t0 = time.perf_counter()
    for r in reqs:
        seq = cache.open(r.tokens[:r.prompt_len], max_reuse=r.prompt_len - 1)
        prompt += r.prompt_len
        reused += seq.cached_len
        cache.reserve(seq, len(r.tokens) - seq.kv_len)
        cache.commit(seq, r.tokens[seq.committed_len:])
        cache.close(seq)
        cache.take_events()
    elapsed = time.perf_counter() - t0
    m = cache.metrics()
    return {"hit": reused / prompt, "prefill": prompt - reused, "rps": len(reqs) / elapsed,
            "to_host": m.get("radixkv_host_bytes_to_host_total", 0), "elapsed": elapsed,
            "to_dev": m.get("radixkv_host_bytes_to_device_total", 0)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--scale", type=fraction, default=0.5, help="fraction of each workload's requests")
    ap.add_argument("--device-frac", type=fraction, default=0.1, help="device slots / unique tokens")
    ap.add_argument("--host-mult", type=positive_int, default=4, help="host slots = this x device slots")
    ap.add_argument("--page-size", type=positive_int, default=16, help="tokens per page")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    # Copies here are small (a node's pages); torch's intra-op threads only add sync overhead, and on a
    # busy 2-core machine they made each copy ~20x slower (measured: 1.3 ms vs 0.05 ms per layer).
    torch.set_num_threads(1)
    ps = args.page_size
    con = Console(width=200)
    con.print(f"machine: {platform.machine()} {platform.processor() or ''} torch {torch.__version__}, 1-min load "
              f"average {os.getloadavg()[0]:.1f}; KV dims: 2 layers x 2 heads x 16 dim fp16 = 256 B/token")
    table = Table(title="host tier: the same device pool with and without a host copy")
    for col in ("workload", "config", "hit", "prefill tok", "MB to host", "MB to dev", "req/s"):
        table.add_column(col, justify="left" if col in ("workload", "config") else "right")
    events = []
    for name in ("chat", "rag"):
        reqs = make_workload(name, seed=0, scale=args.scale)
        device = max(ps, int(unique_prefix_tokens(reqs) * args.device_frac) // ps * ps)
        base = dict(num_layers=2, num_kv_heads=2, head_dim=16, num_slots=device, page_size=ps, max_requests=4,
                    max_context_len=max(len(r.tokens) for r in reqs) + ps, dtype=torch.float16)
        rows = [("device only", {}), ("+ host write-through", {"host_slots": device * args.host_mult}),
                ("+ host write-back", {"host_slots": device * args.host_mult, "host_write_policy": "write_back"})]
        for label, extra in rows:
            res = replay(reqs, CacheConfig(**base, **extra))
            table.add_row(name, label, f"{res['hit']:.3f}", f"{res['prefill']:,d}", f"{res['to_host'] / 1e6:.1f}",
                          f"{res['to_dev'] / 1e6:.1f}", f"{res['rps']:.0f}")
        off = min(replay(reqs, CacheConfig(**base))["elapsed"] for _ in range(2))
        on = min(replay(reqs, CacheConfig(**base, kv_events=True))["elapsed"] for _ in range(2))
        events.append(f"{name}: KV events on/off time {on / off:.2f}x ({off * 1e3:.0f} ms off, {on * 1e3:.0f} ms on)")
    con.print(table)
    con.print("\n".join(events))


if __name__ == "__main__":
    main()
