"""TreeNode: one edge of the radix tree, holding a page-aligned run of tokens and their pages.

An edge's tokens are kept as `bytes` (int32, little-endian): a child is found by the bytes of its
first page and an edge is compared with one `startswith` (a C memcmp, no array objects on the way).
Its KV is kept as page ids (int64, one per page; at page_size 1 a page is a slot): on the device
(`pages`), on the host tier (`host_pages`), or both; never neither. Device-resident nodes form a
prefix-closed set (a node's parent is on the device whenever it is), so a device match is a path
from the root that stops at the first host-only node.

A node means the whole prefix from its namespace's root to its end. When an edge is split, the
lower half keeps the node object (as in SGLang), so a node keeps meaning the same prefix; a new
node takes the upper half. Nodes are written only by the radix tree (radix/tree.py); read them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class TreeView(Protocol):
    """What a node's owning tree shows the code that holds only the node (a learning eviction policy
    sizing its shadows): radix/tree.py's RadixTree, typed here so that no eviction module imports it."""

    page_size: int
    evictable_size: int  # tokens
    protected_size: int  # tokens

    def nodes(self) -> list[TreeNode]: ...


class TreeNode:
    __slots__ = ("id", "tree", "ns", "parent", "children", "key", "size", "pages", "host_pages", "depth",
                 "lock_ref", "user_locks", "seq_locks", "last_access", "created", "hit_count", "priority",
                 "evicted", "pin_until", "__weakref__")

    def __init__(self, tree: TreeView, node_id: int, ns: bytes, parent: TreeNode | None, key: bytes,
                 pages: np.ndarray | None, tick: int) -> None:
        self.id = node_id
        self.tree = tree  # the owning tree: a node of another cache is rejected, never used
        self.ns = ns  # canonical namespace key (radixkv.keys)
        self.parent = parent
        self.children: dict[bytes, TreeNode] = {}  # first page of the child's key -> child
        self.key = key  # int32 little-endian token ids of this edge, a whole number of pages
        self.size = len(key) // 4  # tokens on this edge
        self.pages = pages  # int64 [size // page_size]: device pages; None: host only
        self.host_pages: np.ndarray | None = None  # int64 [size // page_size]: host-tier copy, if any
        self.depth = 0 if parent is None else parent.depth + parent.size  # tokens above this edge
        self.lock_ref = 0  # locks on this node or any descendant: > 0 means protected
        self.user_locks = 0  # lock() calls on exactly this node not yet unlocked
        self.seq_locks = 0  # open Sequences whose committed prefix ends exactly here
        self.last_access = tick  # logical clock of the last match/insert that touched it
        self.created = tick
        self.hit_count = 0  # matches that went through this node
        self.priority = 0  # max priority of the requests that inserted it
        self.evicted = False  # removed from the tree: neither tier holds it any more
        self.pin_until = 0.0  # pinned (kept past unpinned leaves) until this clock time; 0: not pinned

    def __len__(self) -> int:
        return self.size

    @property
    def end(self) -> int:
        """Tokens from the root to the end of this edge."""
        return self.depth + self.size

    def tokens(self) -> np.ndarray:
        """int32 `[size]`, read-only: this edge's token ids."""
        return np.frombuffer(self.key, dtype=np.int32)

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, depth={self.depth}, len={self.size}, lock_ref={self.lock_ref}, "
                f"children={len(self.children)}{', evicted' if self.evicted else ''})")
