"""check_tree: recompute everything the tree keeps incrementally and compare.

Walks every node of every namespace; never trusts a counter it is checking.
"""

from __future__ import annotations

import numpy as np

from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree


def _fail(msg: str, node: TreeNode) -> None:
    raise AssertionError(f"radix tree: {msg}: {node}")


def _check_edge(tree: RadixTree, node: TreeNode) -> None:
    ps, parent = tree.page_size, node.parent
    if node.evicted:
        _fail("an evicted node is still linked", node)
    if len(node.key) == 0 or len(node.key) % ps or len(node.slots) != len(node.key):
        _fail("edge is empty, not page-aligned, or its slots do not match its key", node)
    if node.key.dtype != np.int32 or node.slots.dtype != np.int64:
        _fail("key must be int32 and slots int64", node)
    if parent.children.get(node.key[:ps].tobytes()) is not node:
        _fail("parent does not file this node under its first page", node)
    if node.depth != parent.depth + len(parent.key) or node.namespace != parent.namespace:
        _fail("depth or namespace disagrees with the parent", node)
    pages = node.slots.reshape(-1, ps)
    if (pages[:, 0] % ps).any() or (pages != pages[:, :1] + np.arange(ps)).any():
        _fail("slots are not whole pages in order", node)


def check_tree(tree: RadixTree) -> np.ndarray:
    """Raise AssertionError on any inconsistency; return every cached slot (int64, unchunked)."""
    evictable = protected = 0
    leaves: set[int] = set()
    chunks: list[np.ndarray] = []
    for namespace, root in tree.roots.items():
        if root.parent is not None or len(root.key) or root.namespace != namespace:
            _fail("a namespace root is malformed", root)
    for node in tree.nodes():
        below = sum(c.lock_ref for c in node.children.values())
        if node.lock_ref != node.own_locks + below or node.own_locks < 0:
            _fail(f"lock_ref {node.lock_ref} != own {node.own_locks} + children {below}", node)
        if node.parent is None:
            continue
        _check_edge(tree, node)
        chunks.append(node.slots)
        if node.lock_ref:
            protected += len(node)
        else:
            evictable += len(node)
            if not node.children:
                leaves.add(node.id)
    if (evictable, protected) != (tree.evictable_size, tree.protected_size):
        raise AssertionError(f"radix tree: counters (evictable {tree.evictable_size}, protected "
                             f"{tree.protected_size}) != recomputed ({evictable}, {protected})")
    if {n.id for n in tree.index.nodes()} != leaves:
        raise AssertionError("radix tree: evictable index != unlocked leaves")
    tree.index.check()
    if getattr(tree.policy, "stateless", False):
        for n in tree.index.nodes():
            if n.index_key != tree.policy.key(n):
                _fail("stale key in the evictable index", n)
    slots = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
    if len(np.unique(slots)) != len(slots):
        raise AssertionError("radix tree: a slot is owned by two nodes")
    return slots
