"""RadixTree: which token prefixes are cached, where their KV lives, and who protects them.

Keys are page-granular: every edge holds a whole number of pages, a child is found by its first
page (`key[:page_size].tobytes()`), and a match always ends on a page boundary. Each namespace has
its own root, so requests in different namespaces never share. Edge comparison is one memcmp on
the common length, with numpy locating the first mismatch only when that fails; the work per
match or insert is proportional to the pages compared, never to the size of the tree.

Counters kept incrementally (SGLang's meaning): `evictable_size` is every cached token that no
lock protects, `protected_size` every cached token on a locked path. Evictable leaves live in an
EvictableIndex ordered by the policy's key. The tree knows no torch and no allocator: eviction
returns the freed slots and the caller gives their pages back.

    root ── [a b c d] ── [e f] ...          lock(node) adds 1 to lock_ref of node and every
                     └── [x y z w]           ancestor; a node with lock_ref > 0 is protected.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np

from radixkv.errors import LockError
from radixkv.eviction.index import EvictableIndex
from radixkv.eviction.policies import EvictionPolicy
from radixkv.radix.node import TreeNode

_EMPTY_KEY = np.empty(0, dtype=np.int32)
_EMPTY_SLOTS = np.empty(0, dtype=np.int64)


def common_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two int32 arrays (C-level compares only)."""
    n = min(len(a), len(b))
    if a[:n].tobytes() == b[:n].tobytes():
        return n
    return int(np.flatnonzero(a[:n] != b[:n])[0])


class RadixTree:
    def __init__(self, page_size: int, policy: EvictionPolicy) -> None:
        self.page_size = page_size
        self.policy = policy
        self.index = EvictableIndex(policy)
        self.roots: dict[Hashable, TreeNode] = {}
        self.evictable_size = 0
        self.protected_size = 0
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

    def _child_key(self, key: np.ndarray, pos: int = 0) -> bytes:
        return key[pos:pos + self.page_size].tobytes()

    def _split(self, node: TreeNode, k: int) -> TreeNode:
        """Cut `node`'s edge after k tokens. The new upper node takes key[:k]; `node` keeps the
        lower half, so it still means the same prefix. Counters and index are unchanged."""
        parent = node.parent
        upper = self._new_node(node.namespace, parent, node.key[:k].copy(), node.slots[:k].copy())
        upper.lock_ref, upper.last_access, upper.created = node.lock_ref, node.last_access, node.created
        upper.hit_count, upper.priority = node.hit_count, node.priority
        node.key, node.slots = node.key[k:].copy(), node.slots[k:].copy()
        node.depth += k
        node.parent = upper
        upper.children[self._child_key(node.key)] = node
        parent.children[self._child_key(upper.key)] = upper
        return upper

    # ------------------------------------------------------------------ lookup

    def walk(self, tokens: np.ndarray, start: TreeNode) -> tuple[list[TreeNode], int]:
        """Read-only: the nodes a match of `tokens` below `start` passes through, and the matched
        length (page-aligned; the last node may be matched only partly). Mutates nothing."""
        ps, node, pos, path = self.page_size, start, 0, []
        n = len(tokens) // ps * ps
        while pos < n:
            child = node.children.get(self._child_key(tokens, pos))
            if child is None:
                break
            m = common_len(child.key, tokens[pos:n]) // ps * ps
            path.append(child)
            pos += m
            if m < len(child):
                break
            node = child
        return path, pos

    def path_slots(self, path: list[TreeNode], length: int) -> np.ndarray:
        """The slots of the first `length` tokens along `path`: a view when one node covers them."""
        if not path:
            return _EMPTY_SLOTS
        if len(path) == 1:
            return path[0].slots[:length]
        out = np.concatenate([n.slots for n in path])
        return out[:length]

    def match(self, tokens: np.ndarray, start: TreeNode) -> tuple[TreeNode, int, np.ndarray]:
        """Longest cached prefix of `tokens` below `start`: (node ending exactly there, length, slots).
        Splits the edge where the match ends and refreshes the recency and hits of the path."""
        path, length = self.walk(tokens, start)
        slots = self.path_slots(path, length)
        if not path:
            return start, 0, slots
        last = path[-1]
        if last.end > start.end + length:
            last = self._split(last, start.end + length - last.depth)
            path[-1] = last
        self._touch(path, hit=True)
        return last, length, slots

    def _touch(self, path: list[TreeNode], hit: bool) -> None:
        self._tick += 1
        for node in path:
            node.last_access = self._tick
            node.hit_count += hit
        self.index.refresh(path[-1])  # only the last node of a path can be a leaf

    # ------------------------------------------------------------------ insert

    def insert(self, tokens: np.ndarray, slots: np.ndarray, start: TreeNode,
               priority: int = 0) -> tuple[TreeNode, int]:
        """Cache `tokens` (page-aligned, int32 `[n]`) below `start` with `slots` (int64 `[n]`).

        Returns (node ending exactly at the end of `tokens`, how many leading tokens were already
        cached). Only the new suffix takes the given slots (copied); the caller frees its duplicates.
        """
        path, m = self.walk(tokens, start)
        node = start
        if path:
            node = path[-1]
            if node.end > start.end + m:
                node = path[-1] = self._split(node, start.end + m - node.depth)
        if m < len(tokens):
            leaf = self._new_node(start.namespace, node, tokens[m:].copy(), slots[m:].copy())
            self.index.discard(node)  # it gains a child
            node.children[self._child_key(leaf.key)] = leaf
            self.evictable_size += len(leaf)
            path.append(leaf)
            node = leaf
            self.index.add(leaf)
        for n in path:
            n.priority = max(n.priority, priority)
        if path:
            self._touch(path, hit=False)
        return node, m

    # ------------------------------------------------------------------ locks

    def lock(self, node: TreeNode) -> None:
        if node.evicted:
            raise LockError(f"cannot lock {node}: it was evicted; match_prefix again")
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
                if not x.children and x.parent is not None:
                    self.index.add(x)
            x = x.parent

    # ------------------------------------------------------------------ eviction

    def evict(self, num_tokens: int) -> np.ndarray:
        """Free at least `num_tokens` unlocked cached tokens if that many exist, fewest first by
        policy. A victim larger than the remaining need loses only its tail pages. Returns the
        freed slots (int64, whole pages)."""
        ps, freed, chunks = self.page_size, 0, []
        while freed < num_tokens and len(self.index):
            leaf = self.index.peek()
            keep = len(leaf) - -(-(num_tokens - freed) // ps) * ps
            if keep > 0:
                self._split(leaf, keep)  # the upper part stays cached as a new node
            self._remove_leaf(leaf)
            chunks.append(leaf.slots)
            freed += len(leaf)
        return np.concatenate(chunks) if chunks else _EMPTY_SLOTS

    def _remove_leaf(self, leaf: TreeNode) -> None:
        self.policy.on_evict(leaf)
        self.index.discard(leaf)
        parent = leaf.parent
        del parent.children[self._child_key(leaf.key)]
        self.evictable_size -= len(leaf)
        leaf.evicted = True
        if not parent.children and parent.parent is not None and parent.lock_ref == 0:
            self.index.add(parent)

    def nodes(self) -> list[TreeNode]:
        """Every node of every namespace, roots first (for checks and printing)."""
        out, stack = [], list(self.roots.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
