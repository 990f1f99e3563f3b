"""ShadowTree: the tree core (radix/core.py) with sizes and times only, no pages, KV or locks.

What a prefix cache under another eviction policy would hold. A learning policy
(eviction/adaptive.py) replays the real cache's traffic into one: the same matches and inserts,
keys and namespaces, a capacity that follows the real cache's occupancy. It runs the index's own
core (the same walk and split, so a match splits the edge where it ends and counts a hit on every
node it passed); an insert adds one leaf; an eviction takes the leaf with the smallest policy key
and trims its tail when less is needed, as radix/evict.py does. So a shadow running policy P
reports, request for request, the hits the real cache would get under P
(tests/test_adaptive.py checks this against the real cache on the bench traces).

Its nodes carry the fields the fixed policies' keys read (PrefixNode), so the registry's key
functions work on them unchanged. The adaptive policy gets shadows from the tree it serves
(RadixTree.shadow / shadow_copy) through eviction/view.py, and never imports this module.

Cost per call: one walk over the edges of the key, a split at most, and O(log n) heap work per
leaf touched or evicted.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable, Iterable

from radixkv.radix.core import PrefixNode, TreeCore

if TYPE_CHECKING:
    from radixkv.eviction import EvictionPolicy
    from radixkv.radix.node import TreeNode


class ShadowNode(PrefixNode["ShadowNode"]):
    __slots__ = ("hkey",)

    def __init__(self, node_id: int, ns: bytes, parent: ShadowNode | None, key: bytes, tick: int) -> None:
        PrefixNode.__init__(self, node_id, ns, parent, key, tick)
        self.hkey: tuple | None = None  # current key in the shadow's leaf heap; None: not a member


class LeafHeap:
    """The shadow's evictable leaves by policy key: a heap of (key, node) with lazy deletion, the
    current key kept on the node itself (no dicts: this is the shadow's hot path)."""

    def __init__(self, key: Callable[[ShadowNode], tuple]) -> None:
        self.key = key
        self._heap: list[tuple[tuple, ShadowNode]] = []
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def add(self, node: ShadowNode) -> None:
        if node.hkey is None:
            self._live += 1
        node.hkey = k = self.key(node)
        heapq.heappush(self._heap, (k, node))
        if len(self._heap) > 2 * self._live + 64:
            self._heap = [e for e in self._heap if e[1].hkey is e[0]]
            heapq.heapify(self._heap)

    def discard(self, node: ShadowNode) -> None:
        if node.hkey is not None:
            node.hkey = None
            self._live -= 1

    def pop(self) -> ShadowNode:
        heap = self._heap
        while True:
            k, node = heapq.heappop(heap)
            if node.hkey is k:
                node.hkey = None
                self._live -= 1
                return node


class ShadowTree(TreeCore[ShadowNode]):
    """A metadata-only prefix cache under `policy` (a fixed policy: its key reads node fields only)."""

    def __init__(self, policy: EvictionPolicy, page_size: int) -> None:
        super().__init__(page_size)
        self.policy = policy
        self.index = LeafHeap(policy.key)
        self._counts_uses = policy.insert_is_use
        self.roots: dict[bytes, ShadowNode] = {}  # namespace key -> root, while it has children
        self.used = 0  # tokens held
        self._held: ShadowNode | None = None  # the path end an insert protects while it evicts
        self._version = 0  # bumped by every insert: a remembered walk is valid only within one version
        self._matched: tuple | None = None  # (ns, key, path, matched bytes, version) of the last match

    def make_node(self, ns: bytes, parent: ShadowNode | None, key: bytes) -> ShadowNode:
        node = ShadowNode(self._next_id, ns, parent, key, self.tick)
        self._next_id += 1
        return node

    def _root(self, ns: bytes) -> ShadowNode:
        root = self.roots[ns] = self.make_node(ns, None, b"")
        return root

    def _touch(self, path: list[ShadowNode], hit: bool) -> None:
        self.tick += 1
        for node in path:
            node.last_access = self.tick
            node.hit_count += hit
        if path[-1].hkey is not None:  # only the last node of a path can be a leaf
            self.index.add(path[-1])

    def _cut(self, path: list[ShadowNode], pos: int) -> None:
        """Split the path's last node where a walk that matched `pos` bytes from the root ended."""
        last = path[-1]
        if (last.depth + last.size) * 4 > pos:  # ends past the match (`end`, without a property call)
            path[-1] = self.split_edge(last, pos // 4 - last.depth)

    def match(self, ns: bytes, key: bytes) -> int:
        """Tokens of `key` (whole pages) the shadow holds below namespace `ns`; refreshes them."""
        root = self.roots.get(ns)
        self._matched_tick = -1
        if root is None:
            self.tick += 1
            return 0
        path, pos = self.walk(key, root)
        if not path:
            self.tick += 1
            return 0
        self._cut(path, pos)
        self._touch(path, hit=True)
        self._matched_tick = self.tick
        self._matched = (ns, key, path, pos, self._version)
        return pos // 4

    def _resume(self, ns: bytes, key: bytes) -> tuple[list[ShadowNode], int] | None:
        """The walk of `key` continued from the last match when `key` extends it and nothing changed
        since (the lifecycle match(prompt) -> insert(prompt + output) walks the prompt once)."""
        if self._matched is None:
            return None
        m_ns, m_key, path, pos, version = self._matched
        self._matched = None
        if version != self._version or m_ns != ns or not key.startswith(m_key[:pos]):
            return None
        more, end = self.walk(key[pos:], path[-1])
        return path + more, pos + end

    def insert(self, ns: bytes, key: bytes, capacity: int, use: bool = True) -> int:
        """Cache `key` (whole pages) below `ns`, first evicting down to `capacity` tokens in all
        (never the path of `key` itself); `use` counts it as RadixTree.insert(use=True) does.
        Returns the tokens added."""
        root = self.roots.get(ns)
        if root is None:
            root = self._root(ns)
        walked = self._resume(ns, key)
        path, pos = walked if walked is not None else self.walk(key, root)
        self._version += 1
        if path:
            self._cut(path, pos)
        node = path[-1] if path else root
        excess = self.used + (len(key) - pos) // 4 - capacity
        if excess > 0:
            self._held = node
            self.index.discard(node)
            self.evict(excess)
            self._held = None
            if node.parent is not None and not node.children:
                self.index.add(node)
            if ns not in self.roots:  # eviction drops emptied roots, this one included
                self.roots[ns] = root
        leaf = None
        if pos < len(key):
            leaf = self.add_leaf(node, key[pos:])
            self.used += leaf.size
            path.append(leaf)
            self.index.discard(node)
        if use and self._counts_uses:
            self.count_insert_use(path, leaf)
        if path:
            self._touch(path, hit=False)
        if leaf is None:
            return 0
        self.index.add(leaf)
        return leaf.size

    def evict(self, num_tokens: int) -> int:
        """Drop at least `num_tokens` tokens if held, smallest key first, trimming a leaf's tail
        pages when fewer are needed than it holds. Returns tokens dropped."""
        ps, freed, index = self.page_size, 0, self.index
        while freed < num_tokens and len(index):
            leaf = index.pop()
            keep = leaf.size - -(-(num_tokens - freed) // ps) * ps
            if keep > 0:
                self.split_edge(leaf, keep)
            freed += leaf.size
            parent = leaf.parent
            assert parent is not None  # the heap holds no roots
            del parent.children[leaf.key[:self.page_bytes]]
            if parent.children:
                continue
            if parent.parent is None:
                del self.roots[parent.ns]
            elif parent is not self._held:
                index.add(parent)
        self.used -= freed
        return freed

    def load(self, nodes: Iterable[TreeNode]) -> None:
        """Start from a copy of real device-resident nodes (parents before children): their keys,
        recency, hits and priority. The shadow must be empty."""
        copies: dict[int, ShadowNode] = {}
        for real in nodes:
            if real.parent is None:
                copies[id(real)] = self._root(real.ns)
                continue
            if real.pages is None or id(real.parent) not in copies:
                continue
            node = copies[id(real)] = self.add_leaf(copies[id(real.parent)], real.key)
            node.last_access, node.created = real.last_access, real.created
            node.hit_count, node.priority = real.hit_count, real.priority
            self.used += node.size
            self.tick = max(self.tick, real.last_access)
        for node in copies.values():
            if node.parent is not None and not node.children:
                self.index.add(node)
        for ns in [ns for ns, r in self.roots.items() if not r.children]:
            del self.roots[ns]
