"""`auto`, the default order of the waiting queue (a Policy: policies.py; on the Scheduler's clock, whose unit is
the time to prefill one token).

Earliest virtual deadline first, late requests by cached prefix, and a share for the oldest:
  deadline = arrival + K * (uncached - cached)   (K = 48; tokens of the prompt)
Among requests that arrived together this is shortest remaining work first (the
order that minimizes mean TTFT), with what the tree holds counted twice: it shrinks
the work, and it is work lost if the prefix is evicted while the request waits (LPM's
reason). Every request ages at the same rate. A request whose deadline has passed is
*late*; late requests go first, longest cached prefix first (lpm's order), then in
arrival order. Under overload every deadline passes and EDF alone would degrade into
arrival order; what drains a backlog is throughput, and on a small cache that is the
hit rate, which lpm's order maximizes.
Bound: a request is *due* once the prompt tokens admitted since it arrived exceed
(1 + C) times those waiting ahead of it then (C = 0.5): FCFS would have started it by
then. While any request is due, due requests get a share S = 0.15 of the prompt tokens
admitted, oldest first (a deficit counter over the contended period, reset when none
is due); the other 85% follow the order above. So the oldest always progress (no
stream of cached requests starves a cold one), and a backlog that keeps growing, in
which every waiting request is due, does not turn the queue into FCFS
(bench/RESULTS.md, issue 20, third round; S was 1/4 until the ninth round).
Aging: a request that 16 later arrivals were admitted before is *aged* (and due). Aged
requests go strictly first, oldest first, while fewer than 3 caches' slots of prompt
tokens wait and either the queue has stood above one cache for under 4 cache-times
(a cache-time: the clock time to prefill one cache's slots) or it is a burst: it rose
from under half a *full* cache to above one within 7 full cache-times, where a full
cache is max(this cache, `full_cache`: one H100's KV beside the cost model's 8B
weights, passed in by the Scheduler in the cache's units). So a burst is judged in
absolute work, not in this cache's size: at a quarter H100, where half a cache is a
few prompts, a queue under 3 of its caches is under one full cache and only the
standing rule applies (issue 20, rounds 11-13).
Thin traces (few prompts per cache, little reuse, steady arrivals): K 12 while the
server does not keep up, 24 while it does, S 0.05 in a backlog, and while it keeps up a
bound on the tail in short congestion episodes (the class's docstring). SHARE_HEAVY and AGED_HEAVY (round 26) set the
due share and aging-first on a thin trace while the server does not keep up (SHARE_HEAVY off, AGED_HEAVY 0: aged
requests do not go first there). A due share of 0 picks nobody oldest-first, and the tokens admitted at 0 are owed to
nobody once the share rises (before round 26 they were, and the oldest-first side then took its share of the whole
contended period in one run: base-s1 1/4 1.2's mean).
Passed (round 27): on a thin trace while heavy and under PASSED_MAX (12) caches wait, lpm's order (K_PASSED 0), and the
due are the requests that PASSED_HEAVY (40) later arrivals were admitted before and more than all but 3% (PASSED_Q) of
those admitted so far, not those past their turn; the due share is SHARE_PASSED (0.3). So the cold requests lpm passes
most, which set its p99, are served oldest first at a bounded share, and nobody else is. In a deeper queue (a standing
overload: sparse-s14 1/4 1.2 grows to 25 caches) K_THIN and the heavy due share as before (quarter 1.2: 5 -> 8 of 16
cells tune + held, fresh 3 -> 6 of 8, no loss; bench/RESULTS.md, issue 20, round 27).
Keeping up on a full cache (rounds 26-27; HRRN_LOAD 0 turns it off): hrrn's order alone (`_keeps_up`).
Overload on a small cache (round 29): on a cache under one H100's KV (`full_cache`) the first LPM_UNTIL (300)
arrivals are ordered as lpm orders them, with a valve; then, once, the share of the clock some request waited so far
(`TraceShape.busy`) decides the rest of the run: at least LPM_BUSY (0.5), lpm's order with the valve for good; under
it, the order above for good (from LPM_EARLY (100) arrivals on, at once if it is under LPM_IDLE: 0.1). There a
server that does not keep up is critical at lpm's hit rate, and lpm's order is what drains the queue (its p99 is
under FCFS's); any other order in the first stretch sends the run elsewhere. Under a light load lpm's order passes
cold prompts for longer than FCFS would (its p99 above FCFS's), and the rules above keep the tail. The valve: a
request that VALVE (256) later arrivals were admitted before goes first, oldest first, so no stream of cached
requests holds one back for more than VALVE admissions. (Quarter H100, tune + held: 22 -> 28 of 32 cells, a second
replicate set 20 -> 25, fresh 8 -> 10 of 16, fresh2 7 -> 10; bench/RESULTS.md, issue 20, round 29.)
Gone (rounds 26-27): overdue requests first, past their start on a fluid FCFS clock (fcfs_clock.py, which
bench/sched_tail_clock.py still measures): no setting gained a cell at 5 replicates without losing fresh base-s33 1 1.2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixkv.scheduling.policies import Policy, ResponseRatio
from radixkv.scheduling.shape import TraceShape

if TYPE_CHECKING:
    from radixkv.scheduling.matcher import PrefixEstimates, Queued


class Auto(Policy):
    """Thin traces (rounds 18-19): where the cache holds fewer than PROMPTS admitted prompts of their mean length, at
    most REUSE of the admitted prompt tokens were cached and arrivals are not bursty (the gaps' coefficient of
    variation at most BURSTY), judged once WARMUP caches of prompt tokens were admitted, K is K_THIN (12) while the
    server does not keep up (`TraceShape.busy`, the share of the clock some request waited, at least BUSY) and
    K_LIGHT (24) while it does; and while OVER caches of prompt tokens wait S is SHARE_OVER (0.05). There the tree
    holds a few prompts whose prefixes few others share: under load a long deadline buys little reuse and costs
    throughput (a quarter H100 at load 1.2 is critical at lpm's hit rate), and at a light load K 48 lets later,
    shorter prompts pass a cold long one for longer than its tail allows. Traces that reuse much or come in bursts
    keep K and S.
    At risk (round 21): on a thin trace the server keeps up with, the slowest requests are cold long prompts that
    a few later, shorter ones passed within a congestion episode, where FCFS passes nobody. So there a request is *at
    risk* once the prompt tokens admitted since it arrived reach max(the work waiting when it arrived, the TAIL
    quantile of the work every arrival so far found waiting): FCFS would have started it by then, or it waited
    longer than all but the last 1 - TAIL of arrivals would under FCFS. At-risk requests go first, oldest first,
    with the aged ones and whatever the aging gate says. Below the tail level the deadline order reorders freely;
    above it, the order is FCFS's. Read once TAIL_AFTER requests arrived: the quantile has samples, and at a load of
    1.2 the server stopped keeping up by then (the rule acting in a run's first arrivals moved the 1.2 cells by
    chance, rounds 20-21). Read only in a short congestion episode (round 22): while under EPISODE caches of prompt
    tokens arrived since an arrival last found no prompt waiting. A longer episode is a passing overload, where
    FCFS's order for the at-risk requests (most of those waiting by then) cost both the mean and the tail that the
    deadline order, its due share and the aging keep (sparse-s24 1/4 0.8: one 185-arrival episode held 0.7 of the
    rule's cost, bench/RESULTS.md, issue 20, round 22)."""
    name = "auto"
    matches = True
    SLOWDOWN = 48.0  # K: prefill-token times of deadline per token of (uncached - cached) work
    SLACK = 0.5  # C: a request may be overtaken until (1 + C) x the work ahead of it at arrival is admitted
    SHARE = 0.15  # S: while any request is due, due ones get this share of the tokens admitted, oldest first
    OVERTAKEN = 16  # a request that this many later arrivals were admitted before is aged (and due) ...
    AGED_MAX = 3.0  # ... and goes strictly first while fewer than this many caches' slots wait, and ...
    STAND = 4.0  # ... the queue has stood above one cache for under this many cache-times, or ...
    RISE = 7.0  # ... rose from under RISE_LOW full caches to above one within this many full cache-times
    RISE_LOW = 0.5
    K_THIN = 12.0  # K on a thin trace (thin()) while shape.busy() >= BUSY, ...
    K_LIGHT = 24.0  # ... and while not
    BUSY = 0.6
    PROMPTS = 12.0  # thin: the cache holds fewer than PROMPTS admitted prompts of their mean length, at most REUSE
    REUSE = 0.33  # of their tokens were cached when ordered (< 0: never thin), the arrival gaps' coefficient of
    BURSTY = 2.0  # variation is at most BURSTY; judged once WARMUP caches of prompt tokens were admitted
    WARMUP = 1.0
    OVER = 3.0  # on a thin trace, while OVER caches of prompt tokens wait, the due share is SHARE_OVER
    SHARE_OVER = 0.05
    SHARE_HEAVY = -1.0  # on a thin trace while shape.busy() >= BUSY, the due share is this (< 0: off, as elsewhere)
    AGED_HEAVY = 0.0  # 0: on a thin trace while shape.busy() >= BUSY, aged requests do not go strictly first
    PASSED_HEAVY = 40.0  # ... and the due are those this many later arrivals were admitted before (< 0: off; -1 and
    # AGED_HEAVY 1 give the order of before round 27), and
    PASSED_Q = 0.97  # ... more than this quantile of the counts at admission so far (>= 1: the count alone)
    PASSED_MAX = 12.0  # ... while fewer than this many caches of prompt tokens wait; then K is K_PASSED and the due
    K_PASSED = 0.0  # share SHARE_PASSED (above PASSED_MAX caches: K_THIN and the due share of a thin trace while heavy)
    SHARE_PASSED = 0.3
    TAIL = 0.96  # at risk: once max(work ahead at arrival, this quantile of it over all arrivals) was admitted
    TAIL_AFTER = 300  # ... read on a thin trace the server keeps up with, once this many requests arrived
    EPISODE = 7.0  # ... while under this many caches of prompt tokens arrived since an arrival found none waiting
    HRRN_LOAD = 0.5  # hrrn's order on a full-size cache while shape.rate() is under this (0: off),
    HRRN_AFTER = 8.0  # ... once this many caches of prompt tokens arrived, while at most HRRN_REUSE of the admitted
    HRRN_REUSE = 0.5  # prompt tokens were cached when ordered and fewer than HRRN_QUEUE caches of them wait
    HRRN_QUEUE = 1.0
    LPM_UNTIL = 300  # on a cache under one H100's KV, lpm's order with a valve for this many arrivals (0: never), then
    LPM_BUSY = 0.5  # for the rest of the run if shape.busy() is at least this then, else the order above
    LPM_EARLY = 100  # ... but from this many arrivals on, the order above at once if shape.busy() is under LPM_IDLE
    LPM_IDLE = 0.1  # (0: never early)
    VALVE = 256  # lpm's order with a valve: a request that VALVE later arrivals were admitted before goes first

    def __init__(self, estimates: PrefixEstimates, full_cache: int) -> None:
        super().__init__(estimates, full_cache)
        self.arrived_tokens = 0  # prompt tokens of every request that arrived so far
        self.admitted_tokens = 0  # ... and of every request admitted so far (first admission)
        self.turn: dict[Queued, float] = {}  # admitted_tokens at which a waiting request is due
        self.contended = False  # some request in the window was due when it was last ordered
        self.contested_tokens = 0  # prompt tokens admitted while contended, since contention began
        self.bound_tokens = 0  # ... of them, those the oldest-first side picked
        self.picked: set[Queued] = set()  # the oldest-first side's picks in the last order()
        self.seq: dict[Queued, int] = {}  # waiting requests' arrival numbers
        self.overtaken: dict[Queued, int] = {}  # waiting requests: later arrivals admitted first (aging, PASSED_HEAVY)
        self.aged: set[Queued] = set()
        self.passes = [0] * 1024  # admitted requests by their count (the last counts the rest), PASSED_Q's
        self.prompts_admitted = 0  # ... their sum
        self.arrivals = 0
        self.above_since: float | None = None  # when the queue last rose above one cache (None: under it)
        self.low_at = 0.0  # when it was last under RISE_LOW full caches
        self.rise = 0.0  # full cache-times from low_at to above_since
        self.lengths: dict[Queued, int] = {}  # the last order()'s window: each request's cached prefix
        self.shape = TraceShape()  # what the thin-trace rule reads
        self.share = self.SHARE  # the due share of the last order() (SHARE_OVER in a thin trace's backlog)
        self.risk: dict[Queued, float] = {}  # admitted_tokens at which a waiting request is at risk
        self.episode_from = 0  # arrived_tokens when an arrival last found no prompt waiting
        self.lpm: bool | None = None  # lpm's order with a valve (`_lpm_valve`) for good (True), not (False), or not
        # decided yet (None: while under LPM_UNTIL requests arrived on a cache under one H100's KV, it is lpm's)

    @property
    def lpm_order(self) -> bool:
        """Whether the order is lpm's with the valve: decided so for the run, or not decided yet (`lpm`)."""
        return self.lpm is None or self.lpm

    @property
    def backlog(self) -> int:
        """Prompt tokens of requests that arrived and were not admitted yet."""
        return self.arrived_tokens - self.admitted_tokens

    def arrived(self, req: Queued, now: float) -> None:
        backlog = self.backlog
        self.shape.arrived(now, backlog > 0)
        self.turn[req] = self.admitted_tokens + (1 + self.SLACK) * backlog
        slots = self.estimates.cache.config.num_slots
        self.shape.found(backlog / slots)
        if backlog <= 0:
            self.episode_from = self.arrived_tokens
        self.risk[req] = self.admitted_tokens + max(backlog, self.shape.ahead_quantile(self.TAIL) * slots)
        self.arrived_tokens += len(req.tokens)
        self.seq[req] = self.arrivals
        self.arrivals += 1

    def thin(self) -> bool:
        """Whether the trace so far is thin for this cache (the constants above)."""
        shape, slots = self.shape, self.estimates.cache.config.num_slots
        seen, (n, total, squares) = shape.admitted, shape.gaps
        if seen < self.WARMUP * slots or total <= 0 or shape.cached > self.REUSE * seen:
            return False
        if slots >= self.PROMPTS * seen / shape.prompts:
            return False
        mean = total / n
        return max(0.0, squares / n - mean * mean) ** 0.5 <= self.BURSTY * mean

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        turn, done = self.turn, self.admitted_tokens
        slots = self.estimates.cache.config.num_slots
        if self.lpm is None and (self.LPM_UNTIL <= 0 or slots >= self.full_cache):
            self.lpm = False
        elif self.lpm is None and self.arrivals >= min(self.LPM_EARLY, self.LPM_UNTIL):  # decided once
            busy = self.shape.busy(now, self.backlog > 0)
            if busy < self.LPM_IDLE:
                self.lpm = False
            elif self.arrivals >= self.LPM_UNTIL:
                self.lpm = bool(busy >= self.LPM_BUSY)  # (bool: the clock may be numpy's)
        if self.lpm_order:
            return self._lpm_valve(window)
        resumed = [r for r in window if r not in turn]  # preempted: no turn, first
        thin = self.thin()
        backlog = self.backlog
        over = thin and backlog >= self.OVER * slots
        heavy = thin and self.shape.busy(now, backlog > 0) >= self.BUSY
        counted = heavy and self.PASSED_HEAVY >= 0 and backlog < self.PASSED_MAX * slots
        if counted:  # due: passed often enough, not past the FCFS turn
            least = max(self.PASSED_HEAVY, self._passes_quantile())
            due = [r for r in window if r in turn and self.overtaken.get(r, 0) >= least]
        else:
            due = [r for r in window if r in turn and turn[r] <= done]
        self.contended = bool(due)
        if not due:
            self.contested_tokens = self.bound_tokens = 0  # the next contended period starts afresh
        length, k = self.estimates.length, self.K_THIN if heavy else self.K_LIGHT if thin else self.SLOWDOWN
        self.share = self.SHARE_HEAVY if heavy and self.SHARE_HEAVY >= 0 else self.SHARE_OVER if over else self.SHARE
        if counted:
            k, self.share = self.K_PASSED, self.SHARE_PASSED
        self.lengths = lengths = {r: length(r) for r in window}
        aging = self._aging_first(now) and (self.AGED_HEAVY or not heavy)
        if self._keeps_up(now):  # hrrn's order alone: no due share, no aged or at-risk first
            self._no_share()
            return resumed + sorted((r for r in window if r in turn), key=lambda r: ResponseRatio.key(r, now))
        by_deadline = sorted((r for r in window if r in turn),
                             key=lambda r: (max(now, r.arrival + k * (len(r.tokens) - 2 * lengths[r])), -lengths[r]))
        episode = self.arrived_tokens - self.episode_from
        risky = thin and not heavy and self.arrivals >= self.TAIL_AFTER and episode < self.EPISODE * slots
        first = [r for r in window if r in turn and (aging and r in self.aged or risky and self.risk[r] <= done)]
        if first:
            chosen = set(first)
            due = [r for r in due if r not in chosen]
            by_deadline = [r for r in by_deadline if r not in chosen]
        return resumed + first + self._interleave(due, by_deadline)

    def _lpm_valve(self, window: list[Queued]) -> list[Queued]:
        """lpm's order (the longest cached prefix first, ties in arrival order), but the requests that VALVE later
        arrivals were admitted before go first, oldest first."""
        self._no_share()
        self.lengths = lengths = {r: self.estimates.length(r) for r in window}
        overtaken, valve = self.overtaken, self.VALVE
        first = [r for r in window if overtaken.get(r, 0) >= valve]
        rest = [r for r in window if overtaken.get(r, 0) < valve]
        return first + sorted(rest, key=lambda r: -lengths[r])

    def _no_share(self) -> None:
        """An order with no due share (hrrn's, lpm's): nobody picked oldest-first, the contended period over."""
        self.contended, self.picked, self.contested_tokens, self.bound_tokens = False, set(), 0, 0

    def _keeps_up(self, now: float) -> bool:
        """Whether the order is hrrn's (policies.py) alone, no due share and no aged or at-risk request first: on a
        cache of at least one H100's KV (`full_cache`), once HRRN_AFTER caches of prompt tokens arrived, while they came
        at under HRRN_LOAD per unit of the clock (`TraceShape.rate`: their share of the prefill rate with no reuse; not
        priced at the hit rate, nor the share of the clock some request waited: neither splits loads 0.8 and 1.2), at
        most HRRN_REUSE of those admitted were cached (hrrn's size, the whole prompt, is not the work there) and under
        HRRN_QUEUE caches wait (under a deep queue hrrn doubled long-s11 1.2's mean; bench/RESULTS.md, round 27)."""
        slots, arrived, shape = self.estimates.cache.config.num_slots, self.arrived_tokens, self.shape
        return (slots >= self.full_cache and arrived >= self.HRRN_AFTER * slots
                and shape.cached <= self.HRRN_REUSE * shape.admitted and shape.rate(now, arrived) < self.HRRN_LOAD
                and self.backlog < self.HRRN_QUEUE * slots)

    def _aging_first(self, now: float) -> bool:
        """Whether aged requests go strictly first now: fewer than AGED_MAX caches wait, and the queue
        has stood above one cache for under STAND cache-times or rose there as a burst (in full caches)."""
        slots = self.estimates.cache.config.num_slots
        full = max(slots, self.full_cache)
        backlog = self.backlog
        if backlog < self.RISE_LOW * full:
            self.low_at = now
        if backlog > slots:
            if self.above_since is None:
                self.above_since = now
                self.rise = (now - self.low_at) / full
        elif backlog < slots:  # at exactly one cache the standing clock neither starts nor stops
            self.above_since = None
        if backlog >= self.AGED_MAX * slots:
            return False
        standing = self.above_since is not None and (now - self.above_since) / slots >= self.STAND
        return not standing or (self.rise < self.RISE and backlog > full)

    def _passes_quantile(self) -> int:
        """The least count above those of a share PASSED_Q of the requests admitted so far (0 if none or off)."""
        need, seen = self.PASSED_Q * self.prompts_admitted, 0
        if self.PASSED_Q >= 1 or not need:
            return 0
        for n, k in enumerate(self.passes):
            seen += k
            if seen >= need:
                return n + 1
        return len(self.passes)

    def _interleave(self, due: list[Queued], by_deadline: list[Queued]) -> list[Queued]:
        """Both orders merged: the oldest due request whenever the oldest-first side's picks so far
        (this contended period, then this order if all were admitted) are within SHARE of the tokens."""
        out: list[Queued] = []
        self.picked = picked = set()
        taken: set[Queued] = set()
        spent, total, i, j = self.bound_tokens, self.contested_tokens, 0, 0
        while i < len(due) and j < len(by_deadline):
            if self.share > 0 and spent <= self.share * total:
                req, i = due[i], i + 1
                if req in taken:
                    continue
                spent += len(req.tokens)
                picked.add(req)
            else:
                req, j = by_deadline[j], j + 1
                if req in taken:
                    continue
            taken.add(req)
            total += len(req.tokens)
            out.append(req)
        return out + [r for r in by_deadline[j:] if r not in taken]

    def admitted(self, req: Queued, now: float) -> None:
        self.shape.note(now, self.backlog > 0)
        if self.turn.pop(req, None) is None:
            return
        del self.risk[req]
        mine, overtaken, aged = self.seq.pop(req), self.overtaken, self.aged
        aged.discard(req)
        self.passes[min(len(self.passes) - 1, overtaken.pop(req, 0))] += 1
        self.prompts_admitted += 1
        for r, n in self.seq.items():  # arrival order: those that arrived before req come first
            if n > mine:
                break
            count = overtaken[r] = overtaken.get(r, 0) + 1
            if count >= self.OVERTAKEN and r not in aged:  # aged
                self.turn[r] = min(self.turn[r], self.admitted_tokens)
                aged.add(r)
        n = len(req.tokens)
        self.admitted_tokens += n
        self.shape.admitted_one(n, self.lengths.get(req, 0))
        if self.contended and self.share > 0:  # a share of 0 owes the oldest-first side nothing later
            self.contested_tokens += n
            self.bound_tokens += n if req in self.picked else 0
