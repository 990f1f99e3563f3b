"""TreeNode: one edge of the radix tree, holding a page-aligned run of tokens and their slots.

A node means the whole prefix from its namespace's root to its end. When an edge is split, the
lower half keeps the node object (as in SGLang), so a node keeps meaning the same prefix; a new
node takes the upper half. Keys and slots are compact numpy arrays, never per-token objects.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np


class TreeNode:
    __slots__ = ("id", "namespace", "parent", "children", "key", "slots", "depth",
                 "lock_ref", "own_locks", "last_access", "created", "hit_count", "priority",
                 "index_key", "evicted")

    def __init__(self, node_id: int, namespace: Hashable, parent: TreeNode | None,
                 key: np.ndarray, slots: np.ndarray, tick: int) -> None:
        self.id = node_id
        self.namespace = namespace
        self.parent = parent
        self.children: dict[bytes, TreeNode] = {}  # first page of the child's key (bytes) -> child
        self.key = key  # int32 [n]: token ids of this edge, n a multiple of page_size
        self.slots = slots  # int64 [n]: KV slot of each token of this edge
        self.depth = 0 if parent is None else parent.depth + len(parent.key)  # tokens above this edge
        self.lock_ref = 0  # locks on this node or any descendant: >0 means protected
        self.own_locks = 0  # lock() calls on exactly this node not yet unlocked
        self.last_access = tick  # logical clock of the last match/insert that touched it
        self.created = tick
        self.hit_count = 0  # matches that went through this node
        self.priority = 0  # max priority of the requests that inserted it
        self.index_key: tuple | None = None  # key in the evictable index while indexed
        self.evicted = False

    def __len__(self) -> int:
        return len(self.key)

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def end(self) -> int:
        """Tokens from the root to the end of this edge."""
        return self.depth + len(self.key)

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, ns={self.namespace!r}, depth={self.depth}, len={len(self.key)}, "
                f"lock_ref={self.lock_ref}, children={len(self.children)})")
