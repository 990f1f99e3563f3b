"""ShadowCache: what a prefix cache under another eviction policy would hold, on metadata only.

A learning policy (eviction/adaptive.py) replays the real cache's traffic into a shadow: the same
matches and inserts, keys and namespaces, a capacity that follows the real cache's occupancy, but no
pages, no KV, no locks held by anyone else. The shadow mirrors RadixTree's semantics exactly (a match
splits the edge where it ends and counts a hit on every node it passed; an insert adds one leaf; an
eviction takes the leaf with the smallest policy key and trims its tail when less is needed), so a
shadow running policy P reports, request for request, the hits the real cache would get under P
(tests/test_policy_follow.py checks this against the real cache on the bench traces).

Nodes carry the fields the fixed policies' keys read (`last_access`, `hit_count`, `created`,
`priority`, `id`), so the registry's key functions work on them unchanged.

Cost per call: one walk over the edges of the key (a dict lookup and a memcmp per edge), a split at
most, and O(log n) heap work per leaf touched or evicted.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable, Iterable

from radixkv.eviction.policies import EvictionPolicy
from radixkv.keys import common_bytes

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode


class ShadowNode:
    __slots__ = ("id", "parent", "children", "key", "size", "last_access", "hit_count", "created", "priority",
                 "hkey")

    def __init__(self, node_id: int, parent: ShadowNode | None, key: bytes, tick: int) -> None:
        self.id = node_id
        self.parent = parent
        self.children: dict[bytes, ShadowNode] = {}
        self.key = key  # int32 little-endian tokens of this edge, whole pages
        self.size = len(key) // 4
        self.last_access = tick
        self.hit_count = 0
        self.created = tick
        self.priority = 0
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

    def __contains__(self, node: ShadowNode) -> bool:
        return node.hkey is not None

    def add(self, node: ShadowNode) -> None:
        if node.hkey is None:
            self._live += 1
        node.hkey = k = self.key(node)
        heapq.heappush(self._heap, (k, node))
        if len(self._heap) > 2 * self._live + 64:
            self._heap = [e for e in self._heap if e[1].hkey is e[0]]
            heapq.heapify(self._heap)

    def refresh(self, node: ShadowNode) -> None:
        if node.hkey is not None:
            self.add(node)

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


class ShadowCache:
    """A metadata-only prefix cache under `policy` (a fixed policy: its key reads node fields only)."""

    def __init__(self, policy: EvictionPolicy, page_size: int) -> None:
        self.policy = policy
        self.page_size = page_size
        self.page_bytes = 4 * page_size
        self.index = LeafHeap(policy.key)
        self.roots: dict[bytes, ShadowNode] = {}  # namespace key -> root, while it has children
        self._ns: dict[int, bytes] = {}  # root id -> its namespace key
        self.used = 0  # tokens held
        self.tick = 0
        self._next_id = 0
        self._held: ShadowNode | None = None  # the path end an insert protects while it evicts
        self._version = 0  # bumped by every insert: a remembered walk is valid only within one version
        self._matched: tuple | None = None  # (ns, key, path, matched bytes, version) of the last match

    def _root(self, ns: bytes) -> ShadowNode:
        root = self.roots[ns] = self._new(None, b"")
        self._ns[root.id] = ns
        return root

    def _new(self, parent: ShadowNode | None, key: bytes) -> ShadowNode:
        node = ShadowNode(self._next_id, parent, key, self.tick)
        self._next_id += 1
        return node

    def _walk(self, node: ShadowNode, key: bytes) -> tuple[list[ShadowNode], int, int]:
        """(nodes passed, bytes matched, byte offset where the last node starts)."""
        pb, pos, last, end, path = self.page_bytes, 0, 0, len(key), []
        while pos < end:
            child = node.children.get(key[pos:pos + pb])
            if child is None:
                break
            path.append(child)
            last = pos
            if key.startswith(child.key, pos):
                pos += len(child.key)
                node = child
            else:
                pos += common_bytes(child.key, key, pos, pb)
                break
        return path, pos, last

    def _split(self, node: ShadowNode, kb: int) -> ShadowNode:
        """Cut `node` after kb bytes; the new upper node takes them, `node` keeps the rest."""
        parent = node.parent
        upper = self._new(parent, node.key[:kb])
        upper.last_access, upper.created = node.last_access, node.created
        upper.hit_count, upper.priority = node.hit_count, node.priority
        node.key = node.key[kb:]
        node.size -= kb // 4
        node.parent = upper
        upper.children[node.key[:self.page_bytes]] = node
        parent.children[upper.key[:self.page_bytes]] = upper
        return upper

    def _touch(self, path: list[ShadowNode], hit: bool) -> None:
        self.tick += 1
        for node in path:
            node.last_access = self.tick
            node.hit_count += hit
        if path[-1] in self.index:  # only the last node of a path can be a leaf
            self.index.refresh(path[-1])

    def match(self, ns: bytes, key: bytes) -> int:
        """Tokens of `key` (whole pages) the shadow holds below namespace `ns`; refreshes them."""
        root = self.roots.get(ns)
        if root is None:
            self.tick += 1
            return 0
        path, pos, last = self._walk(root, key)
        if not path:
            self.tick += 1
            return 0
        if last + len(path[-1].key) > pos:
            path[-1] = self._split(path[-1], pos - last)
        self._touch(path, hit=True)
        self._matched = (ns, key, path, pos, self._version)
        return pos // 4

    def _resume(self, ns: bytes, key: bytes) -> tuple[list[ShadowNode], int, int] | None:
        """The walk of `key` continued from the last match when `key` extends it and nothing changed
        since (the lifecycle match(prompt) -> insert(prompt + output) walks the prompt once)."""
        if self._matched is None:
            return None
        m_ns, m_key, path, pos, version = self._matched
        self._matched = None
        if version != self._version or m_ns != ns or not key.startswith(m_key[:pos]):
            return None
        more, end, last = self._walk(path[-1], key[pos:])
        if not more:
            return path, pos, pos - len(path[-1].key)
        return path + more, pos + end, pos + last

    def insert(self, ns: bytes, key: bytes, capacity: int) -> int:
        """Cache `key` (whole pages) below `ns`, first evicting down to `capacity` tokens in all
        (never the path of `key` itself). Returns the tokens added."""
        root = self.roots.get(ns)
        if root is None:
            root = self._root(ns)
        walked = self._resume(ns, key)
        path, pos, last = walked if walked is not None else self._walk(root, key)
        self._version += 1
        if path and last + len(path[-1].key) > pos:
            path[-1] = self._split(path[-1], pos - last)
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
                self.roots[ns], self._ns[root.id] = root, ns
        if pos < len(key):
            leaf = self._new(node, key[pos:])
            node.children[leaf.key[:self.page_bytes]] = leaf
            self.used += leaf.size
            path.append(leaf)
            self._touch(path, hit=False)
            self.index.discard(node)
            self.index.add(leaf)
            return leaf.size
        if path:
            self._touch(path, hit=False)
        return 0

    def evict(self, num_tokens: int) -> int:
        """Drop at least `num_tokens` tokens if held, smallest key first, trimming a leaf's tail
        pages when fewer are needed than it holds. Returns tokens dropped."""
        ps, freed, index = self.page_size, 0, self.index
        while freed < num_tokens and len(index):
            leaf = index.pop()
            keep = leaf.size - -(-(num_tokens - freed) // ps) * ps
            if keep > 0:
                self._split(leaf, 4 * keep)
            freed += leaf.size
            parent = leaf.parent
            del parent.children[leaf.key[:self.page_bytes]]
            if parent.children:
                continue
            if parent.parent is None:
                del self.roots[self._ns.pop(parent.id)]
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
            parent = copies[id(real.parent)]
            node = copies[id(real)] = self._new(parent, real.key)
            node.last_access, node.created = real.last_access, real.created
            node.hit_count, node.priority = real.hit_count, real.priority
            parent.children[real.key[:self.page_bytes]] = node
            self.used += node.size
            self.tick = max(self.tick, real.last_access)
        for node in copies.values():
            if node.parent is not None and not node.children:
                self.index.add(node)
        for ns in [ns for ns, r in self.roots.items() if not r.children]:
            del self.roots[ns]
