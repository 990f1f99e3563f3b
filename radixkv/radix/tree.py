"""RadixTree: the index. The tree core (radix/core.py) plus where each prefix's KV lives.

A pure index: it owns the nodes, the size counters and the evictable indexes, and nothing else.
`match` returns what is cached, `insert` returns what it kept and what was already there, eviction
(evict.py) returns the pages it let go; it never touches the page ledger, the pools or KV (the
caller, RadixCache, moves pages). Each namespace has its own root, kept only while it has children
or locks (a read-only match of a new namespace leaves nothing behind). Work per match or insert is
proportional to the pages compared (one memcmp per edge), never to the size of the tree.

Counters (SGLang's meaning, over device-resident tokens): `evictable_size` is every cached token no
lock protects (locks.py), `protected_size` every cached token on a locked path; `host_size` counts
tokens with a host-tier copy. Where KV lives is kept in evictable indexes, ordered by the policy's key:

    index        nodes on the device, unlocked, with no child on the device     (device leaves)
    host_index   nodes with a host copy and no child with one                   (host leaves)
    group_index  per secondary layer group, the nodes holding a component       (components.py)

Every residency change goes through gain_device / drop_device / set_host / lose_host / unlink, which
keep the counters, the indexes, pins (pins.py: their own state; told of splits and drops) and the
event listener in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, cast

import numpy as np

from radixkv.errors import LockError
from radixkv.eviction import EvictableIndex, EvictionPolicy, host_first
from radixkv.radix.components import drop_component, split_components
from radixkv.radix.core import TreeCore
from radixkv.radix.idle_roots import IdleRoots
from radixkv.radix.node import TreeNode
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.types import DEVICE, HOST, USER, InsertResult, MatchInfo, PinKeeper, ResidencyListener

_EMPTY = np.empty(0, dtype=np.int64)


if TYPE_CHECKING:
    from radixkv.eviction.view import NodeView


class RadixTree(TreeCore[TreeNode]):
    def __init__(self, page_size: int, policy: EvictionPolicy, host_tier: bool = False,
                 listener: ResidencyListener | None = None, secondary_groups: int = 0) -> None:
        super().__init__(page_size)
        self.policy = policy
        self.index: EvictableIndex[TreeNode] = EvictableIndex(policy.key)
        self.pins: PinKeeper | None = None  # pins with a deadline (radix/pins.py), from pins_on() on
        self.host_index: EvictableIndex[TreeNode] | None = (
            EvictableIndex(host_first(policy, self.on_device)) if host_tier else None)
        # secondary layer groups (radix/node.py): per group, the nodes holding a component, policy order
        self.group_index: tuple[EvictableIndex[TreeNode], ...] = tuple(
            EvictableIndex(policy.key) for _ in range(secondary_groups))
        self.roots: dict[bytes, TreeNode] = {}  # namespace key -> root, while it has children or locks
        self._idle_roots = IdleRoots()  # roots with no children and no locks, while held elsewhere
        self.listener = listener
        self.evictable_size = 0
        self.protected_size = 0
        self.host_size = 0
        self._learns = policy.learns
        self._insert_is_use = policy.insert_is_use
        self._epoch = policy.epoch  # the policy's order the indexes are keyed by

    # ------------------------------------------------------------------ structure

    def root(self, ns: bytes) -> TreeNode:
        """The root of namespace `ns` (one object per namespace while anyone holds it)."""
        root = self.roots.get(ns)
        if root is None:
            root = self._idle_roots.get(ns)
            if root is None:
                root = self.new_node(ns, None, b"", _EMPTY)
                self._idle_roots.put(ns, root)
        return root

    def hold_root(self, root: TreeNode) -> None:
        if root.ns not in self.roots:
            self.roots[root.ns] = root
            self._idle_roots.pop(root.ns)

    def release_root_if_idle(self, root: TreeNode) -> None:
        if not root.children and not root.lock_ref and self.roots.get(root.ns) is root:
            del self.roots[root.ns]
            self._idle_roots.put(root.ns, root)

    def make_node(self, ns: bytes, parent: TreeNode | None, key: bytes) -> TreeNode:
        node = TreeNode(self, self._next_id, ns, parent, key, self.tick)
        self._next_id += 1
        return node

    def new_node(self, ns: bytes, parent: TreeNode | None, key: bytes, pages: np.ndarray | None) -> TreeNode:
        node = self.make_node(ns, parent, key)
        node.pages = pages
        if self.group_index:
            node.secondary = [None] * len(self.group_index)
        return node

    def split(self, node: TreeNode, k: int) -> TreeNode:
        """Cut `node`'s edge after k tokens (whole pages). The new upper node takes the first k;
        `node` keeps the lower half, so it still means the same prefix. Counters are unchanged."""
        kp = k // self.page_size
        upper = self.split_edge(node, k)
        upper.lock_ref = node.lock_ref
        if node.pages is not None:
            upper.pages, node.pages = node.pages[:kp].copy(), node.pages[kp:].copy()
        if node.host_pages is not None:
            upper.host_pages, node.host_pages = node.host_pages[:kp].copy(), node.host_pages[kp:].copy()
        if self.group_index:
            split_components(self.group_index, upper, node, kp, self.page_size)
        if self.pins is not None:
            self.pins.split(upper, node)
        if self.listener is not None:  # KV events: the listener cuts what it keeps for `node`
            self.listener.split(upper, node)
        return upper

    # ------------------------------------------------------------------ lookup

    def _device_prefix(self, path: list[TreeNode], length: int, start: TreeNode) -> tuple[int, int]:
        """How many nodes of a walked path, and how many of its `length` tokens, are on the device
        (device residency is prefix-closed: it stops at the first host-only node)."""
        if self.host_index is not None:
            for i, node in enumerate(path):
                if node.pages is None:
                    return i, node.depth - start.end
        return len(path), length

    def match(self, key: bytes, start: TreeNode) -> MatchInfo:
        """Longest device-cached prefix of `key` below `start`. Splits the edge where the device
        match ends and refreshes the recency and hits of every node it matched whole."""
        path, matched = self.walk(key, start)
        if not path:
            self._matched_tick = -1
            if self._learns:
                self._learn_lookup(start, key, 0)
            return MatchInfo(start, 0, _EMPTY, 0)
        length = matched // 4
        k, dev = self._device_prefix(path, length, start)
        if k and path[k - 1].end > start.end + dev:  # split first: the unmatched tail is not a hit
            path[k - 1] = self.split(path[k - 1], start.end + dev - path[k - 1].depth)
        if k < len(path):
            path = path[:k] + [n for n in path[k:] if n.end <= start.end + length]
        self._touch(path, hit=True)
        self._matched_tick = self.tick
        if self._learns:
            if k:
                self.policy.on_hit(path[k - 1])
            self._learn_lookup(start, key, dev)
        if k == 0:
            return MatchInfo(start, 0, _EMPTY, length)
        node = path[k - 1]
        return MatchInfo(node, dev, np.concatenate([n.pages for n in path[:k] if n.pages is not None]), length - dev)

    def peek(self, key: bytes, start: TreeNode) -> tuple[int, int]:
        """Read-only: (device-cached tokens, further host-only tokens) of `key` (whole pages) below
        `start`: what `match` would report, with nothing split or refreshed."""
        path, matched = self.walk(key, start)
        k, dev = self._device_prefix(path, matched // 4, start)
        return dev, matched // 4 - dev

    def host_pages_below(self, key: bytes, start: TreeNode) -> np.ndarray:
        """Read-only: host pages of the host-only continuation of `key` below `start` (whole pages),
        where `start` ends a device match of the tokens before `key`."""
        path, matched = self.walk(key, start)
        host = [n.host_pages for n in path if n.pages is None and n.host_pages is not None]
        return np.concatenate(host)[:matched // self.page_bytes] if host else _EMPTY

    def locate(self, key: bytes, start: TreeNode) -> TreeNode:
        """The node ending the longest device-cached prefix of `key` below `start` (whole pages),
        splitting the edge where it ends. Unlike `match`, refreshes no recency or hit count."""
        path, matched = self.walk(key, start)
        k, dev = self._device_prefix(path, matched // 4, start)
        if not k:
            return start
        if path[k - 1].end > start.end + dev:
            return self.split(path[k - 1], start.end + dev - path[k - 1].depth)
        return path[k - 1]

    def pins_on(self, pins: PinKeeper) -> None:
        """Start keeping `pins` (before the first one): from now on the device index orders pinned
        leaves after every unpinned one. O(evictable leaves), once."""
        if self.pins is None:
            self.pins = pins
            self.index.rekey(pins.pinned_last(self.policy.key))

    def reorder(self, node: TreeNode) -> None:
        """`node`'s pin changed: re-key it in the device index (a no-op for non-members)."""
        self.index.refresh(node)

    def _touch(self, path: list[TreeNode], hit: bool) -> None:
        self.tick += 1
        tick, index, members = self.tick, self.index, self.index.members
        for node in path:
            node.last_access = tick
            node.hit_count += hit
            if node.id in members:
                index.refresh(node)
        if self.host_index is not None:
            for node in path:
                self.host_index.refresh(node)
        if self.group_index:
            for group in self.group_index:
                for node in path:
                    group.refresh(node)

    # ------------------------------------------------------------------ insert

    def insert(self, key: bytes, pages: np.ndarray, start: TreeNode, priority: int = 0,
               accept: Callable[[int, np.ndarray], None] | None = None, use: bool = False) -> InsertResult:
        """Cache `key` (whole pages) below `start` with device `pages` (int64, one per page of key).

        `use`: the insert is a use of every node on its path (SGLang counts a hit on each node an
        insert passes, the new leaf included): a direct `RadixCache.insert`. Nodes the match just
        before it counted (nothing ticked in between: a request's match, then its own insert) are
        not counted twice. A Sequence's commit is not a use: its open() matched already.

        `accept(cached_len, tree_pages)` sees what is already cached before anything changes and
        may raise to refuse (the tree is then unchanged). Host-only nodes on the way take their part
        of `pages`; the new suffix becomes a leaf. The caller's pages for [0, cached_len) are not
        used (they are the tree's own, or duplicates the caller frees); pages are copied."""
        path, matched = self.walk(key, start)
        length = matched // 4
        k, dev = self._device_prefix(path, length, start)
        first = path[0].pages if k else None
        if k == 1 and first is not None:  # the usual case (a single edge matched): a view, read only below
            tree_pages = first[:dev // self.page_size]
        else:
            tree_pages = (np.concatenate([n.pages for n in path[:k] if n.pages is not None])[:dev // self.page_size]
                          if k else _EMPTY)
        if accept is not None:
            accept(dev, tree_pages)
        node, gained, ps = start, [], self.page_size
        if path:
            if path[-1].end > start.end + length:
                path[-1] = self.split(path[-1], start.end + length - path[-1].depth)
            node = path[-1]
        for host_only in path[k:]:
            host_only.pages = pages[(host_only.depth - start.end) // ps:(host_only.end - start.end) // ps].copy()
            gained.append(host_only)
        leaf = None
        if matched < len(key):
            leaf = self.add_leaf(node, key[matched:])
            leaf.pages = pages[length // ps:].copy()
            if self.group_index:
                leaf.secondary = [None] * len(self.group_index)
            if node.parent is None:
                self.hold_root(node)
            path.append(leaf)
            gained.append(leaf)
            node = leaf
        if priority > 0:
            for n in path:
                n.priority = max(n.priority, priority)
        if use and self._insert_is_use:
            self.count_insert_use(path, leaf)
        if path:
            self._touch(path, hit=False)
        self.gain_device(gained)
        if self._learns:
            if leaf is not None:
                self.policy.on_insert(leaf)
            self.policy.on_cache(start, key, self.evictable_size + self.protected_size, use)
            self._follow_policy()
        return InsertResult(node, dev, tree_pages, gained)

    # ------------------------------------------------------------------ learning policies

    @staticmethod
    def on_device(node: NodeView) -> bool:
        return cast(TreeNode, node).pages is not None  # policies hold this tree's nodes as NodeViews

    def shadow(self, policy: EvictionPolicy) -> ShadowTree:
        """An empty metadata-only replay of this tree's core under `policy` (radix/shadow.py)."""
        return ShadowTree(policy, self.page_size)

    def shadow_copy(self, policy: EvictionPolicy) -> ShadowTree:
        """A shadow under `policy` that starts from what this tree holds on the device now."""
        shadow = ShadowTree(policy, self.page_size)
        shadow.load(self.nodes())
        return shadow

    def _learn_lookup(self, start: TreeNode, key: bytes, length: int) -> None:
        self.policy.on_lookup(start, key, length)
        self._follow_policy()

    def _follow_policy(self) -> None:
        """A learning policy that changed its order wholesale (a new `epoch`): re-key the indexes."""
        if self.policy.epoch != self._epoch:
            self._epoch = self.policy.epoch
            self.index.rekey(self.policy.key if self.pins is None else self.pins.pinned_last(self.policy.key))
            if self.host_index is not None:
                self.host_index.rekey(host_first(self.policy, self.on_device))
            for group in self.group_index:
                group.rekey(self.policy.key)

    def check_node(self, node: object) -> TreeNode:
        """`node` itself, checked to be one of this tree's nodes (LockError otherwise)."""
        if not isinstance(node, TreeNode):
            raise LockError(f"expected a TreeNode from match_prefix, got {type(node).__name__}")
        if node.tree is not self:
            raise LockError(f"{node} belongs to another RadixCache")
        return node

    # ------------------------------------------------------------------ residency

    def reindex(self, node: TreeNode | None) -> None:
        """Recompute `node`'s membership of both evictable indexes (None, a root's parent: nothing)."""
        if node is None or node.parent is None:
            return
        children = node.children.values()
        self.index.set(node, node.pages is not None and not node.lock_ref
                       and not any(c.pages is not None for c in children))
        if self.host_index is not None:
            self.host_index.set(node, node.host_pages is not None
                                and not any(c.host_pages is not None for c in children))

    def device_changed(self, node: TreeNode) -> None:
        """`node` gained or lost its device copy: its and its parent's index membership may
        change, and so does its host-index key (host-only nodes go first)."""
        self.reindex(node)
        self.reindex(node.parent)
        if self.host_index is not None:
            self.host_index.refresh(node)

    def gain_device(self, nodes: list[TreeNode]) -> None:
        """`nodes` (unlocked, parents first) just got device pages."""
        for node in nodes:
            self.evictable_size += node.size
            if node.children or self.host_index is not None:
                self.device_changed(node)
            else:  # a new leaf: the common case, without scanning siblings
                self.index.add(node)
                parent = node.parent
                assert parent is not None  # nodes that gain pages are below a root
                self.index.discard(parent)
            if self.listener is not None:
                self.listener.stored(node, DEVICE)

    def drop_device(self, node: TreeNode) -> list[np.ndarray | None]:
        """`node` (unlocked, no device child) loses its device KV, secondary components included;
        returns those components' pages per secondary group (None: it had none)."""
        if self.listener is not None:
            self.listener.removed(node, DEVICE)
        self.evictable_size -= node.size
        if self.pins is not None:
            self.pins.dropped(node)
        node.pages = None
        if not self.group_index:
            return []
        return [drop_component(self.group_index, node, g) for g in range(1, len(self.group_index) + 1)]

    def set_host(self, node: TreeNode, host_pages: np.ndarray) -> None:
        """`node` now has a host copy in `host_pages` (int64, one per page; the KV is copied)."""
        node.host_pages = host_pages
        self.host_size += node.size
        self.reindex(node)
        self.reindex(node.parent)
        if self.listener is not None:
            self.listener.stored(node, HOST)

    def lose_host(self, node: TreeNode) -> None:
        if self.listener is not None:
            self.listener.removed(node, HOST)
        self.host_size -= node.size
        node.host_pages = None
        self.reindex(node)
        self.reindex(node.parent)

    def unlink(self, node: TreeNode) -> None:
        """Remove a node that no tier holds any more (it has no children)."""
        self.index.discard(node)
        if self.host_index is not None:
            self.host_index.discard(node)
        parent = node.parent
        assert parent is not None  # a root is never unlinked
        del parent.children[node.key[:self.page_bytes]]
        node.evicted = True
        self.reindex(parent)
        if parent.parent is None:
            self.release_root_if_idle(parent)

    def pop_victim(self) -> TreeNode | None:
        """Remove and return the device leaf the policy evicts first (None when there is none)."""
        return self.index.pop() if len(self.index) else None

    def pop_host_victim(self) -> TreeNode | None:
        """Remove and return the host leaf evicted first, host-only ones first (None when none)."""
        return self.host_index.pop() if self.host_index is not None and len(self.host_index) else None

    def evicted(self, victim: TreeNode) -> None:
        """`victim` (a popped device leaf) is about to lose its device copy: the policy learns."""
        if self._learns:
            self.policy.on_evict(victim)
            self._follow_policy()

    # ------------------------------------------------------------------ iteration

    def nodes(self) -> list[TreeNode]:
        """Every node of every namespace, parents before children (for checks, events, printing)."""
        out = list(self.roots.values())
        for node in out:
            out.extend(node.children.values())
        return out
