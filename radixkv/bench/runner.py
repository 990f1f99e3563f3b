"""Replay a trace through RadixCache with the tree-level API and measure hits and bookkeeping time.

Per request, the same lifecycle as SGLang's harness (radixkv/bench/sglang_peer.py says where it is):

    r = cache.match_prefix(tokens[:prompt_len])       # hit = r.length (whole pages)
    cache.lock(r.node)
    new = cache.alloc(len(tokens) - r.length)         # evicts unlocked leaves as needed
    cache.insert(tokens, torch.cat([r.slots, new]))   # duplicates and the partial tail are freed
    cache.unlock(r.node)

Only the five cache calls are timed, input validation included; building insert's slots (the
`torch.cat`) is the caller's work and stays outside the clock, as it does in SGLang's harness.
A request whose whole sequence needs more pages than the cache has is rejected before matching
(`oom`), the rule radixkv.bench.opt uses too, so hit rates are comparable with OPT. The KV buffers
are real but tiny (1 layer, 1 head, head_dim 1): only the bookkeeping is timed; memory is reported
separately with a model preset (radixkv.calc).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.bench.workloads import Request

OPS = ("match_prefix", "lock", "alloc", "insert", "unlock")


@dataclass
class RunResult:
    policy: str
    capacity: int  # token slots in the cache (a multiple of page_size)
    page_size: int
    hit_tokens: int = 0  # matched prompt tokens
    prompt_tokens: int = 0
    computed_tokens: int = 0  # tokens whose KV had to be written (sequence minus hit)
    requests: int = 0
    oom: int = 0
    wall_s: float = 0.0  # time inside the cache calls, all requests
    latency_ns: dict[str, np.ndarray] = field(default_factory=dict)  # op -> int64 [calls]
    metrics: dict[str, float] = field(default_factory=dict)  # cache.metrics() at the end of the run

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s else 0.0

    def latency_us(self, op: str, q: float) -> float:
        """Quantile q (0..1) of one op's latency in microseconds."""
        return float(np.quantile(self.latency_ns[op], q)) / 1e3


def capacity(frac: float, unique_tokens: int, longest: int, page_size: int) -> int:
    """Token slots of a cache holding `frac` of a trace's `unique_tokens`, whole pages, never fewer
    than the `longest` sequence needs (so no request is rejected): how `radixkv bench` sizes a cell."""
    return max(int(frac * unique_tokens), -(-longest // page_size) * page_size) // page_size * page_size


def sim_config(capacity: int, page_size: int, policy: str, max_len: int, events: bool = False,
               event_hash: str = "xxh3") -> CacheConfig:
    """A cache whose KV is one fp16 number per token: bookkeeping at full scale, memory negligible."""
    slots = max(page_size, capacity // page_size * page_size)
    return CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=slots, page_size=page_size,
                       max_requests=1, max_context_len=max(1, max_len), dtype=torch.float16,
                       eviction=policy, kv_events=events, event_block_size=16, event_hash=event_hash)


class Replay:
    """A replay that can be stepped: `step(k)` serves the next k requests of `reqs` through one fresh
    RadixCache; `finish()` gives the RunResult. `replay` runs it in one step; radixkv.bench.speed steps
    it chunk by chunk beside SGLang's harness. The arguments are `replay`'s."""

    def __init__(self, reqs: Sequence[Request], capacity: int, policy: str, page_size: int = 1,
                 on_request: Callable[[], None] | None = None, check: bool = False, events: bool = False,
                 event_hash: str = "xxh3", clock: Callable[[], int] = time.perf_counter_ns,
                 drain: Callable[[list], object] | None = None) -> None:
        self.reqs, self.page_size, self.on_request, self.check = reqs, page_size, on_request, check
        self.events, self.clock, self.drain = events, clock, drain
        self.cfg = sim_config(capacity, page_size, policy, max(len(r.tokens) for r in reqs), events, event_hash)
        self.cache = RadixCache(self.cfg)
        self.res = RunResult(policy, self.cfg.num_slots, page_size)
        self.lat: dict[str, list[int]] = {op: [] for op in OPS}
        self.spent_ns = 0  # inside the cache calls (and the drain), every step so far
        self.pos = 0  # requests served

    @property
    def done(self) -> bool:
        return self.pos >= len(self.reqs)

    def step(self, count: int) -> int:
        """Serve the next `count` requests (fewer at the end); nanoseconds inside their cache calls."""
        cache, res, lat, clock, page_size = self.cache, self.res, self.lat, self.clock, self.page_size
        spent = 0
        for req in self.reqs[self.pos:self.pos + count]:
            self.pos += 1
            n = len(req.tokens)
            res.requests += 1
            res.prompt_tokens += req.prompt_len
            if -(-n // page_size) > self.cfg.num_pages:
                res.oom += 1
                continue
            t0 = clock()
            r = cache.match_prefix(req.tokens[:req.prompt_len])
            t1 = clock()
            cache.lock(r.node)
            t2 = clock()
            new = cache.alloc(n - r.length)
            t3 = clock()
            slots = torch.cat([r.slots, new])  # the caller's work: outside the clock, as in SGLang's harness
            t3b = clock()
            cache.insert(req.tokens, slots)
            t4 = clock()
            cache.unlock(r.node)
            t5 = clock()
            for op, a, b in zip(OPS, (t0, t1, t2, t3b, t4), (t1, t2, t3, t4, t5)):
                lat[op].append(b - a)
            spent += t5 - t3b + t3 - t0
            if self.events:
                t6 = clock()
                got = cache.take_events()
                if self.drain is not None:
                    self.drain(got)
                spent += clock() - t6
            res.hit_tokens += r.length
            res.computed_tokens += n - r.length
            if self.check:
                cache.check_invariants()
            if self.on_request is not None:
                self.on_request()
        self.spent_ns += spent
        return spent

    def finish(self) -> RunResult:
        """The run's result (the requests served so far), after a leak check."""
        res, cache = self.res, self.cache
        res.latency_ns = {op: np.asarray(v, dtype=np.int64) for op, v in self.lat.items()}
        res.wall_s = self.spent_ns / 1e9
        res.metrics = cache.metrics()
        if cache.sizes().private:
            raise AssertionError(f"replay leaked private slots: {cache.sizes()}")
        return res


def replay(reqs: Sequence[Request], capacity: int, policy: str, page_size: int = 1,
           on_request: Callable[[], None] | None = None, check: bool = False, events: bool = False,
           event_hash: str = "xxh3", clock: Callable[[], int] = time.perf_counter_ns,
           drain: Callable[[list], object] | None = None) -> RunResult:
    """Run `reqs` in order through a fresh RadixCache of `capacity` tokens with eviction `policy`.

    Deterministic except for the timings. `on_request` is called after each request (progress
    bars); `check=True` runs check_invariants() after every request (slow; for tests). With
    `events`, the cache records KV events (16-token blocks, named by `event_hash`) and they are
    drained after every request, as a publisher does, inside the clock (`wall_s` includes it).
    `drain(events)`, inside the clock too, gets each request's events (a publisher's encoding, say).
    `clock`: nanoseconds (time.thread_time_ns counts this thread's CPU time only: a shared machine).
    """
    run = Replay(reqs, capacity, policy, page_size, on_request, check, events, event_hash, clock, drain)
    run.step(len(reqs))
    return run.finish()
