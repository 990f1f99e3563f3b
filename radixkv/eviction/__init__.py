"""Eviction: which unlocked cached tokens go first. Policies are key functions (policies.py) with
explicit learning hooks; the index keeps evictable leaves in a heap so the victim is found in O(log n).
Policies see nodes and trees through view.py only; nothing here imports radix/ (radix imports this).

The index is a binary heap (heapq) with lazy deletion, not a sorted container: re-keying a leaf on
every touch costs one heappush (~3 us with its share of compaction, 20k leaves), where a SortedList
needs a remove and an add (~20 us; bench/RESULTS.md, issue 22), so sortedcontainers is not a dependency.

POLICIES is the registry: a name -> a class called with no arguments. Every SGLang eviction option
maps to one: lru, lfu, fifo, mru, filo, priority, slru.
"""

from __future__ import annotations

from typing import Callable

from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.index import EvictableIndex
from radixkv.eviction.lrfu import LRFU
from radixkv.eviction.policies import FIFO, FILO, LFU, LRU, MRU, SLRU, EvictionPolicy, Priority, host_first

POLICIES: dict[str, Callable[[], EvictionPolicy]] = {
    "lru": LRU, "lfu": LFU, "fifo": FIFO, "mru": MRU, "filo": FILO, "priority": Priority, "slru": SLRU,
    "adaptive": Adaptive, "lrfu": LRFU,
}


def make_policy(name: str) -> EvictionPolicy:
    return POLICIES[name]()


__all__ = ["POLICIES", "EvictionPolicy", "EvictableIndex", "make_policy", "host_first"]
