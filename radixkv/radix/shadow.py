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

Keys (ShadowKeys): at page 1 a shadow keeps the tree's own key bytes (int32 per token). From page 3
on it keeps one 64-bit hash of each page's tokens instead (8 bytes a page, 0.5 per token at page 16,
where token bytes cost 4), so the shadow's tree has the same shape, the same splits and the same
matches as one of token bytes. Two different pages with the same hash below the same node (about
2**-64 a pair) would make the shadow report a match the real cache would not have: that perturbs an
ESTIMATE only (a shadow picks which expert the real cache follows; it never serves KV), and
tests/test_adaptive.py checks shadow == real cache, request for request, at pages 3, 4 and 16.
A key's hashes are computed once per request for every shadow of a tree: the shadows share one
ShadowKeys, which remembers the last key (the second shadow's call is free) and extends it (a
request's insert of prompt + output hashes only the output's pages).

Cost per call: one walk over the edges of the key, a split at most, and O(log n) heap work per
leaf touched or evicted; from page 3 on, hashing the key's pages not hashed for the last call.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final, Iterable

import numpy as np

from radixkv.eviction.policies import LFU, LRU
from radixkv.radix.core import PrefixNode, TreeCore

if TYPE_CHECKING:
    from radixkv.eviction.view import FixedPolicyView
    from radixkv.radix.node import TreeNode


HASH_BYTES: Final = 8  # a page's key in a hashing shadow: one int64, little-endian
ID_BITS: Final = 40  # an int heap key's low field: node ids and clocks below 2**40 (a trillion) keep it exact
TUPLE_KEY, LRU_KEY, LFU_KEY = 0, 1, 2  # how a shadow keys its heap: the policy's own key, or LRU's or LFU's as one int


class ShadowKeys:
    """Keys as a tree's shadows hold them (module docstring): the tree's own key bytes at page sizes
    1 and 2, else one int64 per whole page (a trailing partial page is dropped: nothing matches it),

        hash of a page = sum over its tokens t_j of t_j * w_j   (mod 2**64, j the position in the page)

    with fixed odd 64-bit weights w_j (splitmix64 of j: the same in every process; at even page sizes
    the tokens are taken in int64 pairs, half the work): one matrix-vector product per key (numpy:
    ~10k instructions a call and ~110 a page, so a request pays ~20k plus its pages: the time the
    memory costs). A page's own tokens suffice, no chain through its parent: in a radix tree a page is
    looked up below the path that leads to it, so two keys have the same hashes page for page exactly
    when they have the same tokens, barring a collision. One token (pair) that differs always changes
    its page's hash (odd weights are invertible mod 2**64). One per tree, shared by its shadows; it
    remembers the last key asked."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.hashed = 4 * page_size > HASH_BYTES  # page sizes 1 and 2: token bytes are no longer
        self.page_bytes = HASH_BYTES if self.hashed else 4 * page_size  # key bytes a page
        wide = page_size % 2 == 0  # tokens taken in int64 pairs
        self._page = np.dtype((np.int64 if wide else np.int32, page_size // 2 if wide else page_size))  # a row
        self._weights = _weights(page_size // 2 if wide else page_size)
        self._key = b""  # the last key asked (token bytes) ...
        self._hashes = b""  # ... and its page hashes

    def of(self, key: bytes) -> bytes:
        """`key` (int32 token bytes from a namespace root) as the shadows hold it."""
        if not self.hashed:
            cut = len(key) % self.page_bytes  # a partial page matches nothing: as a hashing shadow drops it
            return key if cut == 0 else key[:len(key) - cut]
        if key is self._key:
            return self._hashes
        last = self._key
        if last and len(last) % (4 * self.page_size) == 0 and key.startswith(last):
            hashes = self._hashes + self.pages(key, len(last))  # extends the last key: hash the rest only
        else:
            hashes = self.pages(key, 0)
        self._key, self._hashes = key, hashes
        return hashes

    def pages(self, tokens: bytes, offset: int) -> bytes:
        """Hashes of the whole pages of `tokens` (int32 bytes) from byte `offset` (a page boundary) on."""
        n = (len(tokens) - offset) // (4 * self.page_size)
        if n <= 0:
            return b""
        return np.matmul(np.frombuffer(tokens, self._page, n, offset), self._weights).tobytes()  # int64, wrapping


def _weights(n: int) -> np.ndarray:
    """Odd 64-bit weights for positions 0..n-1 in a page: splitmix64 of the position, int64."""
    z = (np.arange(n, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) | np.uint64(1)).view(np.int64)


def _int_key(node: ShadowNode, kind: int) -> int:
    """LRU's key (last_access, id) or LFU's (hit_count, last_access, id) as one int of the same order:
    the fields side by side, ID_BITS bits each below the first (exact while ids and clocks stay below
    2**ID_BITS; past 2**63 Python's ints just grow)."""
    if kind == LRU_KEY:
        return node.last_access << ID_BITS | node.id
    return (node.hit_count << ID_BITS | node.last_access) << ID_BITS | node.id


class ShadowNode(PrefixNode["ShadowNode"]):
    __slots__ = ("hkey",)

    def __init__(self, node_id: int, ns: bytes, parent: ShadowNode | None, key: bytes, tick: int,
                 size: int) -> None:
        PrefixNode.__init__(self, node_id, ns, parent, key, tick)
        self.size = size  # tokens (the key may hold a hash per page)
        self.hkey: object = None  # current key in the shadow's leaf heap (int or tuple); None: not a member


class ShadowTree(TreeCore[ShadowNode]):
    """A metadata-only prefix cache under `policy` (a fixed policy: its key reads node fields only).

    Its evictable leaves sit in a heap of (key, node) with lazy deletion, the current key kept on the
    node itself (`hkey`; None: not a member), so the hot path needs no dicts and no method calls
    beyond the walk, a split and a leaf. Under LRU or LFU (the adaptive policy's experts) the key is
    their key tuple packed into one int in the same order (`_int_key`): a heap comparison is then one
    int comparison, not two levels of tuple comparison; other policies' keys are their own tuples."""

    def __init__(self, policy: FixedPolicyView, page_size: int, keys: ShadowKeys | None = None) -> None:
        super().__init__(page_size)
        self.keys = keys if keys is not None else ShadowKeys(page_size)  # shared by a tree's shadows
        self.page_bytes = self.keys.page_bytes
        self._hashed = self.keys.hashed
        self.policy = policy
        self._key = policy.key
        self._kind = LRU_KEY if type(policy) is LRU else LFU_KEY if type(policy) is LFU else TUPLE_KEY
        self._heap: list[tuple[object, ShadowNode]] = []  # an entry is live iff node.hkey is its key
        self._live = 0  # leaves in the heap
        self._counts_uses = policy.insert_is_use
        self.roots: dict[bytes, ShadowNode] = {}  # namespace key -> root, while it has children
        self.used = 0  # tokens held
        self._held: ShadowNode | None = None  # the path end an insert protects while it evicts
        self._version = 0  # bumped by every insert: a remembered walk is valid only within one version
        self._matched: tuple[bytes, bytes, list[ShadowNode], int, int] | None = None  # the last match's walk

    def __len__(self) -> int:
        return self._live  # evictable leaves

    def _push(self, node: ShadowNode) -> None:
        """(Re-)key leaf `node` in the heap."""
        if node.hkey is None:
            self._live += 1
        if self._kind != TUPLE_KEY and (node.last_access | node.id) >> ID_BITS:
            self._tuple_keys()  # an int key would no longer keep the order
        k: object = _int_key(node, self._kind) if self._kind != TUPLE_KEY else self._key(node)
        node.hkey = k
        heap = self._heap
        heapq.heappush(heap, (k, node))
        if len(heap) > 2 * self._live + 64:
            self._heap = [e for e in heap if e[1].hkey is e[0]]
            heapq.heapify(self._heap)

    def _tuple_keys(self) -> None:
        """Key the heap by the policy's own tuples from now on (a clock or an id reached 2**ID_BITS)."""
        self._kind = TUPLE_KEY
        live = [node for k, node in self._heap if node.hkey is k]
        self._heap = []
        for node in live:
            node.hkey = k = self._key(node)
            self._heap.append((k, node))
        heapq.heapify(self._heap)

    def make_node(self, ns: bytes, parent: ShadowNode | None, key: bytes) -> ShadowNode:
        node = ShadowNode(self._next_id, ns, parent, key, self.tick, len(key) // self.page_bytes * self.page_size)
        self._next_id += 1
        return node

    def _root(self, ns: bytes) -> ShadowNode:
        root = self.roots[ns] = self.make_node(ns, None, b"")
        return root

    def match(self, ns: bytes, key: bytes) -> int:
        """Tokens of `key` (int32 token bytes, whole pages) the shadow holds below namespace `ns`;
        refreshes them."""
        root = self.roots.get(ns)
        self._matched_tick = -1
        if root is None:
            self.tick += 1
            return 0
        key = self.keys.of(key)
        path, pos = self.walk(key, root)
        if not path:
            self.tick += 1
            return 0
        last, matched = path[-1], pos // self.page_bytes * self.page_size
        if last.depth + last.size > matched:  # the walk ended inside it: split where the match ends
            last = path[-1] = self.split_edge(last, matched - last.depth)
        self.tick = tick = self.tick + 1
        for node in path:
            node.last_access = tick
            node.hit_count += 1
        if last.hkey is not None:  # only the last node of a path can be a leaf
            self._push(last)
        self._matched_tick = tick
        self._matched = (ns, key, path, pos, self._version)
        return matched

    def _walk_on(self, ns: bytes, key: bytes, root: ShadowNode) -> tuple[list[ShadowNode], int]:
        """The walk of `key`, continued from the last match when `key` extends it and nothing changed
        since (the lifecycle match(prompt) -> insert(prompt + output) walks the prompt once)."""
        matched, self._matched = self._matched, None
        if matched is not None:
            m_ns, m_key, path, pos, version = matched
            if version == self._version and m_ns == ns and key.startswith(m_key if pos == len(m_key) else m_key[:pos]):
                more, end = self.walk(key[pos:], path[-1])
                return path + more, pos + end
        return self.walk(key, root)

    def insert(self, ns: bytes, key: bytes, capacity: int, use: bool = True, tail: bytes | None = None) -> int:
        """Cache `key` (int32 token bytes, whole pages) below `ns`, first evicting down to `capacity`
        tokens in all (never the path of `key` itself); `use` counts it as RadixTree.insert(use=True)
        does. A new leaf of a shadow that keeps token bytes keeps `tail` as its key when it equals the
        end of `key` it needs (the real tree's new leaf's key: one bytes object for both trees instead
        of a copy each). Returns the tokens added."""
        root = self.roots.get(ns)
        if root is None:
            root = self._root(ns)
        key = self.keys.of(key)
        path, pos = self._walk_on(ns, key, root)
        self._version += 1
        node, pb, ps = root, self.page_bytes, self.page_size
        if path:
            node = path[-1]
            if node.depth + node.size > pos // pb * ps:
                node = path[-1] = self.split_edge(node, pos // pb * ps - node.depth)
        excess = self.used + (len(key) - pos) // pb * ps - capacity
        if excess > 0:
            self._held = node
            if node.hkey is not None:
                node.hkey = None
                self._live -= 1
            self.evict(excess)
            self._held = None
            if node.parent is not None and not node.children:
                self._push(node)
            if ns not in self.roots:  # eviction drops emptied roots, this one included
                self.roots[ns] = root
        leaf = None
        if pos < len(key):
            share = tail is not None and not self._hashed and len(tail) == len(key) - pos and key.endswith(tail)
            leaf = self.add_leaf(node, tail if share and tail is not None else key[pos:])
            self.used += leaf.size
            path.append(leaf)
            if node.hkey is not None:
                node.hkey = None
                self._live -= 1
        if use and self._counts_uses:
            self.count_insert_use(path, leaf)
        if path:
            self.tick = tick = self.tick + 1
            for n in path:
                n.last_access = tick
            if leaf is None and node.hkey is not None:
                self._push(node)
        if leaf is None:
            return 0
        self._push(leaf)
        return leaf.size

    def evict(self, num_tokens: int) -> int:
        """Drop at least `num_tokens` tokens if held, smallest key first, trimming a leaf's tail
        pages when fewer are needed than it holds. Returns tokens dropped."""
        ps, freed = self.page_size, 0
        while freed < num_tokens and self._live:
            k, leaf = heapq.heappop(self._heap)
            if leaf.hkey is not k:  # a stale entry
                continue
            leaf.hkey = None
            self._live -= 1
            keep = leaf.size - -(-(num_tokens - freed) // ps) * ps
            if keep > 0:
                self.split_edge(leaf, keep)
            freed += leaf.size
            parent = leaf.parent
            assert parent is not None  # a leaf in the heap is never a root
            del parent.children[leaf.key[:self.page_bytes]]
            if parent.children:
                continue
            if parent.parent is None:
                del self.roots[parent.ns]
            elif parent is not self._held:
                self._push(parent)
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
            key = real.key if not self._hashed else self.keys.pages(real.key, 0)
            node = copies[id(real)] = self.add_leaf(parent, key)
            node.last_access, node.created = real.last_access, real.created
            node.hit_count, node.priority = real.hit_count, real.priority
            self.used += node.size
            self.tick = max(self.tick, real.last_access)
        for node in copies.values():
            if node.parent is not None and not node.children:
                self._push(node)
        for ns in [ns for ns, r in self.roots.items() if not r.children]:
            del self.roots[ns]
