"""EvictableIndex: the evictable leaves, sorted by their policy key.

A leaf is evictable when it is not a root, has no children and no lock protects it. The tree
tells the index when that changes (`add` / `discard`) and when a leaf's key inputs change
(`refresh`); the victim is the smallest key, found in O(log n) (SortedList), so no call ever
rebuilds a heap over all leaves as SGLang's `evict` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sortedcontainers import SortedList

if TYPE_CHECKING:
    from radixkv.eviction.policies import EvictionPolicy
    from radixkv.radix.node import TreeNode


class EvictableIndex:
    def __init__(self, policy: EvictionPolicy, attr: str = "index_key") -> None:
        self.policy = policy
        self.attr = attr  # the node attribute holding this index's key (a node may be in two indexes)
        self._keys = SortedList()  # policy keys; each ends with the node id, so keys are unique
        self._nodes: dict[int, TreeNode] = {}  # node id -> node, for every indexed leaf

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node: TreeNode) -> bool:
        return getattr(node, self.attr) is not None

    def add(self, node: TreeNode) -> None:
        key = self.policy.key(node)
        setattr(node, self.attr, key)
        self._keys.add(key)
        self._nodes[node.id] = node

    def discard(self, node: TreeNode) -> None:
        key = getattr(node, self.attr)
        if key is None:
            return
        self._keys.remove(key)
        del self._nodes[node.id]
        setattr(node, self.attr, None)

    def set(self, node: TreeNode, member: bool) -> None:
        """Make `node` a member or not (a no-op when it already is what is asked)."""
        if member != (getattr(node, self.attr) is not None):
            if member:
                self.add(node)
            else:
                self.discard(node)

    def refresh(self, node: TreeNode) -> None:
        """Recompute the key of an indexed leaf whose recency, hits or priority changed."""
        if getattr(node, self.attr) is not None:
            self.discard(node)
            self.add(node)

    def peek(self) -> TreeNode:
        """The next victim (smallest key). The index must not be empty."""
        return self._nodes[self._keys[0][-1]]

    def nodes(self) -> list[TreeNode]:
        return list(self._nodes.values())

    def check(self) -> None:
        """The sorted keys are exactly the keys stored on the indexed nodes."""
        stored = sorted(getattr(n, self.attr) for n in self._nodes.values())
        if stored != list(self._keys):
            raise AssertionError("evictable index: sorted keys and node keys disagree")
        for node_id, node in self._nodes.items():
            if node.id != node_id or getattr(node, self.attr)[-1] != node_id:
                raise AssertionError(f"evictable index: {node} filed under id {node_id}")
