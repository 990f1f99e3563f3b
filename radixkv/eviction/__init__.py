"""Eviction: which unlocked cached tokens go first. Policies are key functions; the index keeps
evictable leaves sorted by key so the victim is found in O(log n)."""

from radixkv.eviction.policies import POLICIES, EvictionPolicy, make_policy

__all__ = ["POLICIES", "EvictionPolicy", "make_policy"]
