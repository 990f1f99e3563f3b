"""What the tree holds for each waiting request, matched a bounded amount per step.

`PrefixEstimates.refresh(window)` runs `cache.match_prefix` on at most `per_step` requests of the
window: those never matched first, then the ones whose estimate is oldest. Each match costs the
pages compared (DESIGN.md), so one step's matching is at most `per_step * max_context_len / page_size`
page comparisons, whatever the queue's length; a request's estimate is at most
`ceil(window / per_step)` steps old. Estimates only order the queue: `open()` matches again when a
request is admitted, so a stale estimate never changes what is reused, only the order.

Side effect, kept on purpose and measured: `match_prefix` refreshes the recency of the matched
path, so matching the queue protects the prefixes that waiting requests need from LRU eviction.
The `fcfs-match` policy matches exactly like `lpm` and `auto` but keeps FCFS order: the difference
between it and `fcfs` is that side effect, the difference between it and `lpm` is the order.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:
    from radixkv import RadixCache
    from radixkv.results import LockHandle


class Queued(Protocol):
    """What a policy reads of a waiting request (scheduler.py's Request)."""
    tokens: list[int]  # everything to prefill (prompt + output so far); it is matched without its last token
    arrival: float  # Scheduler clock when it joined the queue


class Estimate(NamedTuple):
    length: int  # tokens of the request's prompt the tree held (whole pages), at most len(tokens) - 1
    node: LockHandle  # where that match ended (the namespace root when length == 0)
    step: int  # the refresh() call that matched it


class PrefixEstimates:
    """Matched length and node per waiting request. Mutates only the cache's recency (match_prefix)."""

    def __init__(self, cache: RadixCache, namespace: Any, per_step: int) -> None:
        self.cache = cache
        self.namespace = namespace
        self.per_step = per_step
        self.known: dict[Queued, Estimate] = {}
        # int32 copies of what each request is matched on: converting a token list costs more than
        # the match itself, and a waiting request's tokens do not change (4 bytes a token while queued)
        self.arrays: dict[Queued, np.ndarray] = {}
        self.step = 0
        self.matched = 0  # match_prefix calls so far (the bookkeeping the cap bounds)

    def refresh(self, window: list[Queued]) -> None:
        self.step += 1
        stalest = heapq.nsmallest(self.per_step, window, key=self._age)
        for req in stalest:
            toks = self.arrays.get(req)
            if toks is None:
                toks = self.arrays[req] = np.array(req.tokens[:len(req.tokens) - 1], dtype=np.int32)
            m = self.cache.match_prefix(toks, namespace=self.namespace)
            self.known[req] = Estimate(m.length, m.node, self.step)
        self.matched += len(stalest)

    def _age(self, req: Queued) -> int:
        est = self.known.get(req)
        return -1 if est is None else est.step

    def length(self, req: Queued) -> int:
        est = self.known.get(req)
        return 0 if est is None else est.length

    def node(self, req: Queued) -> LockHandle | None:
        est = self.known.get(req)
        return None if est is None else est.node

    def drop(self, req: Queued) -> None:
        """Forget an admitted request (a preempted one comes back unmatched)."""
        self.known.pop(req, None)
        self.arrays.pop(req, None)
