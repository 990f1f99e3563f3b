"""check_tree: recompute everything the tree keeps incrementally and compare.

Walks every node of every namespace; never trusts a counter it is checking.
"""

from __future__ import annotations

import numpy as np

from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree


def _fail(msg: str, node: TreeNode) -> None:
    raise AssertionError(f"radix tree: {msg}: {node}")


def _check_pages(slots: np.ndarray, ps: int, node: TreeNode) -> None:
    if slots.dtype != np.int64 or len(slots) != len(node.key):
        _fail("slots must be int64, one per token", node)
    pages = slots.reshape(-1, ps)
    if (pages[:, 0] % ps).any() or (pages != pages[:, :1] + np.arange(ps)).any():
        _fail("slots are not whole pages in order", node)


def _check_edge(tree: RadixTree, node: TreeNode) -> None:
    ps, parent = tree.page_size, node.parent
    if node.evicted or (node.slots is None and node.host_slots is None):
        _fail("a node no tier holds is still linked", node)
    if len(node.key) == 0 or len(node.key) % ps or node.key.dtype != np.int32:
        _fail("edge is empty, not page-aligned, or not int32", node)
    if parent.children.get(node.key[:ps].tobytes()) is not node:
        _fail("parent does not file this node under its first page", node)
    if node.depth != parent.depth + len(parent.key) or node.namespace != parent.namespace:
        _fail("depth or namespace disagrees with the parent", node)
    if node.slots is not None and parent.parent is not None and parent.slots is None:
        _fail("device residency is not prefix-closed", node)
    if node.lock_ref and node.slots is None:
        _fail("a locked node is not on the device", node)
    for slots in (node.slots, node.host_slots):
        if slots is not None:
            _check_pages(slots, ps, node)


def _unique(chunks: list[np.ndarray], what: str) -> np.ndarray:
    slots = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
    if len(np.unique(slots)) != len(slots):
        raise AssertionError(f"radix tree: a {what} slot is owned by two nodes")
    return slots


def _check_index(index, members: set[int], what: str) -> None:
    if {n.id for n in index.nodes()} != members:
        raise AssertionError(f"radix tree: {what} index != recomputed {what} leaves")
    index.check()
    if getattr(index.policy, "stateless", False):
        for n in index.nodes():
            if getattr(n, index.attr) != index.policy.key(n):
                _fail(f"stale key in the {what} index", n)


def check_tree(tree: RadixTree) -> tuple[np.ndarray, np.ndarray]:
    """Raise AssertionError on any inconsistency; return (device slots, host slots) of all nodes."""
    evictable = protected = host = 0
    leaves, host_leaves = set(), set()
    chunks, host_chunks = [], []
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
        if node.slots is not None:
            chunks.append(node.slots)
            protected += len(node) if node.lock_ref else 0
            evictable += 0 if node.lock_ref else len(node)
            if not node.lock_ref and all(c.slots is None for c in node.children.values()):
                leaves.add(node.id)
        if node.host_slots is not None:
            host_chunks.append(node.host_slots)
            host += len(node)
            if all(c.host_slots is None for c in node.children.values()):
                host_leaves.add(node.id)
    got = (tree.evictable_size, tree.protected_size, tree.host_size)
    if got != (evictable, protected, host):
        raise AssertionError(f"radix tree: counters (evictable, protected, host) {got} "
                             f"!= recomputed {(evictable, protected, host)}")
    _check_index(tree.index, leaves, "device")
    if tree.host_index is not None:
        _check_index(tree.host_index, host_leaves, "host")
    elif host_chunks:
        raise AssertionError("radix tree: host copies without a host tier")
    return _unique(chunks, "device"), _unique(host_chunks, "host")
