"""LeafHeap: a shadow tree's evictable leaves in policy order (radix/shadow.py's ShadowTree is one).

Its nodes (ShadowNode) carry the fields the fixed policies' keys read (PrefixNode), so the registry's
key functions work on them unchanged. The evictable leaves sit in a heap with lazy deletion, the current
key kept on the node itself (`hkey`; None: not a member). An entry is (key, node), live while node.hkey is that
key. Under LRU or LFU (the adaptive policy's experts) the key is their key tuple packed into one int in the same
order, ending in the node's id (`_int_key`): two entries' order is their ints' (two of equal ints are one node's, so
the nodes are never compared); other policies' keys are their key tuples. Compiled, the sifts are C
(radixkv/_runs_native.c: heapq's moves, an int key's entries ordered by their ints' digits, with no generic
comparison); interpreted, heapq's.
It also makes a shadow's starting copies: of another shadow (`copy_nodes`, a fork) and of the real
cache's device-resident nodes (`load`).
"""

from __future__ import annotations

import heapq
from heapq import heapify
from typing import TYPE_CHECKING, Any, Callable, Final, Iterable

from radixkv.core_loader import native
from radixkv.eviction.policies import LFU, LRU
from radixkv.radix.core import PrefixNode, TreeCore, link_child

if TYPE_CHECKING:
    from radixkv.eviction.view import FixedPolicyView
    from radixkv.radix.node import TreeNode


ID_BITS: Final = 40  # an int heap key's low fields: node ids and clocks below 2**40 (a trillion) keep it exact
SMALL_BITS: Final = 20  # ... below 2**20 first: LFU's key then fits a machine word (no big-int arithmetic)
TUPLE_KEY: Final = 0  # how a shadow keys its heap: the policy's own key tuple,
LRU_KEY: Final = 1  # ... LRU's as one int
LFU_KEY: Final = 2  # ... or LFU's as one int
_heappush: Final = heapq.heappush  # (Final: compiled, a C static, not a module-dict lookup a call)
_heappop: Final = heapq.heappop
_heapreplace: Final = heapq.heapreplace
# radixkv/_runs_native.c's heap functions while the compiled core runs; None otherwise: then heapq's (`_place`,
# `pop_first`)
_c_place: Final[Callable[[list[Any], object, bool], None] | None] = native("heap_place")
_c_pop: Final[Callable[[list[Any]], object] | None] = native("heap_pop")


def _int_key(node: ShadowNode, kind: int, bits: int) -> int:
    """LRU's key (last_access, id) or LFU's (hit_count, last_access, id) as one int of the same order:
    the fields side by side, `bits` bits each below the first (exact while ids and clocks stay below
    2**bits; the first field may grow: Python's ints do)."""
    if kind == LRU_KEY:
        return node.last_access << bits | node.id
    return (node.hit_count << bits | node.last_access) << bits | node.id


def _place(heap: list[Any], k: object, top: bool) -> None:
    """heapq.heappush(heap, k), or with `top` k in place of heap[0] (which the caller is done with): one sift, where a
    pop and a push make two, and none where k is no greater than heap[0]'s children (a trimmed victim's key is mostly
    still the least)."""
    if _c_place is not None:
        _c_place(heap, k, top)
    elif not top:
        _heappush(heap, k)
    else:
        n = len(heap)
        if (n < 2 or not heap[1] < k) and (n < 3 or not heap[2] < k):
            heap[0] = k
        else:
            _heapreplace(heap, k)


def pop_first(heap: list[Any]) -> None:
    """heapq.heappop(heap), its entry dropped."""
    if _c_pop is not None:
        _c_pop(heap)
    else:
        _heappop(heap)


class ShadowNode(PrefixNode["ShadowNode"]):
    __slots__ = ("hkey", "first")

    def __init__(self, node_id: int, ns: bytes, parent: ShadowNode | None, key: bytes, tick: int) -> None:
        PrefixNode.__init__(self, node_id, ns, parent, key, tick)
        self.hkey: object = None  # current key in the shadow's leaf heap (int or tuple); None: not a member
        self.first = b""  # its key in parent.children, that very object (set by whoever links it; a root's: b"")


class LeafHeap(TreeCore[ShadowNode]):
    """The tree core with its evictable leaves in a heap ordered by `policy`'s key (module docstring)."""

    def __init__(self, policy: FixedPolicyView, page_size: int) -> None:
        super().__init__(page_size)
        self.policy = policy
        self._key = policy.key
        self._kind = LRU_KEY if type(policy) is LRU else LFU_KEY if type(policy) is LFU else TUPLE_KEY
        self._bits = SMALL_BITS  # an int key's low fields' width (_int_key)
        self._heap: list[tuple[object, ShadowNode]] = []  # (key, node); an entry is live iff node.hkey is its key
        self._live = 0  # leaves in the heap
        self.used = 0  # tokens held

    def __len__(self) -> int:
        return self._live  # evictable leaves

    def _push(self, node: ShadowNode, top: bool = False) -> None:
        """(Re-)key leaf `node` in the heap; `top`: in place of the heap's first entry, which the caller is done
        with (one sift, where a pop and a push make two)."""
        kind = self._kind
        if kind != TUPLE_KEY and (node.last_access | node.id) >> self._bits:
            self._rekey()  # an int key would no longer keep the order (the rebuilt heap's first entry is live)
            kind, top = self._kind, False
        if node.hkey is None:
            self._live += 1
        k: object = _int_key(node, kind, self._bits) if kind != TUPLE_KEY else self._key(node)
        node.hkey = k
        heap = self._heap
        _place(heap, (k, node), top)
        if len(heap) > 2 * self._live + 64:
            self._heap = [e for e in heap if self._entry(e) is not None]
            heapify(self._heap)

    def _take_least(self) -> ShadowNode:
        """The member with the smallest key (there must be one), taken out of the heap (as `_drop`), its entry the
        heap's first: the caller pops or replaces that entry (`_push(..., top=True)`). Stale entries before it are
        popped."""
        heap = self._heap
        while True:
            k, node = heap[0]
            if node.hkey is k:
                node.hkey = None
                self._live -= 1
                return node
            pop_first(heap)

    def _entry(self, e: tuple[object, ShadowNode]) -> ShadowNode | None:
        """The node of heap entry `e` if the entry is live, else None."""
        k, node = e
        return node if node.hkey is k else None

    def _drop(self, node: ShadowNode) -> None:
        """Take member `node` out of the heap (its entries go stale)."""
        node.hkey = None
        self._live -= 1

    def _rekey(self) -> None:
        """A clock or an id reached 2**bits: key the heap by ID_BITS-bit fields from now on, or past
        2**ID_BITS by the policy's own tuples."""
        live = [node for node in (self._entry(e) for e in self._heap) if node is not None]
        if self._bits < ID_BITS:
            self._bits = ID_BITS
        else:
            self._kind = TUPLE_KEY
        self._heap = []
        for node in live:
            node.hkey = k = _int_key(node, self._kind, self._bits) if self._kind != TUPLE_KEY else self._key(node)
            self._heap.append((k, node))
        heapify(self._heap)

    def copy_nodes(self, src: LeafHeap) -> None:
        """Become a copy of `src`'s nodes (this heap empty): the same ids, edges (the same bytes objects), times,
        hits and priorities, and clocks; its evictable leaves keyed by this heap's policy."""
        self.tick, self._next_id, self._matched_tick = src.tick, src._next_id, src._matched_tick
        stack: list[tuple[ShadowNode, ShadowNode | None, bytes]] = [(r, None, ns) for ns, r in src.roots.items()]
        while stack:
            node, parent, first = stack.pop()
            twin = ShadowNode(node.id, node.ns, parent, node.key, node.created)
            twin.last_access, twin.hit_count, twin.priority = node.last_access, node.hit_count, node.priority
            if parent is None:
                self.roots[first] = twin
            else:
                self._link(parent, twin, first)
            if node.hkey is not None:
                self._push(twin)
            stack += [(child, twin, k) for k, child in node.children.items()]

    def add_leaf(self, parent: ShadowNode, key: bytes) -> ShadowNode:
        leaf = self.make_node(parent.ns, parent, key)
        self._link(parent, leaf, key[:self.page_bytes])
        return leaf

    def _link(self, parent: ShadowNode, child: ShadowNode, first: bytes) -> None:
        """`child` under `parent` by key object `first` (its first page), which `child.first` then is."""
        link_child(parent, first, child)
        child.first = first

    def split_edge(self, node: ShadowNode, k: int) -> ShadowNode:
        """The core's split; the upper node is linked by node's old key object (a dict store under an equal key
        keeps the key it holds), node by its new first page."""
        first = node.first
        upper = TreeCore.split_edge(self, node, k)
        upper.first = first
        for lower in upper.children:  # (its one child, node: a native loop, compiled, where next(iter()) makes one)
            node.first = lower
        return upper

    def make_node(self, ns: bytes, parent: ShadowNode | None, key: bytes) -> ShadowNode:
        node = ShadowNode(self._next_id, ns, parent, key, self.tick)
        self._next_id += 1
        return node

    def _root(self, ns: bytes) -> ShadowNode:
        root = self.roots[ns] = self.make_node(ns, None, b"")
        return root

    def load(self, roots: Iterable[TreeNode]) -> None:
        """Start from a copy of the device-resident nodes below real roots `roots`: their keys, recency, hits and
        priority, and their key objects themselves (and, as the dict keys of the copies' children, the real
        children dicts' own first-page objects: no slice, their hash kept). The shadow must be empty. Breadth
        first, children in the real dicts' order: the order and so the ids RadixTree.nodes() would give."""
        made: list[ShadowNode] = []
        reals: list[TreeNode] = []
        for real in roots:
            made.append(self._root(real.ns))
            reals.append(real)
        i = 0
        while i < len(reals):  # (both lists grow as it goes)
            parent, i = made[i], i + 1
            for first, real in reals[i - 1].children.items():
                if real.pages is None:  # host-only, and so is every node below it
                    continue
                node = self.make_node(parent.ns, parent, real.key)
                self._link(parent, node, first)
                node.last_access, node.created = real.last_access, real.created
                node.hit_count, node.priority = real.hit_count, real.priority
                self.used += node.size
                if real.last_access > self.tick:
                    self.tick = real.last_access
                made.append(node)
                reals.append(real)
        for node in made:
            if node.parent is not None and not node.children:
                self._push(node)
        for ns in [ns for ns, r in self.roots.items() if not r.children]:
            del self.roots[ns]
