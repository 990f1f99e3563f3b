"""Orders of the waiting queue, each a small class behind one interface: `order(window, now)`.

The Scheduler (scheduler.py) is the mechanism: it hands a policy the oldest `window`
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
    auto        earliest virtual deadline first, a share for the oldest, aging (auto.py)
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from radixkv.results import LockHandle
    from radixkv.scheduling.matcher import PrefixEstimates, Queued


class Policy:
    """Arrival order; subclasses reorder. `matches`: the Scheduler refreshes `estimates` first.
    `full_cache`: one H100's KV cache (beside the cost model's 8B weights) in the cache's slots."""

    name: ClassVar[str] = "fcfs"
    matches: ClassVar[bool] = False

    def __init__(self, estimates: PrefixEstimates, full_cache: int) -> None:
        self.estimates = estimates
        self.full_cache = full_cache

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        """The window (oldest waiting requests, arrival order) in admission order. It reorders nothing
        in place; `auto` records what it saw (its picks, the queue's level for its aging gate)."""
        return window

    def arrived(self, req: Queued, now: float) -> None:
        """`req` joined the queue at `now` (Scheduler.add; a preempted request does not arrive again)."""

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

    @staticmethod
    def key(req: Queued, now: float) -> tuple[float, int]:
        """hrrn's sort key at `now`: the highest response ratio first, then the shorter prompt (auto reuses it)."""
        s = len(req.tokens)
        return -(now - req.arrival + s) / s, s

    def order(self, window: list[Queued], now: float) -> list[Queued]:
        return sorted(window, key=lambda r: self.key(r, now))
