"""TreeNode: one edge of the radix tree, holding a page-aligned run of tokens and their slots.

Residency: a node's KV is on the device (`slots`), on the host tier (`host_slots`), or both;
never neither. Device-resident nodes form a prefix-closed set (a node's parent is on the device
whenever it is), so a device match is a path from the root that stops at the first host-only node.

A node means the whole prefix from its namespace's root to its end. When an edge is split, the
lower half keeps the node object (as in SGLang), so a node keeps meaning the same prefix; a new
node takes the upper half. Keys and slots are compact numpy arrays, never per-token objects.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np


class TreeNode:
    __slots__ = ("id", "namespace", "parent", "children", "key", "slots", "host_slots", "depth",
                 "lock_ref", "own_locks", "last_access", "created", "hit_count", "priority",
                 "index_key", "host_index_key", "block_hashes", "evicted")

    def __init__(self, node_id: int, namespace: Hashable, parent: TreeNode | None,
                 key: np.ndarray, slots: np.ndarray, tick: int) -> None:
        self.id = node_id
        self.namespace = namespace
        self.parent = parent
        self.children: dict[bytes, TreeNode] = {}  # first page of the child's key (bytes) -> child
        self.key = key  # int32 [n]: token ids of this edge, n a multiple of page_size
        self.slots: np.ndarray | None = slots  # int64 [n]: device KV slot per token; None: host only
        self.host_slots: np.ndarray | None = None  # int64 [n]: host-tier copy, if any
        self.depth = 0 if parent is None else parent.depth + len(parent.key)  # tokens above this edge
        self.lock_ref = 0  # locks on this node or any descendant: >0 means protected
        self.own_locks = 0  # lock() calls on exactly this node not yet unlocked
        self.last_access = tick  # logical clock of the last match/insert that touched it
        self.created = tick
        self.hit_count = 0  # matches that went through this node
        self.priority = 0  # max priority of the requests that inserted it
        self.index_key: tuple | None = None  # key in the device evictable index while indexed
        self.host_index_key: tuple | None = None  # key in the host evictable index while indexed
        self.block_hashes: list[int] | None = None  # KV-event hashes of blocks ending in this edge (lazy)
        self.evicted = False  # removed from the tree: neither tier holds it any more

    def __len__(self) -> int:
        return len(self.key)

    @property
    def on_device(self) -> bool:
        return self.slots is not None

    @property
    def end(self) -> int:
        """Tokens from the root to the end of this edge."""
        return self.depth + len(self.key)

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, ns={self.namespace!r}, depth={self.depth}, len={len(self.key)}, "
                f"lock_ref={self.lock_ref}, children={len(self.children)})")
