"""RadixTree: which token prefixes are cached, where their KV lives, and who protects them.

Keys are page-granular: every edge holds a whole number of pages, a child is found by its first
page (`key[:page_size].tobytes()`), and a match always ends on a page boundary. Each namespace has
its own root, so requests in different namespaces never share. Edge comparison is one memcmp on
the common length, with numpy locating the first mismatch only when that fails; the work per
match or insert is proportional to the pages compared, never to the size of the tree.

Counters kept incrementally (SGLang's meaning), over device-resident tokens: `evictable_size` is
every cached token that no lock protects, `protected_size` every cached token on a locked path;
`host_size` counts tokens with a host-tier copy. Evictable leaves live in EvictableIndexes ordered
by the policy's key (residency.py keeps them). The tree knows no torch and no allocator: eviction
returns the freed slots and the caller gives their pages back.

    root ── [a b c d] ── [e f] ...          lock(node) adds 1 to lock_ref of node and every
                     └── [x y z w]           ancestor; a node with lock_ref > 0 is protected.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np

from radixkv.errors import LockError
from radixkv.eviction.index import EvictableIndex
from radixkv.eviction.policies import EvictionPolicy, HostFirst
from radixkv.radix.node import TreeNode
from radixkv.radix.residency import Residency

_EMPTY_KEY = np.empty(0, dtype=np.int32)
_EMPTY_SLOTS = np.empty(0, dtype=np.int64)


def common_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two int32 arrays (C-level compares only)."""
    n = min(len(a), len(b))
    if a[:n].tobytes() == b[:n].tobytes():
        return n
    return int(np.flatnonzero(a[:n] != b[:n])[0])


class RadixTree(Residency):
    def __init__(self, page_size: int, policy: EvictionPolicy, host_tier: bool = False) -> None:
        self.page_size = page_size
        self.policy = policy
        self.index = EvictableIndex(policy)
        self.host_index = EvictableIndex(HostFirst(policy), "host_index_key") if host_tier else None
        self.roots: dict[Hashable, TreeNode] = {}
        self.evictable_size = 0
        self.protected_size = 0
        self.host_size = 0
        self.backup = None  # the host tier (HostBackup), when there is one
        self.listener = None  # KV-event recorder (ResidencyListener), when events are on
        self._tick = 0
        self._next_id = 0

    # ------------------------------------------------------------------ structure

    def root(self, namespace: Hashable) -> TreeNode:
        root = self.roots.get(namespace)
        if root is None:
            root = self.roots[namespace] = self._new_node(namespace, None, _EMPTY_KEY, _EMPTY_SLOTS)
        return root

    def _new_node(self, namespace: Hashable, parent: TreeNode | None, key: np.ndarray,
                  slots: np.ndarray) -> TreeNode:
        node = TreeNode(self._next_id, namespace, parent, key, slots, self._tick)
        self._next_id += 1
        return node

    def child_key(self, key: np.ndarray, pos: int = 0) -> bytes:
        return key[pos:pos + self.page_size].tobytes()

    def _split(self, node: TreeNode, k: int) -> TreeNode:
        """Cut `node`'s edge after k tokens. The new upper node takes key[:k]; `node` keeps the
        lower half, so it still means the same prefix. Counters and indexes are unchanged."""
        parent = node.parent
        upper = self._new_node(node.namespace, parent, node.key[:k].copy(),
                               None if node.slots is None else node.slots[:k].copy())
        upper.lock_ref, upper.last_access, upper.created = node.lock_ref, node.last_access, node.created
        upper.hit_count, upper.priority = node.hit_count, node.priority
        node.key = node.key[k:].copy()
        if node.slots is not None:
            node.slots = node.slots[k:].copy()
        if node.host_slots is not None:
            upper.host_slots, node.host_slots = node.host_slots[:k].copy(), node.host_slots[k:].copy()
        node.depth += k
        node.parent = upper
        node.block_hashes = None  # recomputed on demand from the new edges
        upper.children[self.child_key(node.key)] = node
        parent.children[self.child_key(upper.key)] = upper
        return upper

    # ------------------------------------------------------------------ lookup

    def walk(self, tokens: np.ndarray, start: TreeNode) -> tuple[list[TreeNode], int]:
        """Read-only: the nodes a match of `tokens` below `start` passes through (on any tier), and
        the matched length (page-aligned; the last node may be matched only partly)."""
        ps, node, pos, path = self.page_size, start, 0, []
        n = len(tokens) // ps * ps
        while pos < n:
            child = node.children.get(self.child_key(tokens, pos))
            if child is None:
                break
            m = common_len(child.key, tokens[pos:n]) // ps * ps
            path.append(child)
            pos += m
            if m < len(child):
                break
            node = child
        return path, pos

    @staticmethod
    def device_part(path: list[TreeNode], length: int, start: TreeNode) -> tuple[int, int]:
        """How many nodes of a walked path, and how many of its `length` tokens, are on the device
        (device residency is prefix-closed: the device part stops at the first host-only node)."""
        for i, node in enumerate(path):
            if node.slots is None:
                return i, node.depth - start.end
        return len(path), length

    def path_slots(self, path: list[TreeNode], length: int) -> np.ndarray:
        """Device slots of the first `length` tokens along `path`: a view when one node covers them."""
        if not path:
            return _EMPTY_SLOTS
        if len(path) == 1:
            return path[0].slots[:length]
        return np.concatenate([n.slots for n in path])[:length]

    def match(self, tokens: np.ndarray, start: TreeNode) -> tuple[TreeNode, int, np.ndarray, int]:
        """Longest device-cached prefix of `tokens` below `start`: (node ending exactly there,
        length, slots, host_length: further tokens on the host tier only). Splits the edge where the
        device match ends and refreshes the recency and hits of every node it went through."""
        path, length = self.walk(tokens, start)
        if not path:
            return start, 0, _EMPTY_SLOTS, 0
        k, dev = self.device_part(path, length, start)
        if k and path[k - 1].end > start.end + dev:  # split first: the unmatched tail is not a hit
            path[k - 1] = self._split(path[k - 1], start.end + dev - path[k - 1].depth)
        matched = path[:k] + [n for n in path[k:] if n.end <= start.end + length]
        if matched:
            self._touch(matched, hit=True)
        if k == 0:
            return start, 0, _EMPTY_SLOTS, length
        return path[k - 1], dev, self.path_slots(path[:k], dev), length - dev

    def _touch(self, path: list[TreeNode], hit: bool) -> None:
        self._tick += 1
        for node in path:
            node.last_access = self._tick
            node.hit_count += hit
            self.index.refresh(node)  # a no-op unless the node is indexed
            if self.host_index is not None:
                self.host_index.refresh(node)

    # ------------------------------------------------------------------ insert

    def insert(self, tokens: np.ndarray, slots: np.ndarray, start: TreeNode, priority: int = 0,
               walked: tuple[list[TreeNode], int] | None = None) -> tuple[TreeNode, int]:
        """Cache `tokens` (page-aligned, int32 `[n]`) below `start` with device `slots` (int64 `[n]`).

        Returns (node ending exactly at the end of `tokens`, how many leading tokens were already on
        the device). Host-only nodes on the way take their part of `slots` (they are on the device
        again); the new suffix becomes a leaf. Slots are copied; the caller frees its duplicates.
        `walked`: what `walk(tokens, start)` returned, if the caller has it and changed nothing since.
        """
        path, m = walked if walked is not None else self.walk(tokens, start)
        node, gained = start, []
        if path:
            if path[-1].end > start.end + m:
                path[-1] = self._split(path[-1], start.end + m - path[-1].depth)
            node = path[-1]
        k, dev = self.device_part(path, m, start)
        for host_only in path[k:]:
            lo, hi = host_only.depth - start.end, host_only.end - start.end
            host_only.slots = slots[lo:hi].copy()
            gained.append(host_only)
        if m < len(tokens):
            node = self._new_node(start.namespace, node, tokens[m:].copy(), slots[m:].copy())
            node.parent.children[self.child_key(node.key)] = node
            path.append(node)
            gained.append(node)
        for n in path:
            n.priority = max(n.priority, priority)
        if path:
            self._touch(path, hit=False)
        self.gain_device(gained)
        return node, dev

    # ------------------------------------------------------------------ locks

    def lock(self, node: TreeNode) -> None:
        if node.evicted or node.slots is None:
            raise LockError(f"cannot lock {node}: it is no longer on the device; match_prefix again")
        node.own_locks += 1
        x: TreeNode | None = node
        while x is not None:
            if x.lock_ref == 0:
                self.evictable_size -= len(x)
                self.protected_size += len(x)
                self.index.discard(x)
            x.lock_ref += 1
            x = x.parent

    def unlock(self, node: TreeNode) -> None:
        if node.own_locks == 0:
            raise LockError(f"unlock of {node} without a matching lock of that node")
        node.own_locks -= 1
        x: TreeNode | None = node
        while x is not None:
            x.lock_ref -= 1
            if x.lock_ref == 0:
                self.protected_size -= len(x)
                self.evictable_size += len(x)
                self.reindex(x)
            x = x.parent

    def nodes(self) -> list[TreeNode]:
        """Every node of every namespace, parents before children (for checks, events, printing)."""
        out = list(self.roots.values())
        for node in out:
            out.extend(node.children.values())
        return out
