"""EvictableIndex: the evictable leaves, ordered by their policy key; the victim in O(log n).

A binary heap (heapq, in C) of keys with lazy deletion: each key is a tuple ending with the node
id, and `_keys[id]` holds the node's current key. Discarding a node or changing its key leaves
the old tuple in the heap; `pop` skips any tuple that is no longer some node's current key (an
identity check), and the heap is rebuilt from the live keys when stale ones outnumber them, so
add, refresh and discard cost O(log n) amortized and no call ever walks all leaves (SGLang
rebuilds a heap over every evictable leaf on each `evict`).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable, Final, Generic, TypeVar

if TYPE_CHECKING:
    from radixkv.eviction.view import NodeFields

V = TypeVar("V", bound="NodeFields")  # the tree's node class (compiled: `node.id` a field offset, not a getattr)
_heappush: Final = heapq.heappush  # (Final: compiled, a C static, not a module-dict lookup and a getattr)
_heappop: Final = heapq.heappop


class EvictableIndex(Generic[V]):
    def __init__(self, key: Callable[[V], tuple]) -> None:
        self.key = key  # node -> tuple ending with node.id
        self._heap: list[tuple] = []
        self._keys: dict[int, tuple] = {}  # node id -> current key, for every member
        self._nodes: dict[int, V] = {}  # node id -> node, for every member
        self.members = self._nodes.keys()  # a live read-only view: `node.id in index.members`

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node: V) -> bool:
        return node.id in self._nodes

    def add(self, node: V) -> None:
        key = self.key(node)
        self._keys[node.id] = key
        self._nodes[node.id] = node
        _heappush(self._heap, key)

    def discard(self, node: V) -> None:
        i = node.id
        if i in self._nodes:  # (`in` and `del`: compiled, C calls; dict.pop is a generic method call)
            del self._nodes[i]
            del self._keys[i]
            if len(self._heap) > 2 * len(self._nodes) + 64:
                self._compact()

    def set(self, node: V, member: bool) -> None:
        """Make `node` a member or not (a no-op when it already is what is asked)."""
        if member != (node.id in self._nodes):
            if member:
                self.add(node)
            else:
                self.discard(node)

    def refresh(self, node: V) -> None:
        """Re-key a member whose recency, hits or priority changed (a no-op for non-members)."""
        if node.id in self._nodes:
            key = self.key(node)
            self._keys[node.id] = key
            _heappush(self._heap, key)
            if len(self._heap) > 2 * len(self._nodes) + 64:
                self._compact()

    def peek(self) -> V:
        """The next victim (smallest key). The index must not be empty."""
        heap, keys = self._heap, self._keys
        while keys.get(heap[0][-1]) is not heap[0]:
            _heappop(heap)
        return self._nodes[heap[0][-1]]

    def pop(self) -> V:
        """Remove and return the next victim. The index must not be empty."""
        heap, keys = self._heap, self._keys
        key = _heappop(heap)
        while keys.get(key[-1]) is not key:  # a stale key: skipped, as peek does
            key = _heappop(heap)
        i = key[-1]
        del keys[i]
        node = self._nodes[i]
        del self._nodes[i]  # (as in discard)
        return node

    def rekey(self, key: Callable[[V], tuple]) -> None:
        """Order by a new key function: every member re-keyed, the heap rebuilt (O(n))."""
        self.key = key
        self._keys = {i: key(node) for i, node in self._nodes.items()}
        self._compact()

    def _compact(self) -> None:  # keys are unique (they end with the node id): the heap stays exact
        self._heap = list(self._keys.values())
        heapq.heapify(self._heap)

    def nodes(self) -> list[V]:
        return list(self._nodes.values())

    def current_key(self, node: V) -> tuple | None:
        return self._keys.get(node.id)

    def check(self) -> None:
        """Every member's key is in the heap, ends with its id, and the heap is a heap."""
        if self._keys.keys() != self._nodes.keys():
            raise AssertionError("evictable index: keys and nodes disagree")
        live = {id(k) for k in self._heap}
        for node_id, key in self._keys.items():
            if key[-1] != node_id or id(key) not in live or self._nodes[node_id].id != node_id:
                raise AssertionError(f"evictable index: the key of node {node_id} is missing or misfiled")
        heap = self._heap
        if any(heap[(i - 1) // 2] > heap[i] for i in range(1, len(heap))):
            raise AssertionError("evictable index: heap order broken")
