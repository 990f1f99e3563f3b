"""Pins with a time to live: cached prefixes kept hot until a deadline. Owned by the RadixTree.

A pin covers a path from a namespace root to a node: every node on it gets `pin_until = max(its
pin_until, deadline)`, so pinned nodes are ancestor-closed and an ancestor's deadline is never
earlier than a descendant's. While pinned, a leaf sorts after every unpinned leaf in the evictable
index (the index key is `(pinned, *policy key)`), so it is evicted only when nothing unpinned is
evictable; a lock still protects absolutely. Deadlines are read off an injected clock by the
caller (RadixCache) and passed in; nothing here reads the time.

    pinned_size     device tokens of nodes with pin_until > 0 (checked against the budget by the caller)
    _expiry         heap of (deadline, node id, node): `expire(now)` unpins every node whose own
                    deadline has passed (stale entries, for pins extended since, are skipped)

A node that loses its device copy loses its pin (`dropped`). Host-tier eviction ignores pins.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from radixkv.eviction import EvictableIndex
    from radixkv.radix.node import TreeNode


def pinned_last(key: Callable[[TreeNode], tuple]) -> Callable[[TreeNode], tuple]:
    """The device index's key when pins are on: unpinned leaves first, each group in `key` order."""

    def pin_key(node: TreeNode) -> tuple:
        return (node.pin_until > 0,) + key(node)

    return pin_key


class Pins:
    def __init__(self, index: EvictableIndex) -> None:
        self.index = index  # the tree's device index, keyed by pinned_last(policy key)
        self.pinned_size = 0
        self._expiry: list[tuple[float, int, TreeNode]] = []

    @staticmethod
    def cost(node: TreeNode) -> int:
        """Tokens that pinning the path to `node` would newly pin (read-only)."""
        new = 0
        while node.parent is not None and not node.pin_until:
            new += node.size
            node = node.parent
        return new

    def pin(self, node: TreeNode, until: float) -> int:
        """Pin the path from the root to `node` (device-resident) until `until`; returns tokens newly pinned."""
        new = 0
        while node.parent is not None and node.pin_until < until:
            if not node.pin_until:
                new += node.size
            node.pin_until = until
            heapq.heappush(self._expiry, (until, node.id, node))
            self.index.refresh(node)
            node = node.parent
        self.pinned_size += new
        return new

    def expire(self, now: float) -> None:
        """Unpin every node whose deadline is <= now."""
        heap = self._expiry
        while heap and heap[0][0] <= now:
            until, _, node = heapq.heappop(heap)
            if node.pin_until == until:
                self._unpin(node)

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """`lower` was cut below a new `upper` that took its first tokens: the pin covers both."""
        if lower.pin_until:
            upper.pin_until = lower.pin_until
            heapq.heappush(self._expiry, (upper.pin_until, upper.id, upper))

    def dropped(self, node: TreeNode) -> None:
        """`node` is losing its device copy: its pin goes with it."""
        if node.pin_until:
            self._unpin(node)

    def _unpin(self, node: TreeNode) -> None:
        node.pin_until = 0.0
        self.pinned_size -= node.size
        self.index.refresh(node)

    def check(self, nodes: list[TreeNode], budget: int) -> None:
        """Recount pinned tokens; pins are ancestor-closed with non-increasing deadlines downwards,
        on device nodes only, each with a live expiry entry; the total is within `budget`."""
        total = 0
        queued = {(until, node_id) for until, node_id, _ in self._expiry}
        for node in nodes:
            if node.parent is None or not node.pin_until:
                continue
            total += node.size
            parent = node.parent
            if node.pages is None or (parent.parent is not None and parent.pin_until < node.pin_until):
                raise AssertionError(f"pins: {node} is pinned off the device or below a shorter pin")
            if (node.pin_until, node.id) not in queued:
                raise AssertionError(f"pins: {node} has no expiry entry")
        if total != self.pinned_size or total > budget:
            raise AssertionError(f"pins: {self.pinned_size} pinned tokens recorded, {total} recounted, "
                                 f"budget {budget}")
