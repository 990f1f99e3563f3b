"""What `auto` has seen of a trace so far, for its thin-trace rule (auto.py, `Auto.thin`): how much of the
admitted prompt tokens was cached when ordered, how irregular the gaps between arrivals are, and for what share of
the clock some request waited, which is near 1 where the server does not keep up at the hit rate it gets and
0.2-0.5 at a load of 0.8 on the sweep's thin traces (bench/RESULTS.md, issue 20, round 19), and how much work each
arrival found waiting (its tail: Auto's at-risk bound, round 21); for its keeping-up rule, the rate prompt tokens
arrive at (round 27). All of it cumulative from the first arrival, so that a rule reading it settles instead of
flapping."""

from __future__ import annotations


class TraceShape:
    BINS = 32  # the work ahead of an arrival is counted in 1/BINS caches, ...
    CACHES = 8  # ... up to CACHES caches (more counts as CACHES)

    def __init__(self) -> None:
        self.admitted = 0  # prompt tokens of first admissions ...
        self.cached = 0  # ... of them those cached when last ordered
        self.prompts = 0  # first admissions
        self.gaps = [0, 0.0, 0.0]  # gaps between arrivals: count, sum, sum of squares
        self.last_arrival: float | None = None
        self.first: float | None = None  # the clock at the first arrival
        self.waited = 0.0  # clock time since then during which some request waited ...
        self.seen_at = 0.0  # ... counted up to this clock
        self.ahead = [0] * (self.BINS * self.CACHES)  # arrivals by the work waiting when they came, in 1/BINS caches
        self.arrivals = 0

    def arrived(self, now: float, waiting: bool) -> None:
        """A request arrived at `now`; `waiting`: some request was waiting just before."""
        self.note(now, waiting)
        if self.first is None:
            self.first = now
        if self.last_arrival is not None:
            gap = now - self.last_arrival
            self.gaps[0] += 1
            self.gaps[1] += gap
            self.gaps[2] += gap * gap
        self.last_arrival = now

    def admitted_one(self, tokens: int, cached: int) -> None:
        """A first admission of a prompt of `tokens`, `cached` of them cached when it was last ordered."""
        self.admitted += tokens
        self.cached += cached
        self.prompts += 1

    def note(self, now: float, waiting: bool) -> None:
        """Counts the clock up to `now`; `waiting`: some request waited since the last note (the caller notes every
        arrival and admission, between which the queue does not change)."""
        if waiting:
            self.waited += now - self.seen_at
        self.seen_at = now

    def busy(self, now: float, waiting: bool) -> float:
        """The share of the clock from the first arrival to `now` during which some request waited; `waiting`: some
        request waited since the last note. It changes nothing, so it reads the same whenever it is called."""
        waited = self.waited + (now - self.seen_at if waiting else 0.0)
        return waited / (now - self.first) if self.first is not None and now > self.first else 0.0

    def rate(self, now: float, tokens: int) -> float:
        """`tokens` (every arrival's prompt tokens so far) per unit of the clock from the first arrival to `now`: on the
        Scheduler's clock (one token's prefill) the share of the server's prefill rate the arrivals would take with no
        prefix reuse. Infinite until the clock has moved past the first arrival."""
        return tokens / (now - self.first) if self.first is not None and now > self.first else float("inf")

    def found(self, caches: float) -> None:
        """An arrival found `caches` caches of prompt tokens waiting."""
        self.ahead[min(len(self.ahead) - 1, int(caches * self.BINS))] += 1
        self.arrivals += 1

    def ahead_quantile(self, q: float) -> float:
        """A level, in caches, under which a share of at least `q` of the arrivals so far found the work waiting (the
        upper edge of the first 1/BINS cache bin where that share is reached; CACHES if no arrival yet)."""
        need, seen = q * self.arrivals, 0
        for i, n in enumerate(self.ahead if self.arrivals else []):
            seen += n
            if seen >= need:
                return (i + 1) / self.BINS
        return float(self.CACHES)
