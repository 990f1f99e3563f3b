"""Orders of the waiting queue, each a small class behind one interface: `order(window, now)`.

The Scheduler (integrations/scheduler.py) is the mechanism: it hands a policy the oldest `window`
waiting requests, in arrival order, and admits from the returned order while budget, rows and slots
last (the requests past the window follow in arrival order). A policy never touches the cache; the
cache-aware ones read `PrefixEstimates` (matcher.py), which the Scheduler refreshes first.

`now` and a request's `arrival` are on the Scheduler's clock, whose unit is the time to prefill one
token (the Engine counts planned tokens; `radixkv simulate` converts seconds with its cost model),
so a wait and a prefill length can be compared:

    fcfs        arrival order (the Scheduler's in-batch prefix check still applies, as everywhere)
    fcfs-match  arrival order, but matches the queue like lpm/auto do: the baseline that separates
                the recency side effect of matching from the order itself (matcher.py)
    lpm         longest cached prefix first (SGLang's `lpm`); ties in arrival order
    dfs-weight  SGLang's `dfs-weight`: requests grouped by the tree node their match ends at; a depth-first
                walk visits heavier subtrees (more waiting requests) first, a node's own requests
                after its subtrees
    hrrn        highest response ratio next, `(wait + s) / s` with `s` = the whole prompt: shortest first,
                but every request's ratio grows while it waits (cache-agnostic); equal ratios: smaller s
    auto        HRRN on the work still to do: `s` = the prompt's uncached tokens. A cached prefix makes a
                request short, so requests sharing what the tree holds run while it is held (LPM's hit
                rate), and waiting raises a ratio without limit. That alone lets a cold request wait
                up to `s / s_cached` times as long as cached ones (16x for a 16-block prompt against
                1-block cached ones), so aging has a second, tighter rule: a request that has waited
                more than OVERDUE (2) times the typical wait goes first, oldest first. Typical is the
                larger of the waits admitted requests had (a moving average) and the mean wait of the
                window now (so a queue that arrived all at once is not all overdue). So no request
                waits much more than 2x what others wait, and a steady stream of cached requests
                cannot starve a cold one (LPM's tail).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, ClassVar

from radixkv.errors import InvalidArgumentError

if TYPE_CHECKING:
    from radixkv.results import LockHandle
    from radixkv.scheduling.matcher import PrefixEstimates, Queued


class Policy:
    """Arrival order; subclasses reorder. `matches`: the Scheduler refreshes `estimates` first."""

    name: ClassVar[str] = "fcfs"
    matches: ClassVar[bool] = False

    def __init__(self, estimates: PrefixEstimates) -> None:
        self.estimates = estimates

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        """The window (oldest waiting requests, arrival order) in admission order. No side effects."""
        return window

    def admitted(self, req: Queued, now: float) -> None:
        """`req` left the queue at `now` (the Scheduler calls this on every admission)."""


class FcfsMatch(Policy):
    name = "fcfs-match"
    matches = True


class LongestPrefix(Policy):
    name = "lpm"
    matches = True

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        length = self.estimates.length
        return sorted(window, key=lambda r: -length(r))


class DfsWeight(Policy):
    name = "dfs-weight"
    matches = True

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        at: dict[LockHandle | None, list[Queued]] = defaultdict(list)
        for req in window:
            at[self.estimates.node(req)].append(req)
        weight: dict[LockHandle | None, int] = defaultdict(int)
        kids: dict[LockHandle | None, list[LockHandle]] = defaultdict(list)
        for node, reqs in at.items():
            while node is not None:  # add this node's requests to it and every ancestor
                if weight[node] == 0 and node.parent is not None:
                    kids[node.parent].append(node)
                weight[node] += len(reqs)
                node = node.parent
        out: list[Queued] = []
        stack = [(n, False) for n in sorted((n for n in weight if n.parent is None), key=lambda n: weight[n])]
        while stack:  # post-order, as SGLang: a node's subtrees (heaviest first), then its own requests
            node, expanded = stack.pop()
            if expanded:
                out += at.get(node, [])
                continue
            stack.append((node, True))
            stack += [(k, False) for k in sorted(kids[node], key=lambda n: weight[n])]  # heaviest popped first
        return out + at.get(None, [])  # not matched yet: last, in arrival order


class ResponseRatio(Policy):
    name = "hrrn"

    def service(self, req: Queued) -> int:
        return len(req.tokens)

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        service = self.service
        return sorted(window, key=lambda r: (-(now - r.arrival + (s := service(r))) / s, s))


class Auto(ResponseRatio):
    name = "auto"
    matches = True
    OVERDUE = 2.0  # a request waiting this many times the typical wait goes first
    SMOOTHING = 1 / 64  # weight of each admission in the typical wait (a moving average over ~64)

    def __init__(self, estimates: PrefixEstimates) -> None:
        super().__init__(estimates)
        self.typical = 0.0  # moving average of the waits requests were admitted after

    def service(self, req: Queued) -> int:
        return len(req.tokens) - self.estimates.length(req)  # >= 1: a match stops before the last token

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        waiting = sum(now - r.arrival for r in window) / len(window)
        limit = self.OVERDUE * max(self.typical, waiting)
        overdue = [r for r in window if now - r.arrival > limit] if limit > 0 else []
        if not overdue:
            return super().order(window, now)
        late = set(overdue)
        return overdue + super().order([r for r in window if r not in late], now)

    def admitted(self, req: Queued, now: float) -> None:
        self.typical += self.SMOOTHING * (now - req.arrival - self.typical)


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (Policy, FcfsMatch, LongestPrefix, DfsWeight,
                                                         ResponseRatio, Auto)}


def make_policy(name: str, estimates: PrefixEstimates) -> Policy:
    if not isinstance(name, str) or name not in POLICIES:
        raise InvalidArgumentError(f"unknown schedule {name!r}: choose from {', '.join(POLICIES)}")
    return POLICIES[name](estimates)
