"""Eviction policies as key functions: the evictable leaf with the smallest key goes first.

A policy is an object with `key(node) -> tuple`, computed when a leaf enters the evictable index
or is touched while in it, and `on_evict(node)`, called once per victim (adaptive policies learn
there; the simple ones ignore it). Keys end with `node.id` so they are unique and deterministic.
Recency is an integer logical clock (`node.last_access`), never wall time, so tests need no sleeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode


class EvictionPolicy:
    name = "base"
    stateless = False  # True when key(node) depends on the node alone (check_invariants re-derives it)

    def key(self, node: TreeNode) -> tuple:
        raise NotImplementedError

    def on_evict(self, node: TreeNode) -> None:
        """Called once for each victim, before its tokens are freed."""


class LRU(EvictionPolicy):
    name = "lru"
    stateless = True

    def key(self, node: TreeNode) -> tuple:
        return (node.last_access, node.id)


class LFU(EvictionPolicy):
    """Fewest hits first; ties go to the least recently used (SGLang's LFUStrategy)."""

    name = "lfu"
    stateless = True

    def key(self, node: TreeNode) -> tuple:
        return (node.hit_count, node.last_access, node.id)


class FIFO(EvictionPolicy):
    name = "fifo"
    stateless = True

    def key(self, node: TreeNode) -> tuple:
        return (node.created, node.id)


class Priority(EvictionPolicy):
    """Lowest request priority first, then least recently used."""

    name = "priority"
    stateless = True

    def key(self, node: TreeNode) -> tuple:
        return (node.priority, node.last_access, node.id)


class HostFirst(EvictionPolicy):
    """The host tier's order: host-only leaves (no device copy) before host copies of device
    nodes, each group in the order of the wrapped policy."""

    def __init__(self, inner: EvictionPolicy) -> None:
        self.inner = inner
        self.name = f"host-{inner.name}"
        self.stateless = inner.stateless

    def key(self, node: TreeNode) -> tuple:
        return (node.on_device,) + self.inner.key(node)


POLICIES: dict[str, Callable[[], EvictionPolicy]] = {
    "lru": LRU,
    "lfu": LFU,
    "fifo": FIFO,
    "priority": Priority,
}
from radixkv.eviction.adaptive import SLRU, Adaptive  # noqa: E402  (adaptive.py imports the base class)
POLICIES.update(slru=SLRU, adaptive=Adaptive)


def make_policy(name: str) -> EvictionPolicy:
    return POLICIES[name]()
