"""TreeNode: one edge of the index, a PrefixNode (radix/core.py) plus where its KV lives and who locks it.

An edge's tokens are kept as `bytes` (int32, little-endian): a child is found by the bytes of its
first page and an edge is compared with one `startswith` (a C memcmp, no array objects on the way).

A node means the whole prefix from its namespace's root to its end. When an edge is split, the
lower half keeps the node object (as in SGLang), so a node keeps meaning the same prefix; a new
node takes the upper half. Nodes are written only by the radix tree (radix/tree.py); read them.

Components: one per layer group (the interface hybrid models build on)
----------------------------------------------------------------------
A model's layers fall into groups by the KV they keep: full attention, sliding-window attention,
recurrent state. Each group has its own page pool and PageLedger (its memory priced on its own);
the tree says, per node, which pages of each group hold the node's tokens:

    group 0 (primary)     `pages` (device): full KV of every token of the edge, its page ids as
                          runs (radixkv/runs.py: a few ints where an array kept 4 bytes a page);
                          `host_pages` (host tier): int64, one page id per page. Never a tombstone: a node on
                          the device has its full KV; when it goes, the node goes (or stays
                          host-only), and every secondary component goes with it.
    group g >= 1          `secondary[g - 1]`: int64 page ids of group g's pool for this edge
    (secondary)           (sliding-window KV pages: one per page of the edge; a recurrent-state
                          snapshot: one slot, for the state after the edge's last token), or None:
                          a tombstone. A tombstoned node still matches; a hybrid model's match
                          stops where a component it needs is a tombstone (vLLM's fixed point).

Invariants (check_tree): len(secondary) == the tree's secondary group count; a secondary component
exists only on a node with device KV; its pages are int64 and no page of a group is held by two
nodes; by default a lock protects every component of a locked path (a window group protects only
the last W tokens before each lock: radix/windows.py, cache_windows.py).
Calls (radix/components.py, radix/evict.py), `groups` being `tree.group_index`:
`set_component(groups, node, g, pages)` gives a device node group g's pages;
`drop_component(groups, node, g)` tombstones it and returns the pages;
`evict_secondary(tree, g, n)` (= `secondary_victims` to plan, read only, then `drop_victims`) drops
group g's components of unprotected nodes, policy order, before any full KV goes; device eviction
returns the secondary pages of the nodes it drops (`Evicted.secondary`, per group).
Owner of the pages: RadixCache builds the tree with `secondary_groups=len(config.groups)` and one
PageLedger per group (cache_groups.py: `cache.group(g)` allocates, attaches a component to a node,
reads one at a match, evicts), and gives each group's pages back to its own ledger on eviction.
A model with one group (full KV) has an empty `secondary` (one list all its nodes share) and
nothing of this runs.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from radixkv.eviction.view import TreeView
from radixkv.radix.core import PrefixNode


class GroupListener(Protocol):
    """Who hears of secondary components (radix/types.py's ResidencyListener is one)."""

    def attached(self, node: TreeNode, group: int) -> None: ...

    def detached(self, node: TreeNode, group: int) -> None: ...


class NodeOwner(TreeView, Protocol):
    """A node's tree as the node's own modules and the policies' hooks see it (RadixTree is one;
    named here, not imported, so that node.py needs nothing of tree.py: no import cycle)."""

    @property
    def listener(self) -> GroupListener | None: ...

# The components of a node when the tree has no secondary groups: shared and empty (writing
# `secondary[g]` into it raises IndexError; a tree with groups gives each node its own list).
_NO_GROUPS: list[np.ndarray | None] = []


class TreeNode(PrefixNode["TreeNode"]):
    __slots__ = ("tree", "pages", "host_pages", "secondary", "lock_ref", "user_locks", "seq_locks", "evicted",
                 "__weakref__")

    def __init__(self, tree: NodeOwner, node_id: int, ns: bytes, parent: TreeNode | None, key: bytes,
                 tick: int) -> None:
        PrefixNode.__init__(self, node_id, ns, parent, key, tick)
        self.tree = tree  # the owning tree: a node of another tree is rejected, never used
        self.pages: list[int] | None = None  # device full KV, size // page_size pages as runs; None: host only
        self.host_pages: np.ndarray | None = None  # int64 [size // page_size]: host-tier copy, if any
        self.secondary: list[np.ndarray | None] = _NO_GROUPS  # secondary group components (module docstring); None: tombstone
        self.lock_ref = 0  # locks on this node or any descendant: > 0 means protected
        self.user_locks = 0  # lock() calls on exactly this node not yet unlocked
        self.seq_locks = 0  # open Sequences whose committed prefix ends exactly here
        self.evicted = False  # removed from the tree: neither tier holds it any more

    def tokens(self) -> np.ndarray:
        """int32 `[size]`, read-only: this edge's token ids."""
        return np.frombuffer(self.key, dtype=np.int32)

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, depth={self.depth}, len={self.size}, lock_ref={self.lock_ref}, "
                f"children={len(self.children)}{', evicted' if self.evicted else ''})")
