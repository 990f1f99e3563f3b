"""Continuous-batching scheduler over the request-level API (`open/reserve/batch/commit/close`).

A Request's known tokens are `prompt + output`. Its Sequence holds KV for the first
`committed_len` of them; everything after is still to compute. One step plans one forward:

```
   tokens   [0 ........ cached_len ....... committed_len ......... len(tokens))
             reused at open()   computed by    | planned this step: reserve(n) |
             (prefix cache)     earlier steps    -> positions [committed_len, kv_len)
```

Decode is the case `len(tokens) - committed_len == 1`; prefill is the same thing with more tokens,
cut into chunks by the per-step token budget (chunked prefill). When a chunk reaches the end of the
known tokens, the step's logits at that position give the request's next token.

Policy (nano-vllm / SGLang style):
1. Running requests that decode are planned first, oldest first, then running requests that are
   still prefilling take chunks from the remaining budget.
2. Waiting requests are admitted in the order of the schedule policy (policies.py: fcfs,
   lpm, dfs-weight, hrrn; auto.py) over the oldest `window` of them, then the rest oldest first,
   while the budget, free rows and slots last; a
   request is admitted only if the slots still available afterwards cover one new page per
   running request, so that admitting it does not force a preemption at the next decode.
   A waiting request whose first `probe` tokens equal those of a request still in prefill (one
   that is running, or admitted this step with its start uncached) is skipped for now, as
   SGLang's in-batch prefix check does: opened in the same step, both would compute the shared
   prefix; a step later it is cached and the skipped request reuses it.
3. When `reserve` runs out of slots even after eviction, the newest running request is preempted:
   `close()` keeps its committed full pages in the tree (unlocked, so evictable but reusable) and it
   goes back to the front of the queue with `prompt + output` as its tokens; on re-admission
   `open()` finds whatever of that is still cached. The oldest request is never preempted for a
   newer one, so it always progresses: no livelock, and `validate` rejects up front any request
   that could not fit in the pool alone, so no hang either.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from radixkv import ContextLengthError, InvalidTokensError, OutOfRowsError, OutOfSlotsError, RadixCache
from radixkv.errors import InvalidArgumentError
from radixkv.scheduling.matcher import PrefixEstimates
from radixkv.scheduling.policies import Policy
from radixkv.scheduling.schedules import make_policy

if TYPE_CHECKING:
    import torch

    from radixkv import Sequence


@dataclass(eq=False)
class Request:
    index: int  # position in the caller's prompt list
    tokens: list[int]  # prompt + output so far
    prompt_len: int
    max_new_tokens: int
    generator: torch.Generator | None = None
    seq: Sequence | None = None  # open while running
    first_token_s: float | None = None  # seconds from generate() start to the first new token
    reused_tokens: int = 0  # prompt tokens found in the cache at the first open()
    opened: bool = False
    arrival: float = 0.0  # Scheduler clock when it was added (the policies' waiting time starts here)

    @property
    def output(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    @property
    def pending(self) -> int:
        """Known tokens without KV yet (>= 1 while unfinished)."""
        assert self.seq is not None
        return len(self.tokens) - self.seq.committed_len


@dataclass
class Plan:
    """One forward: `chunks[i]` new positions for `requests[i]` (their slots are reserved)."""
    requests: list[Request] = field(default_factory=list)
    chunks: list[int] = field(default_factory=list)

    def add(self, req: Request, n: int) -> None:
        self.requests.append(req)
        self.chunks.append(n)

    def remove(self, req: Request) -> None:
        i = self.requests.index(req)
        del self.requests[i], self.chunks[i]


class Scheduler:
    """Waiting queue + running list over one RadixCache. Mutates the cache (open/reserve/close).

    Args:
        cache: the RadixCache that holds every request's KV.
        max_batch_tokens: token budget of one forward (decode tokens + prefill chunks).
        namespace: the cache namespace every request is matched and inserted under.
        schedule: the order of the waiting queue, a name in radixkv.scheduling.POLICIES.
        clock: the policies' time, in units of one token's prefill; None counts the tokens this
            Scheduler has planned (what a forward costs, roughly), so no wall clock is read.
        window: how many of the oldest waiting requests the policy orders each step.
        match_per_step: how many waiting requests are matched against the tree each step, at most.
        full_cache: one H100's KV cache beside an 8B model's weights, in the cache's slots: auto's
            burst gate measures the queue in caches of max(num_slots, full_cache), so that a burst
            is a fixed amount of work whatever this cache's size (auto.py). None: the cost
            model's `kv_capacity_tokens` (400k), right where a slot is a token (the Engine);
            `radixkv simulate` passes it in its 512-token blocks (781).
    """

    def __init__(self, cache: RadixCache, max_batch_tokens: int, namespace: str | None = None,
                 schedule: str = "auto", clock: Callable[[], float] | None = None, window: int = 256,
                 match_per_step: int = 32, full_cache: int | None = None) -> None:
        if max_batch_tokens < 1:
            raise InvalidArgumentError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        if window < 1 or match_per_step < 1:
            raise InvalidArgumentError(f"window and match_per_step must be >= 1, got {window}, {match_per_step}")
        self.cache = cache
        self.max_batch_tokens = max_batch_tokens
        self.namespace = namespace
        self.estimates = PrefixEstimates(cache, namespace, match_per_step)
        self.policy: Policy = make_policy(schedule, self.estimates, full_cache)
        self.window = window
        self.planned = 0  # tokens planned so far: the default clock
        self.clock = clock or (lambda: float(self.planned))
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: oldest first
        self.num_preemptions = 0
        # max_reuse for open(): at most len - 1 (the last prompt position's logits are needed);
        # the Engine narrows it for recurrent models to where a state snapshot exists.
        self.reuse_limit: Callable[[list[int]], int] = lambda tokens: len(tokens) - 1
        page = cache.config.page_size
        self.probe = -(-32 // page) * page  # tokens compared for the in-batch prefix check, page-aligned

    def validate(self, prompt_len: int, max_new_tokens: int) -> None:
        """Reject a request that could never run, even alone in an empty pool."""
        cfg = self.cache.config
        need = prompt_len + max_new_tokens
        if prompt_len < 1:
            raise InvalidTokensError("every prompt needs at least one token (the model predicts from it)")
        if max_new_tokens < 0:
            raise InvalidArgumentError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if need > cfg.max_context_len:
            raise ContextLengthError(f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) = {need} exceeds "
                             f"max_context_len {cfg.max_context_len}; raise it or shorten the request")
        if need + cfg.page_size > cfg.num_slots:
            raise InvalidArgumentError(f"a request of {need} tokens cannot fit a pool of {cfg.num_slots} slots "
                             f"(page_size {cfg.page_size}); raise num_slots")

    def add(self, req: Request) -> None:
        """Queue `req`; its waiting time starts now (`req.arrival` = the clock)."""
        req.arrival = self.clock()
        self.waiting.append(req)
        self.policy.arrived(req, req.arrival)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> Plan:
        """Plan the next forward: reserve slots for every planned position. Mutates the cache."""
        plan = Plan()
        budget = self.max_batch_tokens
        decoding = [r for r in self.running if r.pending == 1]
        prefilling = [r for r in self.running if r.pending > 1]
        for req in decoding + prefilling:
            if req not in self.running:  # preempted while planning an older request
                continue
            n = 1 if req.pending == 1 else min(req.pending, budget)
            if n > 0 and self._reserve_or_preempt(req, n, plan):
                plan.add(req, n)
                budget -= n
        self._admit(plan, budget)
        self.planned += sum(plan.chunks)
        if not plan.requests and not self.running and self.waiting:
            raise OutOfSlotsError(
                f"no request can run: {len(self.waiting)} waiting, {len(self.running)} running, "
                f"cache {self.cache.sizes()}; raise num_slots or max_requests")
        return plan

    def abort(self) -> None:
        """Close every running Sequence and forget all requests (after an error mid-step)."""
        for req in list(self.running):
            self.finish(req)
        for req in self.waiting:
            self.estimates.drop(req)
        self.waiting.clear()
        # a new policy forgets the aborted requests' turns
        self.policy = make_policy(self.policy.name, self.estimates, self.policy.full_cache)

    def finish(self, req: Request) -> None:
        """Drop a finished request: close its Sequence (committed full pages stay cached)."""
        assert req.seq is not None
        self.cache.close(req.seq)
        req.seq = None
        self.running.remove(req)

    def _reserve_or_preempt(self, req: Request, n: int, plan: Plan) -> bool:
        """Reserve `n` slots for `req`, preempting the newest running requests as needed.

        Returns False when `req` itself was the newest and got preempted."""
        assert req.seq is not None
        while True:
            try:
                self.cache.reserve(req.seq, n)
                return True
            except OutOfSlotsError:
                victim = self.running[-1]
                if victim is req and len(self.running) == 1:
                    raise  # alone and still too big: validate() should have caught it
                self._preempt(victim, plan)
                if victim is req:
                    return False

    def _preempt(self, req: Request, plan: Plan) -> None:
        if req in plan.requests:
            plan.remove(req)
        self.finish(req)  # close(): reserved-but-uncommitted slots go back, committed pages stay
        self.waiting.appendleft(req)
        self.num_preemptions += 1

    def _prefix_key(self, req: Request) -> tuple[int, ...] | None:
        return tuple(req.tokens[:self.probe]) if len(req.tokens) > self.probe else None

    def _candidates(self) -> Iterator[Request]:
        """Waiting requests in admission order: the policy's order of the window, then the rest
        oldest first (listed only if the loop gets that far). `_admit` removes from the queue."""
        window = list(itertools.islice(self.waiting, self.window))
        if self.policy.matches:
            self.estimates.refresh(window)
        yield from self.policy.order(window, self.clock())
        if len(self.waiting) > len(window):
            seen = set(window)
            yield from [r for r in self.waiting if r not in seen]

    def _admit(self, plan: Plan, budget: int) -> None:
        page = self.cache.config.page_size
        if budget <= 0 or not self.waiting or not self._fits(1, page):
            return  # nothing can be admitted: skip ordering and matching
        in_prefill = {self._prefix_key(r) for r in self.running if r.pending > 1} - {None}
        for req in self._candidates():
            if budget <= 0:
                return
            key = self._prefix_key(req)
            if key in in_prefill:
                continue  # its prefix is being computed right now: reuse it next step
            try:
                seq = self.cache.open(req.tokens, namespace=self.namespace, max_reuse=self.reuse_limit(req.tokens))
            except OutOfRowsError:
                return
            n = min(len(req.tokens) - seq.committed_len, budget)
            if not self._fits(n, page) or not self._try_reserve(seq, n):
                self.cache.close(seq)
                return
            self.waiting.remove(req)
            self.estimates.drop(req)
            self.policy.admitted(req, self.clock())
            if seq.committed_len < self.probe and n > 1:  # it computes its first tokens now
                in_prefill.add(key)
            if not req.opened:
                req.opened = True
                req.reused_tokens = seq.cached_len
            req.seq = seq
            self.running.append(req)
            plan.add(req, n)
            budget -= n

    def _fits(self, n: int, page: int) -> bool:
        """Admission watermark: after `n` more slots, one fresh page per running request remains."""
        if not self.running:
            return True
        sizes = self.cache.sizes()
        return sizes.free + sizes.evictable - n - page >= len(self.running) * page

    def _try_reserve(self, seq: Sequence, n: int) -> bool:
        try:
            self.cache.reserve(seq, n)
            return True
        except OutOfSlotsError:
            return False
