"""Eviction: which unlocked cached tokens go first. Policies are key functions (policies.py) with
explicit learning hooks; the index keeps evictable leaves in a heap so the victim is found in O(log n).

POLICIES is the registry: a name -> a class called with no arguments.
"""

from __future__ import annotations

from typing import Callable

from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.index import EvictableIndex
from radixkv.eviction.lrfu import LRFU
from radixkv.eviction.policies import FIFO, LFU, LRU, SLRU, EvictionPolicy, Priority, host_first

POLICIES: dict[str, Callable[[], EvictionPolicy]] = {
    "lru": LRU, "lfu": LFU, "fifo": FIFO, "priority": Priority, "slru": SLRU, "adaptive": Adaptive,
    "lrfu": LRFU,
}


def make_policy(name: str) -> EvictionPolicy:
    return POLICIES[name]()


__all__ = ["POLICIES", "EvictionPolicy", "EvictableIndex", "make_policy", "host_first"]
