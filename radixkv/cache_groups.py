"""Secondary layer groups of a RadixCache: each group's pool, priced by its own PageLedger.

A hybrid model's layers fall into groups (radix/node.py has the picture): group 0 is full KV (the
cache's own ledger and `kv_pool`); group g >= 1 is `CacheConfig.groups[g - 1]` (a GroupSpec):

    window   sliding-window KV: page_size-token pages, one per page of positions it holds
    chunk    chunked-attention KV (Llama 4), the same pages, kept for the current chunk only
    state    recurrent-state snapshots: one slot per snapshot (page size 1); the state tensors
             live with their owner, the cache keeps which slot holds which prefix's state

`cache.group(g)` is a SecondaryGroup, the group's public calls:

    pages = cache.group(g).alloc(n)        # n private pages, evicting group g's components first
    cache.group(g).attach(node, pages)     # a node (from match_prefix / a Sequence) takes them
    cache.group(g).component(node)         # the pages a node holds (None: a tombstone)
    cache.group(g).free(pages)             # private pages back
    cache.group(g).drop(node)              # tombstone one node's component (its owner's choice)
    cache.group(g).evict(n), .sizes()

Page states per group are the ledger's (FREE, CACHED: one node's component, PRIVATE: from
alloc(), RESERVED: an open Sequence's window pages). A group's pages come back to its ledger when
its components are evicted (evict(), or alloc() running short: unprotected components go, policy
order, full KV stays) and when the tree drops a node's full KV (RadixCache passes
`Evicted.secondary` here). check() recomputes every group's page states from the tree.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from radixkv.config import KV_GROUP_KINDS, GroupSpec
from radixkv.errors import InvalidSlotsError, OutOfSlotsError
from radixkv.pools import CACHED, PRIVATE, PageLedger
from radixkv.results import LockHandle
from radixkv.radix import RadixTree, TreeNode
from radixkv.radix.components import drop_component, set_component
from radixkv.radix.evict import drop_victims, secondary_victims
from radixkv.tokens import TokensLike, as_count, slot_array


class GroupSizes(NamedTuple):
    """Pages of one secondary group: free + cached + private == total."""

    free: int
    cached: int  # held by tree nodes' components
    private: int  # from alloc(), or an open Sequence's
    total: int


class SecondaryGroup:
    """Group `index` (>= 1) of a RadixCache: its ledger and its public calls (module docstring)."""

    def __init__(self, index: int, spec: GroupSpec, page_size: int, tree: RadixTree,
                 own: Callable[[], None]) -> None:
        self.index = index
        self.spec = spec
        self.page_size = page_size if spec.kind in KV_GROUP_KINDS else 1  # tokens per page of this pool
        self.ledger = PageLedger(spec.num_slots // self.page_size, self.page_size)
        self._tree = tree
        self._own = own  # the cache's thread check
        self.evicted_pages = 0  # components' pages taken back by this group's eviction (not full-KV eviction)

    # ------------------------------------------------------------------ public calls

    def alloc(self, n: int) -> torch.Tensor:
        """`n` private pages (int64 `[n]`), evicting this group's unprotected components (policy
        order; full KV stays) when too few are free. OutOfSlotsError, nothing changed, when even
        that cannot serve."""
        self._own()
        return torch.from_numpy(self.take(as_count(n, "group alloc(n)"), PRIVATE))

    def free(self, pages: TokensLike) -> None:
        """Give back private pages from alloc(); anything else raises InvalidSlotsError."""
        self._own()
        arr = self._pages(pages, "free")
        self.ledger.release(arr)

    def attach(self, handle: LockHandle, pages: TokensLike) -> None:
        """`node` (on the device, its component here a tombstone) takes private `pages` from
        alloc() as its component: one per page of its edge (window), or one (state). Afterwards
        the tree owns them. InvalidSlotsError / LockError, nothing changed, otherwise."""
        self._own()
        node = self._tree.check_node(handle)
        arr = self._pages(pages, "attach")
        want = node.size // self._tree.page_size if self.spec.kind in KV_GROUP_KINDS else 1
        if len(arr) != want:
            raise InvalidSlotsError(f"attach: {node} takes {want} pages of group {self.index}, got {len(arr)}")
        set_component(self._tree.group_index, node, self.index, arr.copy())
        self.ledger.move(arr, CACHED)

    def component(self, handle: LockHandle) -> torch.Tensor | None:
        """The pages `node` holds in this group (int64, a copy), or None (a tombstone). Mutates nothing."""
        self._own()
        node = self._tree.check_node(handle)
        pages = node.secondary[self.index - 1] if node.secondary else None
        return None if pages is None else torch.from_numpy(pages.copy())

    def drop(self, handle: LockHandle) -> int:
        """Tombstone `node`'s component in this group, locked or not (its owner's choice: a state
        snapshot replaced by a later one); returns pages freed (0: it had none). Full KV stays."""
        self._own()
        node = self._tree.check_node(handle)
        pages = drop_component(self._tree.group_index, node, self.index) if node.secondary else None
        if pages is None:
            return 0
        self.ledger.release(pages)
        return len(pages)

    def evict(self, n: int) -> int:
        """Tombstone unprotected components holding at least `n` pages if that many exist (else
        all of them); returns pages freed. Full KV stays."""
        self._own()
        plan, _ = secondary_victims(self._tree, self.index, as_count(n, "group evict(n)"), self.protected)
        pages = drop_victims(self._tree, self.index, plan)
        self.ledger.release(pages)
        self.evicted_pages += len(pages)
        return len(pages)

    def sizes(self) -> GroupSizes:
        """Page counts; O(1), mutates nothing."""
        self._own()
        ledger = self.ledger
        free, cached = ledger.num_free_pages, int(np.count_nonzero(ledger.state == CACHED))
        return GroupSizes(free, cached, ledger.num_pages - free - cached, ledger.num_pages)

    # ------------------------------------------------------------------ for the cache

    def take(self, k: int, state: int) -> np.ndarray:
        """Pop `k` free pages into `state`, evicting components first when short (all or nothing)."""
        short = k - self.ledger.num_free_pages
        if short > 0:
            plan, found = secondary_victims(self._tree, self.index, short, self.protected)
            if found < short:
                raise OutOfSlotsError(
                    f"group {self.index} ({self.spec.kind}): need {k} pages, {self.ledger.num_free_pages} free and "
                    f"{found} evictable; close Sequences or raise its GroupSpec.num_slots")
            pages = drop_victims(self._tree, self.index, plan)
            self.ledger.release(pages)
            self.evicted_pages += len(pages)
        return self.ledger.take(k, state, 0, _no_eviction)

    def protected(self, node: TreeNode) -> int:
        """Trailing tokens of `node`'s edge whose component must stay: all of a locked node's."""
        return node.size if node.lock_ref else 0

    def check(self) -> None:
        """The ledger's CACHED pages are exactly the components the tree holds in this group."""
        self.ledger.check()
        g = self.index - 1
        held = [c for n in self._tree.nodes() if n.parent is not None and (c := n.secondary[g]) is not None]
        cached = np.flatnonzero(self.ledger.state == CACHED)
        if not np.array_equal(np.sort(np.concatenate(held)) if held else cached[:0], cached):
            raise AssertionError(f"group {self.index}: CACHED pages differ from the tree's components")

    def _pages(self, pages: TokensLike, what: str) -> np.ndarray:
        arr = slot_array(pages)
        why = self.ledger.private_and_distinct(arr)
        if why is not None:
            raise InvalidSlotsError(f"group {self.index} {what}: pages must be distinct private pages from alloc(): {why}")
        return arr


def _no_eviction(n: int) -> list[int]:
    raise OutOfSlotsError("unreachable: pages were made free before take")
