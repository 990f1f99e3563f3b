"""Locks by holder on a RadixTree: a locked node and all its ancestors cannot be evicted.

    lock(node) adds 1 to lock_ref of node and every ancestor; a node with lock_ref > 0 is protected.
    user_locks / seq_locks count lock()/unlock() callers and open Sequences holding exactly this node.

Part of the radix index (only radix/ writes nodes): these walks change lock counts, the tree's
evictable / protected counters and its device index, through the tree's primitives where it has them.
Each costs the nodes it walks: lock and unlock the depth, move_lock only the nodes between old and new.
"""

from __future__ import annotations

from radixkv.errors import LockError
from radixkv.radix import residency
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree
from radixkv.radix.types import USER


def lock(tree: RadixTree, node: TreeNode, holder: int) -> None:
    """Protect `node` (one of `tree`'s: the facade's tree.check_node) and its ancestors; `holder`
    is USER or SEQUENCE. LockError (nothing changed) for a node no longer on the device."""
    if node.evicted or node.pages is None:
        raise LockError(f"cannot lock {node}: it is no longer on the device; match_prefix again")
    if holder == USER:
        node.user_locks += 1
    else:
        node.seq_locks += 1
    if not node.lock_ref:
        tree.index.discard(node)  # only the bottom node can be a leaf: ancestors have it as a child
    moved, root = 0, node
    x: TreeNode | None = node
    while x is not None:
        if not x.lock_ref:
            moved += x.size
        x.lock_ref += 1
        root, x = x, x.parent
    tree.evictable_size -= moved
    tree.protected_size += moved
    tree.hold_root(root)

def unlock(tree: RadixTree, node: TreeNode, holder: int) -> None:
    """Undo one lock of `node` (one of `tree`'s) by `holder`. LockError (nothing changed) when that
    holder has none."""
    if (node.user_locks if holder == USER else node.seq_locks) == 0:
        who = "lock(node)" if holder == USER else "an open Sequence"
        raise LockError(f"unlock of {node} without a matching {who}: a node is released only by "
                        "whoever locked it (a Sequence's lock only by close())")
    if holder == USER:
        node.user_locks -= 1
    else:
        node.seq_locks -= 1
    moved, root = 0, node
    x: TreeNode | None = node
    while x is not None:
        x.lock_ref -= 1
        if not x.lock_ref:
            moved += x.size
        root, x = x, x.parent
    tree.protected_size -= moved
    tree.evictable_size += moved
    if not node.lock_ref:
        residency.reindex(tree, node)
    tree.release_root_if_idle(root)

def move_lock(tree: RadixTree, old: TreeNode, new: TreeNode, holder: int) -> None:
    """Move one lock of `holder` from `old` down to its descendant `new` (a Sequence whose
    committed prefix grew). Ancestors of `old` keep their counts, so this costs the nodes
    between the two, not the depth: a decode step at page_size 1 stays O(1)."""
    if new is old:
        return
    if holder == USER:
        old.user_locks -= 1
        new.user_locks += 1
    else:
        old.seq_locks -= 1
        new.seq_locks += 1
    if not new.lock_ref:
        tree.index.discard(new)
    moved, x = 0, new
    while x is not old:
        if not x.lock_ref:
            moved += x.size
        x.lock_ref += 1
        parent = x.parent
        assert parent is not None  # `old` is an ancestor of `new`
        x = parent
    tree.evictable_size -= moved
    tree.protected_size += moved
