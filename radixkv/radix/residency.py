"""Residency primitives of a RadixTree: where a node's copies live, and the counters, evictable
indexes, pins and event listener that follow from it.

Part of the radix index (only radix/ writes nodes). Every residency change (a node gains or loses
its device KV or host copy, or leaves the tree) goes through one of these functions, which keep in
step the tree's counters (`evictable_size`, `host_size`), its indexes (radix/tree.py's table:
device leaves, host leaves, per-group components), pins (told of drops) and the KV-event listener.
Eviction walks (radix/evict.py), locks (radix/locks.py), insert and the host tier call them.
"""

from __future__ import annotations

import numpy as np

from radixkv.eviction import EvictableIndex
from radixkv.radix.components import drop_component
from radixkv.radix.core import TreeCore, unlink_child
from radixkv.radix.node import TreeNode
from radixkv.radix.types import DEVICE, HOST, PinKeeper, ResidencyListener


class ResidentTree(TreeCore[TreeNode]):
    """What these functions read and write of a tree: radix/tree.py's RadixTree is this class plus
    its lookups, inserts and policy hooks. A base class, not a Protocol, so that compiled, every
    field below is a struct read (a Protocol's fields are a generic getattr each)."""

    index: EvictableIndex[TreeNode]  # device leaves (radix/tree.py's table)
    host_index: EvictableIndex[TreeNode] | None  # host leaves, with a host tier
    group_index: tuple[EvictableIndex[TreeNode], ...]  # per secondary group, the nodes holding a component
    listener: ResidencyListener | None  # KV events
    pins: PinKeeper | None  # pins with a deadline (radix/pins.py), once there are any
    evictable_size: int
    protected_size: int
    host_size: int

    def release_root_if_idle(self, root: TreeNode) -> None:
        raise NotImplementedError


def reindex(tree: ResidentTree, node: TreeNode | None) -> None:
    """Recompute `node`'s membership of both evictable indexes (None, a root's parent: nothing)."""
    if node is None or node.parent is None:
        return
    children = node.children  # (a leaf's, NO_CHILDREN, not iterated: its values() would be a generic call, compiled)
    tree.index.set(node, node.pages is not None and not node.lock_ref
                   and not (children and any(c.pages is not None for c in children.values())))
    if tree.host_index is not None:
        tree.host_index.set(node, node.host_pages is not None
                            and not (children and any(c.host_pages is not None for c in children.values())))


def device_changed(tree: ResidentTree, node: TreeNode) -> None:
    """`node` gained or lost its device copy: its and its parent's index membership may
    change, and so does its host-index key (host-only nodes go first)."""
    reindex(tree, node)
    reindex(tree, node.parent)
    if tree.host_index is not None:
        tree.host_index.refresh(node)


def gain_device(tree: ResidentTree, nodes: list[TreeNode]) -> None:
    """`nodes` (unlocked, parents first) just got device pages."""
    for node in nodes:
        tree.evictable_size += node.size
        if node.children or tree.host_index is not None:
            device_changed(tree, node)
        else:  # a new leaf: the common case, without scanning siblings
            tree.index.add(node)
            parent = node.parent
            assert parent is not None  # nodes that gain pages are below a root
            tree.index.discard(parent)
        if tree.listener is not None:
            tree.listener.stored(node, DEVICE)


def drop_device(tree: ResidentTree, node: TreeNode) -> list[np.ndarray | None]:
    """`node` (unlocked, no device child) loses its device KV, secondary components included;
    returns those components' pages per secondary group (None: it had none)."""
    if tree.listener is not None:
        tree.listener.removed(node, DEVICE)
    tree.evictable_size -= node.size
    if tree.pins is not None:
        tree.pins.dropped(node)
    node.pages = None
    if not tree.group_index:
        return []
    return [drop_component(tree.group_index, node, g) for g in range(1, len(tree.group_index) + 1)]


def set_host(tree: ResidentTree, node: TreeNode, host_pages: np.ndarray) -> None:
    """`node` now has a host copy in `host_pages` (int64, one per page; the KV is copied)."""
    node.host_pages = host_pages
    tree.host_size += node.size
    reindex(tree, node)
    reindex(tree, node.parent)
    if tree.listener is not None:
        tree.listener.stored(node, HOST)


def lose_host(tree: ResidentTree, node: TreeNode) -> None:
    if tree.listener is not None:
        tree.listener.removed(node, HOST)
    tree.host_size -= node.size
    node.host_pages = None
    reindex(tree, node)
    reindex(tree, node.parent)


def unlink(tree: ResidentTree, node: TreeNode) -> None:
    """Remove a node that no tier holds any more (it has no children)."""
    tree.index.discard(node)
    if tree.host_index is not None:
        tree.host_index.discard(node)
    parent = node.parent
    assert parent is not None  # a root is never unlinked
    unlink_child(parent, node.key[:tree.page_bytes])
    node.evicted = True
    reindex(tree, parent)
    if parent.parent is None:
        tree.release_root_if_idle(parent)
