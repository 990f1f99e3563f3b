"""A serving simulator: the real Scheduler and RadixCache, a cost model instead of the forward.

Requests arrive at their (rescaled) timestamps; each iteration asks the Scheduler for a plan exactly
as the Engine does, prices the step with `CostModel.step_seconds` (prefill tokens computed, cached
context read, decode rows, KV bytes read), advances the clock by it and commits what the step
computed. A request's time to first token ends with the step that computes its last prompt chunk.

Decode is simulated in real tokens, its KV in cache tokens (sim_trace.py: one cache token is
`unit` real tokens, 512 for Mooncake traces, 1 for token traces). A decoding request holds its
Sequence; the step whose position starts a new cache token appends one (a fresh id, or the trace's
recorded answer token), so the Scheduler reserves that page then, preempting if it must, as it
would for a 512-token page. Between those steps a decoding request has nothing pending in cache
tokens, so the Scheduler plans nothing for it, and the simulator prices its decode row itself.
Two approximations follow, both small: decode rows do not count against the Scheduler's token
budget (about 30 rows beside an 8192-token budget), and iterations where the Scheduler plans
nothing (no arrival, no page boundary, no finish: only decode rows) are priced in one go up to the
next such event, without asking the Scheduler again; its answer could change in between only
because the response ratios of a queue that cannot be admitted anyway change with time.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from radixkv import CacheConfig, RadixCache
from radixkv.errors import InvalidArgumentError
from radixkv.scheduling.scheduler import Plan, Request, Scheduler
from radixkv.scheduling.cost_model import CostModel
from radixkv.scheduling.sim_trace import SimTrace, TraceRequest

ROWS = 512  # open Sequences at most (req_to_token rows); KV capacity binds long before this


@dataclass(eq=False)
class SimRequest(Request):
    spec: TraceRequest | None = None
    arrive_s: float = 0.0
    admitted_s: float | None = None  # first admission
    first_token_at: float | None = None  # simulated seconds
    generated: int = 0  # real output tokens sampled so far
    s0: int = 0  # decode phase: at step s0 the request had r0 positions of KV and g0 tokens out
    r0: int = 0
    g0: int = 0
    version: int = 0  # bumped on every phase change: stale heap entries are skipped


@dataclass
class Outcome:
    """Per request: arrival, first admission, first token and finish, simulated seconds."""
    ttft_s: np.ndarray
    wait_s: np.ndarray
    prompt_tokens: int
    reused_tokens: int
    output_tokens: int
    makespan_s: float
    steps: int
    preemptions: int
    matched: int  # match_prefix calls the Scheduler's queue matching made


def arrival_times(trace: SimTrace, cost: CostModel, load: float, capacity: int, seed: int = 0) -> np.ndarray:
    """Seconds: timestamps rescaled (or Poisson arrivals, without them) so that the trace's work with
    no prefix reuse is `load` times what the server does in that span."""
    reqs = trace.requests
    ctx = float(np.mean([r.prompt_tokens + r.output_tokens / 2 for r in reqs]))
    batch = int(min(ROWS, max(1, capacity // max(1.0, ctx))))
    work = sum(cost.request_seconds(r.prompt_tokens, r.output_tokens, batch, ctx) for r in reqs)
    span = work / load
    stamps = [r.timestamp_ms for r in reqs]
    if stamps[0] is not None and stamps[-1] > stamps[0]:
        t = np.asarray(stamps, dtype=np.float64) - stamps[0]
        return t * (span / t[-1])
    gaps = np.random.default_rng(seed).exponential(span / len(reqs), len(reqs))
    return np.cumsum(gaps) - gaps[0]


class Simulation:
    """One trace under one schedule and load. `run()` mutates only its own cache and requests."""

    def __init__(self, trace: SimTrace, schedule: str, load: float, capacity: int, page_size: int,
                 cost: CostModel, seed: int = 0) -> None:
        self.u = unit = trace.unit
        if unit > 1 and unit % page_size:
            raise InvalidArgumentError(f"--page-size {page_size} must divide the trace's block size {unit}: "
                                       "a Mooncake trace is simulated one block per page")
        page = 1 if unit > 1 else page_size
        longest = max(len(r.units) + -(-r.output_tokens // unit) + 1 for r in trace.requests)
        slots = max(capacity // unit // page, -(-longest // page) + 2) * page  # at least one request fits
        self.capacity = slots * unit  # real tokens the cache holds
        self.cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=slots,
                                            page_size=page, max_requests=ROWS, max_context_len=longest + page))
        self.cost = cost
        per_unit = cost.prefill_tokens_per_s() / unit
        self.sched = Scheduler(self.cache, max(1, cost.max_batch_tokens // unit), schedule=schedule,
                               clock=lambda: self.now * per_unit, full_cache=max(1, cost.kv_capacity_tokens // unit))
        # The in-batch prefix check compares 32 real tokens rounded up to a page: one block here.
        self.sched.probe = -(-self.sched.probe // unit)
        self.arrivals = arrival_times(trace, cost, load, capacity, seed)
        self.reqs = [SimRequest(i, list(r.units), len(r.units), -(-r.output_tokens // unit) + 1, spec=r,
                                arrive_s=float(t)) for i, (r, t) in enumerate(zip(trace.requests, self.arrivals))]
        for req in self.reqs:
            self.sched.validate(req.prompt_len, req.max_new_tokens)
        self.next_id = trace.next_id
        self.now = 0.0
        self.step = 0  # index of the next step to run
        self.decoders: dict[SimRequest, None] = {}  # in decode phase, holding their Sequence
        self.r_off = 0  # sum of (r0 - s0) over decoders: their KV positions now = r_off + len * step
        self.boundaries: list[tuple[int, int, int, SimRequest]] = []  # (step, tiebreak, version, req)
        self.finishes: list[tuple[int, int, int, SimRequest]] = []
        self._tie = itertools.count()
        self.finished = 0

    def run(self, progress: Callable[[int], None] | None = None) -> Outcome:
        n, i = len(self.reqs), 0
        while self.finished < n:
            while i < n and self.arrivals[i] <= self.now:
                self.sched.add(self.reqs[i])
                i += 1
            if self.sched.idle:
                self.now = float(self.arrivals[i])
                continue
            self._page_boundaries()
            preempted = self.sched.num_preemptions
            plan = self.sched.schedule()
            if self.sched.num_preemptions != preempted:
                self._drop_preempted()
            if plan.requests:
                self._run_step(plan)
            else:
                self._decode_only(self.arrivals[i] if i < n else math.inf)
            if progress is not None:
                progress(self.finished)
        return self._outcome()

    # ---------------------------------------------------------------- decode bookkeeping

    def _known(self, req: SimRequest) -> int:
        """Real tokens whose KV a complete prefill of `req.tokens` holds: prompt + output so far."""
        return req.spec.prompt_tokens + req.generated

    def _start_decode(self, req: SimRequest) -> None:
        req.version += 1
        req.s0, req.r0, req.g0 = self.step, self._known(req) - 1, req.generated
        self.decoders[req] = None
        self.r_off += req.r0 - req.s0
        first_boundary = req.s0 + (-req.r0) % self.u
        finish = req.s0 + req.spec.output_tokens - req.g0 - 1
        if first_boundary <= finish:
            heapq.heappush(self.boundaries, (first_boundary, next(self._tie), req.version, req))
        heapq.heappush(self.finishes, (finish, next(self._tie), req.version, req))

    def _stop_decode(self, req: SimRequest) -> None:
        """Leave the decode phase at step `self.step` (the steps before it have run)."""
        del self.decoders[req]
        self.r_off -= req.r0 - req.s0
        req.generated = req.g0 + self.step - req.s0
        req.version += 1

    def _page_boundaries(self) -> None:
        """Decoders whose next position starts a new cache token get it now (the Scheduler reserves it)."""
        while self.boundaries and self.boundaries[0][0] <= self.step:
            at, _, version, req = heapq.heappop(self.boundaries)
            if version != req.version:
                continue
            pos = req.r0 + at - req.s0  # the real position this step computes
            out = pos - req.spec.prompt_tokens  # its index among the output tokens
            answer = req.spec.trace_output
            req.tokens.append(answer[out] if self.u == 1 and out < len(answer) else self._fresh())
            if at + self.u <= req.s0 + req.spec.output_tokens - req.g0 - 1:
                heapq.heappush(self.boundaries, (at + self.u, next(self._tie), version, req))

    def _fresh(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _drop_preempted(self) -> None:
        for req in [r for r in self.decoders if r.seq is None]:
            self._stop_decode(req)

    # ---------------------------------------------------------------- steps

    def _decode_only(self, next_arrival: float) -> None:
        """Only decode rows run: price the steps up to the next page boundary (exclusive), finish
        (inclusive) or arrival at once (a boundary or finish entry may be stale: then fewer steps)."""
        rows = len(self.decoders)
        positions = self.r_off + rows * self.step
        one = self.cost.step_seconds(0, rows, positions, positions)
        limits = [max(1, math.ceil((next_arrival - self.now) / one))] if next_arrival < math.inf else []
        if self.boundaries:
            limits.append(self.boundaries[0][0] - self.step)
        if self.finishes:
            limits.append(self.finishes[0][0] - self.step + 1)
        k = max(1, min(limits))
        ctx = positions + rows * np.arange(k, dtype=np.float64)
        self.now += float(np.sum(self.cost.step_seconds(0, rows, ctx, ctx)))
        self.step += k
        self._finish_due()

    def _run_step(self, plan: Plan) -> None:
        u, tokens, attended, read = self.u, 0, 0.0, 0.0
        sampling = []
        for req, n in zip(plan.requests, plan.chunks):
            if req in self.decoders:
                continue  # a decode row that starts a new page: priced with the other rows below
            if req.admitted_s is None:
                req.admitted_s = self.now
            a, end = req.seq.committed_len, self._known(req)
            lo, hi = a * u, min((a + n) * u, end)
            tokens += hi - lo
            attended += (hi * hi - lo * lo) / 2
            read += lo
            if a + n == len(req.tokens):
                sampling.append(req)
        rows = len(self.decoders)
        positions = self.r_off + rows * self.step
        self.now += self.cost.step_seconds(tokens, rows, attended + positions, read + positions)
        for req, n in zip(plan.requests, plan.chunks):
            done = req.seq.committed_len
            self.cache.commit(req.seq, req.tokens[done:done + n])
        self.step += 1
        self._finish_due()
        for req in sampling:
            req.generated += 1
            if req.first_token_at is None:
                req.first_token_at = self.now
            if req.generated >= req.spec.output_tokens:
                self._finish(req)
            else:
                self._start_decode(req)

    def _finish_due(self) -> None:
        """Decoders whose last decode step has run (steps < self.step) finish."""
        while self.finishes and self.finishes[0][0] < self.step:
            _, _, version, req = heapq.heappop(self.finishes)
            if version == req.version:
                self._stop_decode(req)
                self._finish(req)

    def _finish(self, req: SimRequest) -> None:
        self.sched.finish(req)
        self.finished += 1

    def _outcome(self) -> Outcome:
        reqs = self.reqs
        return Outcome(
            ttft_s=np.array([r.first_token_at - r.arrive_s for r in reqs]),
            wait_s=np.array([r.admitted_s - r.arrive_s for r in reqs]),
            prompt_tokens=sum(r.spec.prompt_tokens for r in reqs),
            reused_tokens=sum(r.reused_tokens for r in reqs) * self.u,
            output_tokens=sum(r.spec.output_tokens for r in reqs),
            makespan_s=self.now - float(self.arrivals[0]),
            steps=self.step, preemptions=self.sched.num_preemptions, matched=self.sched.estimates.matched)
