"""What FCFS would have done on the same arrivals, from metadata only: a fluid FCFS queue beside the real one.

Every arrival's prompt tokens join the fluid queue behind those that arrived before it; the queue drains at the
rate the real server admitted prompt tokens while saturated (an exponentially weighted average over `window` clock
units of the steps that began with enough waiting, so a light server's arrival rate is never read as its capacity;
before any, one token per clock unit: the clock's unit is one token's prefill). A request's *FCFS start* is the
clock at which everything that arrived ahead of it has drained: when FCFS would have admitted it, had it admitted
tokens as fast as this server does. Auto reads it (auto.py: a request is overdue once it waited past its FCFS
start by a slack). bench/sched_tail_clock.py measures how well it predicts fcfs's own run (bench/RESULTS.md, issue
20, round 26: it starts the requests fcfs kept waiting early, at a median 0.4-0.5 of fcfs's wait).

The clock on the Scheduler's unit (one token's prefill); tokens are the cache's (a slot a token, or a block).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixkv.scheduling.matcher import Queued


class FcfsClock:
    """The fluid FCFS queue: `arrived`, `step` and `admitted` feed it (and drain it to their clock),
    `start` reads it."""

    def __init__(self, window: float) -> None:
        self.window = window  # clock units of saturated time the rate averages over
        self.arrived_tokens = 0  # prompt tokens of every arrival so far
        self.drained = 0.0  # ... of them, those the fluid queue has admitted
        self.at = 0.0  # the clock of the last advance
        self.tokens = 0.0  # decayed prompt tokens the real server admitted while saturated ...
        self.busy = 0.0  # ... and the decayed saturated time they took
        self.saturated = False  # the last step's: the server admits at its capacity
        self.pending = 0  # prompt tokens admitted since the last advance, while saturated
        self.ahead: dict[Queued, int] = {}  # arrived_tokens when a request arrived: what FCFS admits first
        self.started: dict[Queued, float] = {}  # the FCFS start of each request the fluid queue reached
        self.queue: deque[Queued] = deque()  # the others (and some admitted, skipped), in arrival order

    @property
    def rate(self) -> float:
        """Prompt tokens a clock unit the real server admits while saturated (1 before it was seen)."""
        return self.tokens / self.busy if self.busy > 0 else 1.0

    def advance(self, now: float) -> None:
        """Drain the fluid queue to `now` at the current rate (the time counts toward the rate's window if the server
        was saturated since the last `step`)."""
        dt = now - self.at
        if dt <= 0:
            return
        rate = self.rate
        drained = min(float(self.arrived_tokens), self.drained + rate * dt)
        queue, ahead = self.queue, self.ahead
        while queue and (queue[0] not in ahead or ahead[queue[0]] <= drained):  # admitted, or reached
            req = queue.popleft()
            if req in ahead:
                self.started[req] = self.at + max(0.0, ahead[req] - self.drained) / rate
        self.drained, self.at = drained, now
        if self.saturated:  # the step's admissions and time join the window together: a steady rate reads exactly
            keep = math.exp(-dt / self.window)
            self.tokens = self.tokens * keep + self.pending
            self.busy = self.busy * keep + dt
        self.pending = 0

    def step(self, now: float, saturated: bool) -> None:
        """The Scheduler orders the queue at `now`; `saturated`: it admits at its capacity until the next step (the
        admissions of this step and the time to the next count toward the rate)."""
        self.advance(now)
        self.saturated = saturated

    def arrived(self, req: Queued, now: float) -> None:
        self.advance(now)
        self.ahead[req] = self.arrived_tokens
        self.arrived_tokens += len(req.tokens)
        self.queue.append(req)
        if self.ahead[req] <= self.drained:
            self.queue.pop()
            self.started[req] = now

    def admitted(self, req: Queued, now: float) -> None:
        """`req`'s first admission (its prompt tokens count toward the rate if the server is saturated)."""
        self.advance(now)
        if self.saturated:
            self.pending += len(req.tokens)
        self.ahead.pop(req, None)  # left in the queue until the fluid queue reaches it
        self.started.pop(req, None)

    def start(self, req: Queued) -> float | None:
        """`req`'s FCFS start, or None while the fluid queue has not reached it."""
        return self.started.get(req)
