"""The node's shape for hybrid models (radix/node.py): one component per layer group, a primary
full-KV one and secondary ones (per-page window KV, a one-slot state snapshot) that may be
tombstones, each group priced by its own PageLedger. Driven at the tree level with two secondary
groups; every step is checked against check_tree and against each group's ledger (the pages the
tree holds of a group are exactly that ledger's CACHED pages)."""

from __future__ import annotations

import numpy as np
import pytest

from radixkv import InvalidSlotsError
from radixkv.eviction import make_policy
from radixkv.pools import CACHED, FREE, PageLedger
from radixkv.radix import RadixTree, check_tree, evict_device, evict_secondary
from radixkv.radix.components import set_component
from radixkv.radix.locks import lock, unlock
from radixkv.radix.types import USER

PS, WINDOW, STATE = 2, 1, 2  # page size; group ids of the sliding-window KV and the recurrent state


class Hybrid:
    """A tree with two secondary groups and one ledger per group (group 0: full KV)."""

    def __init__(self) -> None:
        self.tree = RadixTree(PS, make_policy("lru"), secondary_groups=2)
        self.ledgers = [PageLedger(64, 1) for _ in range(3)]
        self.root = self.tree.root(b"")

    def take(self, group: int, k: int) -> np.ndarray:
        pages = self.ledgers[group].take(k, CACHED, 0, lambda n: [])
        return pages

    def insert(self, tokens: list[int]) -> None:
        key = np.asarray(tokens, dtype=np.int32).tobytes()
        pages = self.take(0, len(tokens) // PS)
        result = self.tree.insert(key, pages, self.root)
        self.release(0, pages[:result.cached_len // PS])  # duplicates of what the tree holds
        for node in result.gained:  # each new edge: window KV per page, a state snapshot after its end
            set_component(self.tree.group_index, node, WINDOW, self.take(WINDOW, node.size // PS))
            set_component(self.tree.group_index, node, STATE, self.take(STATE, 1))

    def release(self, group: int, pages: np.ndarray) -> None:
        self.ledgers[group].release(pages)

    def check(self) -> None:
        device, _ = check_tree(self.tree)
        held = [device] + [np.concatenate([n.secondary[g] for n in self.tree.nodes()
                                           if n.parent is not None and n.secondary[g] is not None] or
                                          [np.empty(0, dtype=np.int64)]) for g in range(2)]
        for group, pages in enumerate(held):
            ledger = self.ledgers[group]
            ledger.check()
            assert set(np.flatnonzero(ledger.state == CACHED)) == set(pages.tolist()), f"group {group}"


def test_components_follow_inserts_splits_and_evictions() -> None:
    h = Hybrid()
    h.insert(list(range(8)))  # one edge of 4 pages
    h.check()
    node = h.tree.match(np.arange(8, dtype=np.int32).tobytes(), h.root).node
    window, state = node.secondary[0].copy(), node.secondary[1].copy()
    h.tree.match(np.arange(4, dtype=np.int32).tobytes(), h.root)  # splits the edge after 2 pages
    upper = node.parent
    assert upper.size == 4 and node.size == 4
    assert np.array_equal(np.concatenate([upper.secondary[0], node.secondary[0]]), window)  # cut per page
    assert upper.secondary[1] is None and np.array_equal(node.secondary[1], state)  # the snapshot stays below
    h.check()
    h.insert(list(range(4)) + [9, 9])  # a branch under the upper half
    h.check()
    # secondary eviction first: window KV of unlocked nodes goes, full KV stays
    lock(h.tree, node, USER)
    cached = h.tree.evictable_size + h.tree.protected_size
    freed = evict_secondary(h.tree, WINDOW, 100)
    h.release(WINDOW, freed)
    assert h.tree.evictable_size + h.tree.protected_size == cached  # no full KV went
    assert node.secondary[0] is not None and upper.secondary[0] is not None  # locked path: protected
    assert all(n.secondary[0] is None for n in h.tree.nodes() if n.parent is not None and not n.lock_ref)
    h.check()
    unlock(h.tree, node, USER)
    # device eviction returns each dropped node's secondary pages per group
    gone = evict_device(h.tree, 100)
    h.ledgers[0].release_runs(gone.pages)
    for group, pages in zip((WINDOW, STATE), gone.secondary):
        h.release(group, pages)
    h.check()
    assert h.tree.evictable_size == 0 and all((ledger.state == FREE).all() for ledger in h.ledgers)


def test_component_rules_are_checked() -> None:
    h = Hybrid()
    h.insert(list(range(4)))
    node = h.tree.match(np.arange(4, dtype=np.int32).tobytes(), h.root).node
    with pytest.raises(InvalidSlotsError):  # the slot is taken: drop (tombstone) it first
        set_component(h.tree.group_index, node, STATE, np.array([9], dtype=np.int64))
    with pytest.raises(InvalidSlotsError):  # no group 3
        set_component(h.tree.group_index, node, 3, np.array([9], dtype=np.int64))
    with pytest.raises(InvalidSlotsError):  # the root holds no KV
        set_component(h.tree.group_index, h.root, WINDOW, np.array([9], dtype=np.int64))
    h.check()
    other = h.tree.insert(np.array([7, 7, 8, 8], dtype=np.int32).tobytes(), h.take(0, 2), h.root).node
    other.secondary[1] = node.secondary[1]  # a group's page held by two nodes (written behind the tree's back)
    with pytest.raises(AssertionError, match="group"):
        check_tree(h.tree)
