"""`radixkv bench`: workloads x capacities x policies, OPT, SGLang, a summary table and plots.

For each workload the trace is generated (seeded), its unique-prefix size U measured, and each
capacity is a fraction of U (never below the longest sequence, so no request is rejected). Every
policy replays the trace in a fresh RadixCache (radixkv.bench.runner); OPT is Belady's optimum
(radixkv.bench.opt); with the SGLang peer on, SGLang's RadixCache replays the same trace file.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from radixkv.bench import sglang_peer, speed
from radixkv.bench.opt import build_segments, opt_hit_rate
from radixkv.bench.runner import OPS, RunResult, capacity, replay
from radixkv.bench.workloads import WORKLOADS, Request, make_workload, write_jsonl
from radixkv.calc import bytes_per_token, get_model
from radixkv.errors import InvalidArgumentError

DEFAULT_POLICIES = ("lru", "lfu", "fifo", "slru", "lrfu", "adaptive")
HEADLINE = "adaptive"  # the policy compared with SGLang's best in the summary (our recommendation)
DEFAULT_FRACS = (0.05, 0.1, 0.25, 0.5)
SGLANG_POLICIES = ("lru", "lfu")


@dataclass
class Cell:
    workload: str
    frac: float
    capacity: int
    opt: float
    opt_exact: bool
    runs: dict[str, RunResult] = field(default_factory=dict)
    sglang: dict[str, sglang_peer.PeerResult] = field(default_factory=dict)
    speed: dict[str, float] = field(default_factory=dict)  # side by side with SGLang: name -> best requests/s
    speed_ratios: dict[str, speed.Spread] = field(default_factory=dict)  # speed.ratio_name -> per-round ratios
    events_off_s: float = 0.0  # with --events-cost: best bookkeeping seconds of the headline policy,
    events_on_s: float = 0.0  # events off and on, interleaved runs in this process
    events_cbor_s: float = 0.0  # events on with vLLM's sha256_cbor block hashes (event_hash="sha256_cbor")


@dataclass
class BenchReport:
    workloads: dict[str, str]  # name -> one-line summary
    policies: tuple[str, ...]
    page_size: int
    model: str
    dtype: str
    cells: list[Cell] = field(default_factory=list)
    memory: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (no sharing, radix) bytes
    sglang_version: str | None = None
    sglang_note: str | None = None
    seconds: float = 0.0
    load_average: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at start and end (timings need it)

    def to_json(self) -> dict:
        return {
            "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}",
            "page_size": self.page_size, "model": self.model, "dtype": self.dtype, "seconds": round(self.seconds, 1),
            "load_average_1min": [round(x, 2) for x in self.load_average],
            "sglang_version": self.sglang_version, "sglang_note": self.sglang_note,
            "memory_bytes": self.memory,
            "cells": [{"workload": c.workload, "frac": c.frac, "capacity": c.capacity, "opt": c.opt,
                       "opt_exact": c.opt_exact,
                       "policies": {p: {"hit_rate": r.hit_rate, "requests_per_s": r.requests_per_s,
                                        "p50_us": {op: r.latency_us(op, 0.5) for op in OPS},
                                        "p99_us": {op: r.latency_us(op, 0.99) for op in OPS}}
                                    for p, r in c.runs.items()},
                       "sglang": {p: s._asdict() for p, s in c.sglang.items()},
                       "events_off_s": c.events_off_s, "events_on_s": c.events_on_s,
                       "events_sha256_cbor_s": c.events_cbor_s,
                       "speed_requests_per_s": c.speed,
                       "speed_ratios": {k: v._asdict() for k, v in c.speed_ratios.items()}} for c in self.cells],
        }


def run_bench(workloads: list[str], fracs: list[float], policies: list[str], *, page_size: int = 1,
              seed: int = 0, scale: float = 1.0, model: str = "llama-3-8b", dtype: str = "bf16",
              peer: sglang_peer.Peer | None = None, strict: bool = False, progress=None,
              events_cost: int = 0, speed_repeats: int = 3,
              traces: dict[str, list[Request]] | None = None) -> BenchReport:
    """Run the grid over the named built-in workloads and the given `traces` (name -> requests, e.g.
    read_trace(FILE)); `progress` is a rich Progress (or None). Deterministic except timings.

    `dtype` is the KV dtype of the memory column. With `peer`, SGLang's RadixCache replays every
    trace too (hit rates with LRU and LFU, then `speed_repeats` rounds of requests/s beside radixkv:
    radixkv.bench.speed); if it fails, `strict` raises sglang_peer.PeerError, else the report
    carries a note and the rest runs without it."""
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    sources = {w: (WORKLOADS[w].summary, None) for w in workloads}
    for name, reqs in (traces or {}).items():
        if name in sources:
            raise InvalidArgumentError(f"trace {name!r} has the name of a workload; name it otherwise")
        sources[name] = (f"trace {name}: {len(reqs)} requests, "
                         f"{int(np.mean([len(r.tokens) for r in reqs])):,} tokens each on average", reqs)
    workloads = list(sources)
    rep = BenchReport({w: summary for w, (summary, _) in sources.items()}, tuple(policies), page_size, model, dtype)
    bpt = bytes_per_token(get_model(model), dtype)
    task = None
    if progress is not None:
        task = progress.add_task("bench", total=len(workloads) * len(fracs) * len(policies))
    for name in workloads:
        reqs = sources[name][1] or make_workload(name, seed=seed, scale=scale)
        seg = build_segments(reqs, page_size)
        unique = seg.total_pages * page_size
        rep.memory[name] = (float(sum(len(r.tokens) for r in reqs) * bpt), float(unique * bpt))
        max_len = max(len(r.tokens) for r in reqs)
        caps = [capacity(f, unique, max_len, page_size) for f in fracs]
        cells = []
        for f, cap in zip(fracs, caps):
            o = opt_hit_rate(reqs, cap, page_size, seg)
            cells.append(Cell(name, f, cap, o.hit_rate, o.exact))
        for cell in cells:
            for pol in policies:
                if progress is not None:
                    progress.update(task, description=f"{name:8s} {cell.frac:>5.0%} {pol}")
                cell.runs[pol] = replay(reqs, cell.capacity, pol, page_size)
                if progress is not None:
                    progress.advance(task)
        if events_cost:
            for cell in cells:
                cell.events_off_s, cell.events_on_s, cell.events_cbor_s = _events_cost(
                    reqs, cell.capacity, page_size, events_cost, rep.policies[0])
        if peer is not None and rep.sglang_note is None:
            try:
                _run_peer(rep, peer, reqs, cells, page_size, speed_repeats)
            except sglang_peer.PeerError as e:
                if strict:
                    raise
                rep.sglang_note = str(e)
        rep.cells.extend(cells)
    rep.seconds = time.perf_counter() - t0
    rep.load_average = (load0, os.getloadavg()[0])
    return rep


def _events_cost(reqs, capacity: int, page_size: int, repeats: int, policy: str) -> tuple[float, float, float]:
    """Best bookkeeping seconds of `policy` (the first one asked for) with KV events off, on (XXH3)
    and on with vLLM's sha256_cbor hashes, `repeats` runs of each, interleaved (off, on, cbor, off,
    ...) so that load drifts hit all three alike."""
    off = on = cbor = float("inf")
    for _ in range(repeats):
        off = min(off, replay(reqs, capacity, policy, page_size).wall_s)
        on = min(on, replay(reqs, capacity, policy, page_size, events=True).wall_s)
        cbor = min(cbor, replay(reqs, capacity, policy, page_size, events=True, event_hash="sha256_cbor").wall_s)
    return off, on, cbor


def events_table(rep: BenchReport):
    """KV events on vs off (radixkv bench --events-cost N)."""
    from rich.table import Table

    t = Table(title=f"KV events cost, {rep.policies[0]}: best of interleaved runs, events drained after every request")
    for col in ("workload", "cap", "off ms", "xxh3 ms", "xxh3 / off", "sha256_cbor ms", "sha256_cbor / off"):
        t.add_column(col, justify="right")
    for c in rep.cells:
        if c.events_off_s:
            t.add_row(c.workload, f"{c.frac:.0%}", f"{c.events_off_s * 1e3:.1f}", f"{c.events_on_s * 1e3:.1f}",
                      f"{c.events_on_s / c.events_off_s:.2f}x", f"{c.events_cbor_s * 1e3:.1f}",
                      f"{c.events_cbor_s / c.events_off_s:.2f}x")
    return t


def _run_peer(rep: BenchReport, peer: sglang_peer.Peer, reqs, cells: list[Cell], page_size: int,
              speed_repeats: int) -> None:
    caps = [c.capacity for c in cells]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.jsonl")
        write_jsonl(reqs, path)
        for pol in SGLANG_POLICIES:
            run = peer.run(path, caps, page_size, pol)
            rep.sglang_version = run.version
            for cell, res in zip(cells, run.results):
                cell.sglang[pol] = res
        if speed_repeats:
            ours = tuple(dict.fromkeys(("lru", HEADLINE)))
            _, rows, ratios = speed.compare(peer, reqs, path, caps, page_size, ours, speed_repeats)
            for cell, row, ratio in zip(cells, rows, ratios):
                cell.speed, cell.speed_ratios = row, ratio


def summary_tables(rep: BenchReport) -> list:
    """rich Tables: hit rates vs OPT per cell, then throughput, latency and memory per workload."""
    from rich.table import Table

    t = Table(title=f"token hit rate (fraction of OPT), page_size {rep.page_size}")
    for col in ("workload", "cap", "OPT", *rep.policies):
        t.add_column(col, justify="right")
    peer_pols = sorted({p for c in rep.cells for p in c.sglang})
    for p in peer_pols:
        t.add_column(f"SGLang {p}", justify="right")
    head = HEADLINE if HEADLINE in rep.policies else rep.policies[-1]
    if peer_pols:
        t.add_column(f"{head} / best SGLang", justify="right")
    for c in rep.cells:
        best = max(r.hit_rate for r in c.runs.values())
        row = [c.workload, f"{c.frac:.0%} {c.capacity}", f"{c.opt:.3f}" + ("" if c.opt_exact else "*")]
        for p in rep.policies:
            h = c.runs[p].hit_rate
            cell = f"{h:.3f} ({h / c.opt:.0%})" if c.opt else f"{h:.3f}"
            row.append(f"[bold]{cell}[/]" if h == best else cell)
        for p in peer_pols:
            row.append(f"{c.sglang[p].hit_rate:.3f}")
        if peer_pols:
            sg = max(s.hit_rate for s in c.sglang.values())
            row.append(f"{c.runs[head].hit_rate / sg:.3f}" if sg else "-")
        t.add_row(*row)
    u = Table(title="bookkeeping throughput (requests/s, mean over capacities) and KV memory")
    for col in ("workload", *rep.policies, *(f"SGLang {p}" for p in peer_pols), "no sharing", "radixkv", "saved"):
        u.add_column(col, justify="right")
    gib = 1 << 30
    for name in rep.workloads:
        cells = [c for c in rep.cells if c.workload == name]
        row = [name] + [f"{np.mean([c.runs[p].requests_per_s for c in cells]):,.0f}" for p in rep.policies]
        row += [f"{np.mean([c.sglang[p].requests_per_s for c in cells]):,.0f}" for p in peer_pols]
        no, yes = rep.memory[name]
        row += [f"{no / gib:.1f} GiB", f"{yes / gib:.1f} GiB", f"{1 - yes / no:.0%}"]
        u.add_row(*row)
    v = Table(title="per-call latency over all runs, microseconds p50 / p99")
    v.add_column("policy")
    for op in OPS:
        v.add_column(op, justify="right")
    for p in rep.policies:
        lat = {op: np.concatenate([c.runs[p].latency_ns[op] for c in rep.cells]) / 1e3 for op in OPS}
        v.add_row(p, *(f"{np.quantile(lat[op], .5):.1f} / {np.quantile(lat[op], .99):.1f}" for op in OPS))
    tables = [t, u, v, metrics_table(rep, head)]
    if any(c.events_off_s for c in rep.cells):
        tables.append(events_table(rep))
    if any(c.speed for c in rep.cells):
        tables.append(speed.speed_table(rep.cells, tuple(dict.fromkeys(("lru", HEADLINE)))))
    return tables


def metrics_table(rep: BenchReport, policy: str):
    """`cache.metrics()` at the end of each run of `policy` (radixkv.metrics names, prefix dropped)."""
    from rich.table import Table

    names = ("prefix_cache_queries_total", "prefix_cache_hits_total", "prefix_cache_hit_rate",
             "evicted_tokens_total", "kv_cache_usage_perc", "evictable_tokens")
    m = Table(title=f"cache.metrics() after each {policy} run (radixkv_ prefix dropped)")
    for col in ("workload", "cap", *names):
        m.add_column(col, justify="right")
    for c in rep.cells:
        got = c.runs[policy].metrics
        m.add_row(c.workload, f"{c.frac:.0%}", *(f"{got['radixkv_' + n]:.3f}" if n.endswith(("rate", "perc"))
                                                 else f"{got['radixkv_' + n]:,.0f}" for n in names))
    return m


def write_json(rep: BenchReport, path: str) -> None:
    with open(path, "w") as f:
        json.dump(rep.to_json(), f, indent=1)
