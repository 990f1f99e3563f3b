"""What FCFS would have done on the same arrivals, from metadata only: a fluid FCFS queue beside the real one.

Every arrival joins the fluid queue behind those that arrived before it; the queue serves them one at a time, in
arrival order, draining each one's *work* at the rate the real server did that work while saturated (an
exponentially weighted average over `window` clock units of the steps that began with enough waiting, so a light
server's arrival rate is never read as its capacity; before any, one a clock unit: the clock's unit is one token's
prefill). A request's *FCFS start* is the clock at which the fluid queue reaches it: when FCFS would have admitted
it, had it worked as fast as this server does. bench/sched_tail_clock.py measures how well it predicts fcfs's own
run; auto's overdue rule on it (rounds 26-27: a request past its FCFS start goes first) held no setting and is gone.

Work, two ways:
- no tree: a request's prompt tokens, drained at the prompt tokens the server admitted (round 26). It starts the
  requests fcfs kept waiting early, at a median 0.4-0.5 of fcfs's wait: it drains at the real server's hit rate,
  and FCFS's is lower (bench/RESULTS.md, issue 20, round 26).
- `tree`, a metadata-only prefix cache (radix/shadow.py's ShadowTree, `capacity` tokens, a fixed eviction policy):
  the fluid queue feeds it each request as it reaches it, in FCFS's order, so it holds what FCFS's cache would; a
  request's work is the prompt tokens it does not hold (matched on all but the last token, as the real cache is),
  drained at the *uncached* prompt tokens the real server admitted. FCFS's hit rate, learned online (round 27).

The clock on the Scheduler's unit (one token's prefill); tokens are the cache's (a slot a token, or a block).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixkv.config import CacheConfig
    from radixkv.radix.shadow import ShadowTree
    from radixkv.scheduling.matcher import Queued

NS = b""  # the tree's one namespace


class FcfsClock:
    """The fluid FCFS queue: `arrived`, `step` and `admitted` feed it (and drain it to their clock), `start` reads
    it. With `tree`, work is what the tree does not hold (module docstring)."""

    def __init__(self, window: float, tree: ShadowTree | None = None, capacity: int = 0) -> None:
        self.window = window  # clock units of saturated time the rate averages over
        self.tree = tree  # FCFS's cache, metadata only (None: work is the prompt)
        self.capacity = capacity  # ... its size in tokens
        self.at = 0.0  # the clock of the last advance
        self.tokens = 0.0  # decayed work the real server admitted while saturated ...
        self.busy = 0.0  # ... and the decayed saturated time it took
        self.saturated = False  # the last step's: the server admits at its capacity
        self.pending = 0  # work admitted since the last advance, while saturated
        self.queue: deque[tuple[Queued, int]] = deque()  # arrived, not reached yet, in arrival order, with its
        # prompt's length (its tokens grow once the real server admitted it)
        self.head: Queued | None = None  # the request the fluid queue serves ...
        self.left = 0.0  # ... and its work still to drain
        self.work = 0  # the tree's total work so far (prompt tokens it did not hold)
        self.prompts = 0  # ... and the prompt tokens it was fed
        self.gone: set[Queued] = set()  # admitted by the real server before the fluid queue reached them
        self.started: dict[Queued, float] = {}  # the FCFS start of each request reached and not admitted

    @property
    def rate(self) -> float:
        """Work a clock unit the real server admits while saturated (1 before it was seen)."""
        return self.tokens / self.busy if self.busy > 0 else 1.0

    def advance(self, now: float) -> None:
        """Drain the fluid queue to `now` at the current rate (the time counts toward the rate's window if the server
        was saturated since the last `step`)."""
        dt = now - self.at
        if dt <= 0:
            return
        rate, t = self.rate, self.at
        while self.head is not None:
            t += self.left / rate
            if t > now:
                self.left = (t - now) * rate
                break
            self.head = None
            if self.queue:
                self._reach(*self.queue.popleft(), t)
        self.at = now
        if self.saturated:  # the step's admissions and time join the window together: a steady rate reads exactly
            keep = math.exp(-dt / self.window)
            self.tokens = self.tokens * keep + self.pending
            self.busy = self.busy * keep + dt
        self.pending = 0

    def _reach(self, req: Queued, n: int, t: float) -> None:
        """The fluid queue reaches `req` (of an `n`-token prompt) at `t`: FCFS starts it (its cache takes the
        prompt)."""
        self.head, self.left = req, float(self.cost(req, n))
        if req in self.gone:
            self.gone.discard(req)
        else:
            self.started[req] = t

    def cost(self, req: Queued, n: int) -> float:
        """`req`'s work under FCFS: its `n` prompt tokens, or those FCFS's cache does not hold (then it takes them)."""
        tree = self.tree
        if tree is None:
            return n
        key = array("i", req.tokens[:n]).tobytes()
        held = tree.match(NS, key, 4 * (n - 1))
        tree.insert(NS, key, self.capacity)
        self.work += n - held
        self.prompts += n
        return n - held

    def step(self, now: float, saturated: bool) -> None:
        """The Scheduler orders the queue at `now`; `saturated`: it admits at its capacity until the next step (the
        admissions of this step and the time to the next count toward the rate)."""
        self.advance(now)
        self.saturated = saturated

    def arrived(self, req: Queued, now: float) -> None:
        self.advance(now)
        if self.head is None:
            self._reach(req, len(req.tokens), now)
        else:
            self.queue.append((req, len(req.tokens)))

    def count(self, req: Queued, now: float, cached: int) -> None:
        """`req`'s first admission, `cached` of its prompt tokens found in the real cache: its work (prompt tokens, or
        uncached ones with a tree) counts toward the rate if the server is saturated."""
        self.advance(now)
        if self.saturated:
            self.pending += len(req.tokens) - (cached if self.tree is not None else 0)

    def admitted(self, req: Queued, now: float, cached: int = 0) -> None:
        """`count`, and `req` is no longer read (`start`)."""
        self.count(req, now, cached)
        if self.started.pop(req, None) is None and req is not self.head:
            self.gone.add(req)  # left in the queue until the fluid queue reaches it

    def start(self, req: Queued) -> float | None:
        """`req`'s FCFS start, or None while the fluid queue has not reached it."""
        return self.started.get(req)


def make_clock(window: float, config: CacheConfig, share: float, policy: str,
               cls: type[FcfsClock] = FcfsClock) -> FcfsClock:
    """A clock (of class `cls`) of `window` clock units; with `share` > 0 its work is priced by a tree of `share` x the
    cache's slots under eviction `policy` (a fixed one: radixkv.eviction.POLICIES' name)."""
    if share <= 0:
        return cls(window)
    from radixkv.eviction import POLICIES
    from radixkv.radix.shadow import ShadowTree
    return cls(window, ShadowTree(POLICIES[policy](), config.page_size), int(share * config.num_slots))
