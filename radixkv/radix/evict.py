"""Eviction walks over a RadixTree: which nodes lose which copy, in the policy's order.

Device eviction takes the device leaf with the smallest policy key; when fewer tokens are needed
than it holds, the leaf is split and only its tail pages go (SGLang drops whole leaves). A victim
with a host copy, or one the caller's `keep` makes now (write-back), stays in the tree as
host-only; any other victim is removed with its subtree, whose nodes are all host-only. Host
eviction takes host-only leaves first (removing them), then host copies of device nodes (keeping
the node). Both return the pages they let go; the caller gives them back to their allocator.
Every change to a node goes through the tree's residency primitives.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree

_EMPTY = np.empty(0, dtype=np.int64)


def evict_device(tree: RadixTree, num_tokens: int, keep: Callable[[TreeNode], np.ndarray | None] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Free at least `num_tokens` unlocked device tokens if that many exist; a victim larger than
    the remaining need loses only its tail pages. `keep(victim)` may return host pages now holding
    a copy of the victim's KV, which then stays as host-only. Returns (device pages freed, host
    pages freed by removing host-only subtrees), int64."""
    ps, freed, chunks, host_chunks = tree.page_size, 0, [], []
    while freed < num_tokens:
        leaf = tree.pop_victim()
        if leaf is None:
            break
        keep_tokens = leaf.size - -(-(num_tokens - freed) // ps) * ps
        if keep_tokens > 0:
            tree.split(leaf, keep_tokens)  # the upper part stays cached as a new node
        chunks.append(leaf.pages)
        freed += leaf.size
        tree.evicted(leaf)
        if leaf.host_pages is None and keep is not None:
            host_pages = keep(leaf)
            if host_pages is not None:
                tree.set_host(leaf, host_pages)
        tree.drop_device(leaf)
        if leaf.host_pages is not None:  # host-only from now on
            tree.device_changed(leaf)
        else:
            _remove_subtree(tree, leaf, host_chunks)
    return _cat(chunks), _cat(host_chunks)


def _remove_subtree(tree: RadixTree, node: TreeNode, host_chunks: list[np.ndarray]) -> None:
    below = [node]
    for n in below:
        below.extend(n.children.values())
    for n in reversed(below):  # children first, so each is a leaf when unlinked
        if n.host_pages is not None:
            host_chunks.append(n.host_pages)
            tree.lose_host(n)
        tree.unlink(n)


def evict_host(tree: RadixTree, num_tokens: int) -> np.ndarray:
    """Free at least `num_tokens` host-tier tokens if that many exist: host-only leaves first (the
    node goes), then host copies of device nodes (the node stays). Returns host pages, int64."""
    freed, chunks = 0, []
    while freed < num_tokens:
        victim = tree.pop_host_victim()
        if victim is None:
            break
        chunks.append(victim.host_pages)
        freed += victim.size
        tree.lose_host(victim)
        if victim.pages is None:
            tree.unlink(victim)
    return _cat(chunks)


def _cat(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks) if chunks else _EMPTY
