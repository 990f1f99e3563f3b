"""check_tree: recompute everything the tree keeps incrementally and compare.

Walks every node of every namespace; never trusts a counter it is checking.
"""

from __future__ import annotations

import numpy as np

from radixkv.eviction import EvictableIndex
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree
from radixkv.runs import count, expand, well_formed


def _fail(msg: str, node: TreeNode) -> None:
    raise AssertionError(f"radix tree: {msg}: {node}")


def _check_edge(tree: RadixTree, node: TreeNode) -> None:
    pb, parent = tree.page_bytes, node.parent
    if parent is None:
        _fail("a namespace root is checked as an edge", node)
        return
    if node.evicted or (node.pages is None and node.host_pages is None):
        _fail("a node no tier holds is still linked", node)
    if node.tree is not tree or not node.key or len(node.key) % pb or node.size * 4 != len(node.key):
        _fail("edge is foreign, empty, not page-aligned or mis-sized", node)
    if parent.children.get(node.key[:pb]) is not node:
        _fail("parent does not file this node under its first page", node)
    if node.depth != parent.end or node.ns != parent.ns:
        _fail("depth or namespace disagrees with the parent", node)
    if node.pages is not None and parent.parent is not None and parent.pages is None:
        _fail("device residency is not prefix-closed", node)
    if node.lock_ref and node.pages is None:
        _fail("a locked node is not on the device", node)
    if node.pages is not None and not well_formed(node.pages, node.size // tree.page_size):
        _fail("device pages must be runs (a list of ints, lengths > 0) of one page per page of the edge", node)
    host = node.host_pages
    if host is not None and (host.dtype != np.int64 or len(host) != node.size // tree.page_size):
        _fail("host pages must be int64, one per page of the edge", node)
    if len(node.secondary) != len(tree.group_index):
        _fail("one component per secondary layer group", node)
    for pages in node.secondary:
        if pages is not None and (node.pages is None or pages.dtype != np.int64 or not len(pages)):
            _fail("a secondary component without full KV on the device, or not int64 pages", node)


def _unique(chunks: list[np.ndarray], what: str) -> np.ndarray:
    pages = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
    if len(np.unique(pages)) != len(pages):
        raise AssertionError(f"radix tree: a {what} page is owned by two nodes")
    return pages


def _check_index(index: EvictableIndex, members: set[int], what: str, key=None) -> None:  # noqa: ANN001
    if {n.id for n in index.nodes()} != members:
        raise AssertionError(f"radix tree: {what} index != recomputed {what} leaves")
    index.check()
    if key is not None:  # stable keys: every stored key is what the policy says now
        for n in index.nodes():
            if index.current_key(n) != key(n):
                _fail(f"stale key in the {what} index", n)


def _check_roots(tree: RadixTree) -> None:
    for ns, root in tree.roots.items():
        if root.parent is not None or root.key or root.ns != ns or root.tree is not tree or root.evicted:
            _fail("a namespace root is malformed", root)
        if not root.children and not root.lock_ref:
            _fail("an idle root (no children, no locks) is still registered", root)


def check_tree(tree: RadixTree) -> tuple[np.ndarray, np.ndarray]:
    """Raise AssertionError on any inconsistency; return (device pages, host pages) of all nodes."""
    _check_roots(tree)
    evictable = protected = host = 0
    leaves, host_leaves = set(), set()
    chunks, host_chunks = [], []
    for node in tree.nodes():
        below = sum(c.lock_ref for c in node.children.values())
        own = node.user_locks + node.seq_locks
        if node.lock_ref != own + below or node.user_locks < 0 or node.seq_locks < 0:
            _fail(f"lock_ref {node.lock_ref} != own {own} + children {below}", node)
        if node.parent is None:
            continue
        _check_edge(tree, node)
        if node.pages is not None:
            chunks.append(expand(node.pages, count(node.pages)))
            protected += node.size if node.lock_ref else 0
            evictable += 0 if node.lock_ref else node.size
            if not node.lock_ref and all(c.pages is None for c in node.children.values()):
                leaves.add(node.id)
        if node.host_pages is not None:
            host_chunks.append(node.host_pages)
            host += node.size
            if all(c.host_pages is None for c in node.children.values()):
                host_leaves.add(node.id)
    got = (tree.evictable_size, tree.protected_size, tree.host_size)
    if got != (evictable, protected, host):
        raise AssertionError(f"radix tree: counters (evictable, protected, host) {got} "
                             f"!= recomputed {(evictable, protected, host)}")
    for g, index in enumerate(tree.group_index):
        members = {n.id for n in tree.nodes() if n.parent is not None and n.secondary[g] is not None}
        _check_index(index, members, f"group {g + 1}", index.key if tree.policy.stable_keys else None)
        _unique([pages for n in tree.nodes() if n.parent is not None and (pages := n.secondary[g]) is not None],
                f"group {g + 1}")
    fixed = tree.policy.stable_keys
    _check_index(tree.index, leaves, "device", tree.index.key if fixed else None)
    if tree.host_index is not None:
        _check_index(tree.host_index, host_leaves, "host", tree.host_index.key if fixed else None)
    elif host_chunks:
        raise AssertionError("radix tree: host copies without a host tier")
    return _unique(chunks, "device"), _unique(host_chunks, "host")
