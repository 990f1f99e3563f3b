"""Residency: where each node's KV lives, and eviction from each tier (a mixin of RadixTree).

    device index   nodes on the device, unlocked, with no child on the device     (device leaves)
    host index     nodes with a host copy and no child with one                   (host leaves)

Device eviction takes the device leaf with the smallest policy key; when fewer tokens are needed
than it holds, it is split and only its tail pages go. A victim with a host copy (or one the host
tier can make now, under write-back) stays in the tree as host-only; any other victim is removed
with its subtree (whose nodes are all host-only). Host eviction takes host-only leaves first
(removing them) and then host copies of device nodes (keeping the node). Every residency change
goes through gain_device / _drop_device_copy / set_host / _lose_host, which keep the counters
and the event listener in step; reindex and _device_changed keep the indexes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from radixkv.events import DEVICE, HOST
from radixkv.radix.node import TreeNode

if TYPE_CHECKING:
    from radixkv.radix.tree import RadixTree


class HostBackup(Protocol):
    """The host tier as the tree sees it."""

    def device_gained(self, node: TreeNode) -> None:
        """A node just got device KV (write-through backs it up now)."""

    def keep_on_host(self, node: TreeNode) -> bool:
        """Called before `node`'s device copy goes: True if it has, or now got, a host copy."""


class ResidencyListener(Protocol):
    def stored(self, node: TreeNode, medium: str) -> None: ...

    def removed(self, node: TreeNode, medium: str) -> None: ...


class Residency:
    def reindex(self: RadixTree, node: TreeNode) -> None:
        """Recompute `node`'s membership of both evictable indexes."""
        if node.parent is None:
            return
        children = node.children.values()
        self.index.set(node, node.slots is not None and node.lock_ref == 0
                       and not any(c.slots is not None for c in children))
        if self.host_index is not None:
            self.host_index.set(node, node.host_slots is not None
                                and not any(c.host_slots is not None for c in children))

    def _device_changed(self: RadixTree, node: TreeNode) -> None:
        """`node` gained or lost its device copy: its and its parent's index membership may change,
        and so does its host-index key (host-only nodes go first)."""
        self.reindex(node)
        self.reindex(node.parent)
        if self.host_index is not None:
            self.host_index.refresh(node)

    def gain_device(self: RadixTree, nodes: list[TreeNode]) -> None:
        """`nodes` (unlocked, parents first) just got device slots."""
        for node in nodes:
            self.evictable_size += len(node)
            self._device_changed(node)
            if self.listener is not None:
                self.listener.stored(node, DEVICE)
        if self.backup is not None:  # after the tree is whole again: backups may evict host leaves
            for node in nodes:
                self.backup.device_gained(node)

    def _drop_device_copy(self: RadixTree, node: TreeNode) -> None:
        if self.listener is not None:
            self.listener.removed(node, DEVICE)
        self.evictable_size -= len(node)
        node.slots = None

    def set_host(self: RadixTree, node: TreeNode, host_slots: np.ndarray) -> None:
        node.host_slots = host_slots
        self.host_size += len(node)
        self.reindex(node)
        self.reindex(node.parent)
        if self.listener is not None:
            self.listener.stored(node, HOST)

    def _lose_host(self: RadixTree, node: TreeNode) -> None:
        if self.listener is not None:
            self.listener.removed(node, HOST)
        self.host_size -= len(node)
        node.host_slots = None
        self.reindex(node)
        self.reindex(node.parent)

    def _unlink(self: RadixTree, node: TreeNode) -> None:
        """Remove a node that no tier holds any more (it has no children)."""
        self.index.discard(node)
        if self.host_index is not None:
            self.host_index.discard(node)
        del node.parent.children[self.child_key(node.key)]
        node.evicted = True
        self.reindex(node.parent)

    # ------------------------------------------------------------------ device eviction

    def evict(self: RadixTree, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Free at least `num_tokens` unlocked device tokens if that many exist, by policy; a victim
        larger than the remaining need loses only its tail pages. Returns (device slots freed, host
        slots freed by removing host-only subtrees), int64, whole pages."""
        ps, freed, chunks, host_chunks = self.page_size, 0, [], []
        while freed < num_tokens and len(self.index):
            leaf = self.index.peek()
            keep = len(leaf) - -(-(num_tokens - freed) // ps) * ps
            if keep > 0:
                self._split(leaf, keep)  # the upper part stays cached as a new node
            chunks.append(leaf.slots)
            freed += len(leaf)
            self.policy.on_evict(leaf)
            kept = self.backup is not None and self.backup.keep_on_host(leaf)
            self._drop_device_copy(leaf)
            if kept:  # host-only from now on
                self._device_changed(leaf)
            else:
                self._remove_subtree(leaf, host_chunks)
        return _cat(chunks), _cat(host_chunks)

    def _remove_subtree(self: RadixTree, node: TreeNode, host_chunks: list[np.ndarray]) -> None:
        below = [node]
        for n in below:
            below.extend(n.children.values())
        for n in reversed(below):  # children first, so each is a leaf when unlinked
            if n.host_slots is not None:
                host_chunks.append(n.host_slots)
                self._lose_host(n)
            self._unlink(n)

    # ------------------------------------------------------------------ host eviction

    def evict_host(self: RadixTree, num_tokens: int) -> np.ndarray:
        """Free at least `num_tokens` host-tier tokens if that many exist: host-only leaves first
        (the node goes), then host copies of device nodes (the node stays). Returns host slots."""
        freed, chunks = 0, []
        while freed < num_tokens and len(self.host_index):
            victim = self.host_index.peek()
            chunks.append(victim.host_slots)
            freed += len(victim)
            self._lose_host(victim)
            if victim.slots is None:
                self._unlink(victim)
        return _cat(chunks)


def _cat(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
