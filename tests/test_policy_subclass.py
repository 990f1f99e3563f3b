"""A policy defined in the user's own (interpreted) code, registered in POLICIES, drives the cache as
the built-in ones do, compiled core or not: its class-level flags (`name`, `learns`, `insert_is_use`,
`stable_keys`) override the base's, its `key` orders eviction, its hooks are called, and a bumped
`epoch` re-keys the index. (Compiled by mypyc, a base's plain class attribute would become a field
that a subclass's class attribute does not override: eviction/policies.py declares them ClassVar.)"""

from __future__ import annotations

import types

import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.eviction import POLICIES, EvictionPolicy
from radixkv.eviction.adaptive import Adaptive
from radixkv.eviction.history import absolute_key
from radixkv.eviction.policies import FIFO, FILO, LFU, LRU, MRU, SLRU, Priority
from radixkv.eviction.view import CachedNodeView, NodeView
from radixkv.insert_slots import RESUME_MIN


class Oldest(EvictionPolicy):
    """Evicts the oldest-created leaf first, learns (counts its hooks) and flips to newest-first on
    request, bumping `epoch`."""

    name = "oldest-test"
    learns = True
    insert_is_use = True
    stable_keys = True

    def __init__(self) -> None:
        self.calls = {"insert": 0, "hit": 0, "evict": 0, "lookup": 0, "cache": 0}
        self.newest_first = False

    def key(self, node: NodeView) -> tuple:
        return (-node.created if self.newest_first else node.created, node.id)

    def flip(self) -> None:
        self.newest_first = not self.newest_first
        self.epoch += 1

    def on_insert(self, leaf: CachedNodeView) -> None:
        self.calls["insert"] += 1

    def on_hit(self, node: CachedNodeView) -> None:
        self.calls["hit"] += 1

    def on_evict(self, victim: CachedNodeView) -> None:
        self.calls["evict"] += 1

    def on_lookup(self, start: CachedNodeView, key: bytes, length: int) -> None:
        self.calls["lookup"] += 1

    def on_cache(self, start: CachedNodeView, key: bytes, cached: int, use: bool) -> None:
        self.calls["cache"] += 1


@pytest.fixture
def registered():
    POLICIES[Oldest.name] = Oldest
    yield
    del POLICIES[Oldest.name]


def _cached(cache: RadixCache, tokens: list[int]) -> int:
    return cache.match_prefix(tokens).length


def test_builtin_flags_read_as_class_attributes() -> None:
    assert (LRU.name, LRU.learns, LRU.insert_is_use, LRU().epoch) == ("lru", False, False, 0)
    assert (LFU.name, LFU().insert_is_use) == ("lfu", True)
    a = Adaptive()
    assert (a.name, a.learns, a.stable_keys, a.insert_is_use) == ("adaptive", True, False, True)  # ghost counts: eviction/ghosts.py
    assert a.key is not None and a.leader == "lru"


def test_interpreted_subclass_drives_the_cache(registered) -> None:
    cache = RadixCache(sim_config(8, 1, Oldest.name, 8))
    policy = cache.tree.policy
    assert isinstance(policy, Oldest) and cache.tree.learns and cache.tree._insert_is_use
    for first in (10, 20):  # two 4-token sequences fill the cache: 10.. is the older one
        cache.insert([first, 1, 2, 3], cache.alloc(4))
    assert cache.tree.nodes()[1].hit_count == 1  # insert_is_use: the insert counted a use
    cache.insert([30, 1, 2, 3], cache.alloc(4))  # evicts the oldest: 10..
    assert (_cached(cache, [10, 1, 2, 3]), _cached(cache, [20, 1, 2, 3]), _cached(cache, [30, 1, 2, 3])) == (0, 4, 4)
    assert policy.calls["evict"] == 1 and policy.calls["insert"] == 3 and policy.calls["cache"] == 3
    assert policy.calls["lookup"] == 3 and policy.calls["hit"] == 2
    policy.flip()  # newest first from now on: the next lookup re-keys the index
    _cached(cache, [40])
    cache.insert([50, 1, 2, 3], cache.alloc(4))  # evicts the newest: 30..
    assert (_cached(cache, [20, 1, 2, 3]), _cached(cache, [30, 1, 2, 3])) == (4, 0)
    cache.check_invariants()  # stable keys: every stored key equals key(node) after the re-key


def test_fixed_interpreted_subclass_is_not_asked_to_learn(registered) -> None:
    class Quiet(Oldest):
        learns = False

    POLICIES["quiet-test"] = Quiet
    try:
        cache = RadixCache(sim_config(8, 1, "quiet-test", 8))
        for first in (10, 20, 30):
            cache.insert(torch.tensor([first, 1, 2, 3]), cache.alloc(4))
        assert not cache.tree.learns and sum(cache.tree.policy.calls.values()) == 0
        assert _cached(cache, [10, 1, 2, 3]) == 0 and _cached(cache, [30, 1, 2, 3]) == 4
    finally:
        del POLICIES["quiet-test"]


def test_an_insert_that_walks_on_hands_a_learning_policy_the_key_below_its_start(registered) -> None:
    """An insert past RESUME_MIN matched tokens walks on from the last match's node (cache.py): a
    learning policy's on_cache then gets that node as `start` and the key below it, which with the
    path above it (eviction/history.py's absolute_key) is the whole key, as a walk from the root gives."""
    seen: list[tuple[bool, bytes]] = []

    class Keys(Oldest):
        def on_cache(self, start: CachedNodeView, key: bytes, cached: int, use: bool) -> None:
            seen.append((start.parent is not None, absolute_key(start, key)))

    POLICIES["keys-test"] = Keys
    try:
        n = RESUME_MIN + 16
        cache = RadixCache(sim_config(4 * n, 1, "keys-test", 2 * n))
        prompt, full = torch.arange(n), torch.arange(n + 16)
        cache.insert(prompt, cache.alloc(n))
        m = cache.match_prefix(prompt)
        cache.insert(full, torch.cat([m.slots, cache.alloc(16)]))
        as_bytes = [t.to(torch.int32).numpy().tobytes() for t in (prompt, full)]
        assert seen == [(False, as_bytes[0]), (True, as_bytes[1])]
        cache.check_invariants()
    finally:
        del POLICIES["keys-test"]


def test_fixed_keys_read_any_object_with_the_node_fields():
    """A built-in policy's key takes a tree's node or any object with NodeView's fields, compiled as
    pure (the compiled reads go native only for NodeFields)."""
    fake = types.SimpleNamespace(id=7, ns=b"", parent=None, key=b"\0" * 4, size=1, depth=0, last_access=5,
                                 created=2, hit_count=3, priority=1, end=1)
    assert LRU().key(fake) == (5, 7)
    assert LFU().key(fake) == (3, 5, 7)
    assert MRU().key(fake) == (-5, 7)
    assert FIFO().key(fake) == (2, 7)
    assert FILO().key(fake) == (-2, 7)
    assert Priority().key(fake) == (1, 5, 7)
    assert SLRU().key(fake) == (True, 5, 7)
