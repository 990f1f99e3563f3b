"""Eviction walks over a RadixTree: which nodes lose which copy, in the policy's order.

Device eviction takes the device leaf with the smallest policy key; when fewer tokens are needed
than it holds, the leaf is split and only its tail pages go (SGLang drops whole leaves). A victim
with a host copy, or one the caller's `keep` makes now (write-back), stays in the tree as
host-only; any other victim is removed with its subtree, whose nodes are all host-only. Host
eviction takes host-only leaves first (removing them), then host copies of device nodes (keeping
the node). Secondary layer groups (radix/node.py) go first where asked: `evict_secondary` tombstones group g's
components of unlocked nodes, policy order, and leaves full KV alone; a node that loses its full KV
loses its secondary components with it. Every walk returns the pages it let go, per pool; the
caller gives them back to their ledgers. Every change to a node goes through the tree's residency
primitives.
"""

from __future__ import annotations

from typing import Callable, Final, NamedTuple

import numpy as np

from radixkv.radix import residency
from radixkv.radix.components import drop_component
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree

_EMPTY: Final = np.empty(0, dtype=np.int64)  # (Final: compiled, a C static, not a module-dict lookup)
_concatenate: Final = np.concatenate


class Evicted(NamedTuple):
    pages: list[int]  # device pages (group 0) freed, as runs (radixkv/runs.py; a new list)
    host_pages: np.ndarray  # int64: host pages freed by removing host-only subtrees
    secondary: tuple[np.ndarray, ...]  # int64 per secondary group: its pages freed with the dropped nodes


def evict_device(tree: RadixTree, num_tokens: int, keep: Callable[[TreeNode], np.ndarray | None] | None = None
                 ) -> Evicted:
    """Free at least `num_tokens` unlocked device tokens if that many exist; a victim larger than
    the remaining need loses only its tail pages. `keep(victim)` may return host pages now holding
    a copy of the victim's KV, which then stays as host-only."""
    ps, freed = tree.page_size, 0
    runs: list[int] = []
    host_chunks: list[np.ndarray] = []
    groups: list[list[np.ndarray]] = [[] for _ in tree.group_index] if tree.group_index else []
    index = tree.index  # device leaves, the policy's victim first
    while freed < num_tokens and len(index):
        leaf = index.pop()
        keep_tokens = leaf.size - -(-(num_tokens - freed) // ps) * ps
        if keep_tokens > 0:
            tree.split(leaf, keep_tokens)  # the upper part stays cached as a new node
        assert leaf.pages is not None  # the device index holds device nodes only
        runs += leaf.pages
        freed += leaf.size
        tree.evicted(leaf)
        if leaf.host_pages is None and keep is not None:
            host_pages = keep(leaf)
            if host_pages is not None:
                residency.set_host(tree, leaf, host_pages)
        dropped = residency.drop_device(tree, leaf)
        if dropped:
            for g, pages in enumerate(dropped):
                if pages is not None:
                    groups[g].append(pages)
        if leaf.host_pages is not None:  # host-only from now on
            residency.device_changed(tree, leaf)
        else:
            _remove_subtree(tree, leaf, host_chunks)
    secondary = tuple(map(_cat, groups)) if groups else ()
    return tuple.__new__(Evicted, (runs, _cat(host_chunks), secondary))  # no Python-level __new__


def evict_secondary(tree: RadixTree, group: int, num_pages: int,
                    protected: Callable[[TreeNode], int] | None = None) -> np.ndarray:
    """Free at least `num_pages` of secondary group `group`'s pages if unprotected components hold
    that many (else all they hold), policy order, tombstoning components; every node keeps its full
    KV. `protected` as in secondary_victims. Returns int64 pages."""
    return drop_victims(tree, group, secondary_victims(tree, group, num_pages, protected)[0])


def secondary_victims(tree: RadixTree, group: int, num_pages: int, protected: Callable[[TreeNode], int] | None = None
                      ) -> tuple[list[tuple[TreeNode, int]], int]:
    """Read-only: the components evict_secondary would drop, as (node, tokens it keeps), and how
    many pages they free. `protected(node)` says how many trailing tokens of the node's edge must
    keep their component (default: all of a locked node's, none of an unlocked one's); a per-page
    component loses only the rest (drop_victims splits the edge there)."""
    index, ps, g = tree.group_index[group - 1], tree.page_size, group - 1
    plan: list[tuple[TreeNode, int]] = []
    popped: list[TreeNode] = []
    found = 0
    while found < num_pages and len(index):
        node = index.pop()
        popped.append(node)
        keep = (node.size if node.lock_ref else 0) if protected is None else protected(node)
        pages = node.secondary[g]
        if keep < node.size and pages is not None:  # (the group's index holds only nodes with a component)
            plan.append((node, keep))
            found += len(pages) - keep // ps
    for node in popped:  # put back: the index is as it was
        index.add(node)
    return plan, found


def drop_victims(tree: RadixTree, group: int, plan: list[tuple[TreeNode, int]]) -> np.ndarray:
    """Tombstone what secondary_victims planned (nothing changed since); returns int64 pages."""
    chunks: list[np.ndarray] = []
    for node, keep in plan:
        victim = tree.split(node, node.size - keep) if keep else node  # the upper part goes
        pages = drop_component(tree.group_index, victim, group)
        if pages is not None:  # (planned nodes hold a component)
            chunks.append(pages)
    return _cat(chunks)


def _remove_subtree(tree: RadixTree, node: TreeNode, host_chunks: list[np.ndarray]) -> None:
    if not node.children and node.host_pages is None:  # the usual victim: a leaf, held nowhere else
        residency.unlink(tree, node)
        return
    below = [node]
    for n in below:
        below.extend(n.children.values())
    for n in reversed(below):  # children first, so each is a leaf when unlinked
        if n.host_pages is not None:
            host_chunks.append(n.host_pages)
            residency.lose_host(tree, n)
        residency.unlink(tree, n)


def evict_host(tree: RadixTree, num_tokens: int) -> np.ndarray:
    """Free at least `num_tokens` host-tier tokens if that many exist: host-only leaves first (the
    node goes), then host copies of device nodes (the node stays). Returns host pages, int64."""
    freed = 0
    chunks: list[np.ndarray] = []
    index = tree.host_index  # host leaves, host-only ones first
    while freed < num_tokens and index is not None and len(index):
        victim = index.pop()
        assert victim.host_pages is not None  # the host index holds host copies only
        chunks.append(victim.host_pages)
        freed += victim.size
        residency.lose_host(tree, victim)
        if victim.pages is None:
            residency.unlink(tree, victim)
    return _cat(chunks)


def _cat(chunks: list[np.ndarray]) -> np.ndarray:  # (a lone chunk is a dropped node's own array: no copy)
    return (chunks[0] if len(chunks) == 1 else _concatenate(chunks)) if chunks else _EMPTY
