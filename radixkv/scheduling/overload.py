"""Is the waiting queue's backlog growing? Arrivals against admissions over a window of minutes.

`auto` (policies.py) serves requests whose FCFS turn has passed first while a queue is transient,
and turns that rule down while the backlog keeps growing (a sustained overload: there every old
request is past its turn, and serving them first would make the queue FCFS). The detector counts
prompt tokens: `arrived` and `admitted` are cumulative, sampled on the Scheduler's clock (the time
to prefill one token), and the backlog *grows* when, over the last `window` of that clock,

    tokens arrived > (1 + margin) x tokens admitted.

The window is `requests` mean-request prefill times (128: about a minute for 12k-token prompts on
the cost model's H100), so it scales with the workload, not with the clock's unit; a burst shorter
than it does not count as growth, and until the samples span one window nothing grows.
"""

from __future__ import annotations

from collections import deque


class OverloadDetector:
    """Samples (clock, arrived, admitted) at most 16 times a window. Mutates only itself."""

    def __init__(self, requests: float = 128.0, margin: float = 0.05, persist: float = 0.0) -> None:
        self.requests = requests  # window length in mean requests' prefill times
        self.margin = margin  # arrivals must exceed admissions by this fraction to count as growth
        self.persist = persist  # and, if > 0, the backlog stay above this many mean requests throughout
        self.count = 0  # requests arrived
        self.arrived = 0  # prompt tokens arrived
        self.admitted = 0  # prompt tokens admitted (first admission only)
        self.samples: deque[tuple[float, int, int]] = deque()

    def arrive(self, tokens: int) -> None:
        self.count += 1
        self.arrived += tokens

    def admit(self, tokens: int) -> None:
        self.admitted += tokens

    @property
    def backlog(self) -> int:
        """Prompt tokens waiting (arrived, never admitted)."""
        return self.arrived - self.admitted

    def growing(self, now: float) -> bool:
        """Record a sample at `now`; True if over the last window arrivals outran admissions."""
        window = self.requests * self.arrived / max(1, self.count)
        samples = self.samples
        if not samples or now - samples[-1][0] >= window / 16:
            samples.append((now, self.arrived, self.admitted))
        while len(samples) > 1 and samples[1][0] <= now - window:
            samples.popleft()  # samples[0]: the newest sample at least one window old
        t, arrived, admitted = samples[0]
        if not self.count or now - t < window:
            return False  # nothing arrived, or not one window of history yet
        if self.persist and min(a - d for _, a, d in samples) < self.persist * self.arrived / self.count:
            return False  # the queue drained within the window: a transient queue
        return self.arrived - arrived > (1 + self.margin) * (self.admitted - admitted)
