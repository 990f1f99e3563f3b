"""Pins: cached prefixes kept hot until a deadline. The one owner of every piece of pin state.

    cache.pin(tokens, ns, ttl=60)         pin the cached prefix of tokens for 60 s (PinBudgetError past the budget)
    cache.insert(..., pin_ttl=60)         insert, then pin what was inserted (budget checked before anything changes)
    cache.open(..., pin_ttl=60)           pin the reused prefix now (budget checked), and each page the Sequence
                                          commits later while the budget allows, until open time + 60 s

State, all of it here (nodes carry none):
    _until          node id -> deadline of every pinned node; pinned nodes are ancestor-closed and an
                    ancestor's deadline is never earlier than a descendant's
    pinned_size     device tokens of pinned nodes (checked against `budget`)
    _expiry         heap of (deadline, node id, node); stale entries (pins extended or dropped since)
                    are skipped, and the heap is rebuilt from `_until` when they outnumber live pins,
                    so it never holds more than 2 x live pins + 64 entries
    _rows           req_to_token row -> deadline of the pins its Sequence was opened with
    budget, clock   CacheConfig.pin_budget (0: pinning is off) and the injected clock (seconds)

While pinned, a leaf sorts after every unpinned leaf in the tree's device index (its key is
`(pinned, *policy key)`), so it is evicted only when nothing unpinned is evictable; a lock still
protects absolutely. Time comes from the injected clock (RadixCache(config, clock=...),
time.monotonic by default): tests drive a fake clock instead of sleeping. Expired pins are dropped
lazily: before every eviction, pin and budget read. The tree tells pins of splits and of nodes that
lose their device copy (the pin goes with it); host-tier eviction ignores pins.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from radixkv.errors import ConfigError, InvalidArgumentError, PinBudgetError

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode
    from radixkv.radix.tree import RadixTree


def as_ttl(ttl: Any, what: str) -> float:
    """A positive, finite number of seconds (int or float, not a bool); raises InvalidArgumentError."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"{what} must be a positive number of seconds, got {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise InvalidArgumentError(f"{what} must be a positive, finite number of seconds, got {ttl!r}")
    return float(ttl)


class Pins:
    def __init__(self, tree: RadixTree, budget: int, clock: Callable[[], object]) -> None:
        if not callable(clock):
            raise ConfigError(f"RadixCache(clock=...) must be a callable returning seconds, got {clock!r}")
        self.tree = tree
        self.budget = budget
        self.clock = clock
        self.pinned_size = 0
        self._until: dict[int, float] = {}
        self._node: dict[int, TreeNode] = {}  # node id -> node, for every pinned node
        self._expiry: list[tuple[float, int, TreeNode]] = []
        self._rows: dict[int, float] = {}

    # ------------------------------------------------------------------ the facade's side

    def now(self) -> float:
        """The clock's value, checked: ConfigError for anything but a finite real number."""
        t = self.clock()
        if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) or not math.isfinite(t):
            raise ConfigError(f"the pin clock (RadixCache(clock=...)) returned {t!r}; it must return a finite "
                              "number of seconds")
        return float(t)

    def deadline(self, ttl: Any, what: str) -> float:
        """Validate `ttl` and return now + ttl (drops expired pins first)."""
        seconds = as_ttl(ttl, what)
        if not self.budget:
            raise PinBudgetError(f"{what}: pinning is off (CacheConfig.pin_budget_tokens is 0); set "
                                 "pin_budget_tokens to the most tokens you want pinned at once")
        now = self.now()
        self.expire()
        return now + seconds

    def expire(self) -> None:
        """Unpin every node whose deadline has passed."""
        if not self._until:
            return
        now, heap = self.now(), self._expiry
        while heap and heap[0][0] <= now:
            until, node_id, node = heapq.heappop(heap)
            if self._until.get(node_id) == until:
                self._unpin(node)

    def charge(self, cost: int, what: str) -> None:
        """PinBudgetError unless `cost` more pinned tokens fit in the budget (nothing changes)."""
        if self.pinned_size + cost > self.budget:
            raise PinBudgetError(
                f"{what}: pinning {cost} more tokens would exceed CacheConfig.pin_budget_tokens "
                f"({self.pinned_size} of {self.budget} pinned); wait for pins to expire, pin a shorter "
                "prefix, or raise the budget")

    def cost(self, node: TreeNode) -> int:
        """Tokens that pinning the path to `node` would newly pin (read-only)."""
        new, until = 0, self._until
        while node.parent is not None and node.id not in until:
            new += node.size
            node = node.parent
        return new

    def pinned_length(self, key: bytes, start: TreeNode) -> int:
        """Read-only: how many leading tokens of `key` below `start` are pinned (pins are ancestor-closed)."""
        path, matched = self.tree.walk(key, start)
        n = 0
        for node in path:
            if node.id not in self._until or node.pages is None:
                break
            n = min(node.end - start.end, matched // 4)
        return n

    def pin(self, node: TreeNode, until: float, what: str) -> None:
        """Pin the path from the root to `node` (device-resident) until `until`, or raise
        PinBudgetError with nothing changed."""
        self.charge(self.cost(node), what)
        self._pin(node, until)

    def open_row(self, row: int, until: float) -> None:
        """The Sequence in `row` was opened with a pin until `until`: its commits pin too."""
        self._rows[row] = until

    def close_row(self, row: int) -> None:
        self._rows.pop(row, None)

    def extend(self, row: int, node: TreeNode) -> None:
        """After a commit: pin the Sequence's path to `node` if it was opened with pin_ttl, its
        deadline has not passed and the budget allows (a commit never fails for a pin)."""
        until = self._rows.get(row) if self._rows else None
        if until is None or until <= self.now():
            return
        self.expire()
        if self.pinned_size + self.cost(node) <= self.budget:
            self._pin(node, until)

    # ------------------------------------------------------------------ the tree's side

    def pinned_last(self, key: Callable[[TreeNode], tuple]) -> Callable[[TreeNode], tuple]:
        """The device index's key while pins are on: unpinned leaves first, each group in `key` order."""
        until = self._until

        def pin_key(node: TreeNode) -> tuple:
            return (node.id in until,) + key(node)

        return pin_key

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """`lower` was cut below a new `upper` that took its first tokens: the pin covers both."""
        until = self._until.get(lower.id)
        if until is not None:
            self._until[upper.id], self._node[upper.id] = until, upper
            self._push(until, upper)

    def dropped(self, node: TreeNode) -> None:
        """`node` is losing its device copy: its pin goes with it."""
        if node.id in self._until:
            self._unpin(node)

    # ------------------------------------------------------------------ internals

    def _pin(self, node: TreeNode, until: float) -> None:
        if not self._until:
            self.tree.pins_on(self)
        new, pins = 0, self._until
        while node.parent is not None and pins.get(node.id, 0.0) < until:
            if node.id not in pins:
                new += node.size
            pins[node.id], self._node[node.id] = until, node
            self._push(until, node)
            self.tree.reorder(node)
            node = node.parent
        self.pinned_size += new

    def _push(self, until: float, node: TreeNode) -> None:
        heapq.heappush(self._expiry, (until, node.id, node))
        if len(self._expiry) > 2 * len(self._until) + 64:
            self._expiry = [(u, i, self._node[i]) for i, u in self._until.items()]
            heapq.heapify(self._expiry)

    def _unpin(self, node: TreeNode) -> None:
        del self._until[node.id], self._node[node.id]
        self.pinned_size -= node.size
        self.tree.reorder(node)

    def check(self, nodes: list[TreeNode]) -> None:
        """Recount pinned tokens; pins are ancestor-closed with non-increasing deadlines downwards,
        on live device nodes only, each with a live expiry entry; the total is within the budget;
        the expiry heap is bounded by the live pins."""
        total, until = 0, self._until
        queued = {(u, node_id) for u, node_id, _ in self._expiry}
        live = {n.id: n for n in nodes if n.parent is not None}
        for node_id, u in until.items():
            node = live.get(node_id)
            if node is None or node is not self._node[node_id] or node.pages is None:
                raise AssertionError(f"pins: node {node_id} is pinned but not a live device node")
            total += node.size
            parent = node.parent
            if parent is not None and parent.parent is not None and until.get(parent.id, 0.0) < u:
                raise AssertionError(f"pins: {node} is pinned below a shorter pin")
            if (u, node_id) not in queued:
                raise AssertionError(f"pins: {node} has no expiry entry")
        if total != self.pinned_size or total > self.budget or len(self._expiry) > 2 * len(until) + 64:
            raise AssertionError(f"pins: {self.pinned_size} pinned tokens recorded, {total} recounted, "
                                 f"budget {self.budget}, {len(self._expiry)} expiry entries")
