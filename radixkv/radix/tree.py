"""RadixTree: the index. The tree core (radix/core.py) plus where each prefix's KV lives.

A pure index: it owns the nodes, the size counters and the evictable indexes, and nothing else.
`match` returns what is cached (device_path.py: the device part of a walk), `insert` what it kept and
what was already there, eviction (evict.py) the pages it let go; it never touches the page ledger,
the pools or KV (the caller, RadixCache, moves pages). Each namespace has its own root, kept only
while it has children or locks (a read-only match of a new namespace leaves nothing behind). Work per
match or insert is proportional to the pages compared (one memcmp per edge), never to the tree's size.

Counters (SGLang's meaning, over device-resident tokens): `evictable_size` is every cached token no
lock protects (locks.py), `protected_size` every cached token on a locked path; `host_size` counts
tokens with a host-tier copy. Where KV lives is kept in evictable indexes, ordered by the policy's key:

    index        nodes on the device, unlocked, with no child on the device     (device leaves)
    host_index   nodes with a host copy and no child with one                   (host leaves)
    group_index  per secondary layer group, the nodes holding a component       (components.py)

Every residency change goes through radix/residency.py (gain_device, drop_device, set_host,
lose_host, unlink), which keeps the counters, the indexes, pins (pins.py: their own state; told of
splits and drops) and the event listener in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Final, cast

import numpy as np

from radixkv.errors import LockError
from radixkv.eviction import EvictableIndex, EvictionPolicy, host_first
from radixkv.radix import residency
from radixkv.radix.components import split_components
from radixkv.radix.device_path import device_pages, device_prefix, device_runs, node_runs
from radixkv.radix.idle_roots import IdleRoots
from radixkv.radix.node import TreeNode
from radixkv.radix.shadow import ShadowKeys, ShadowTree
from radixkv.radix.windows import Reach, resumable
from radixkv.radix.types import InsertResult, MatchInfo, PinKeeper, ResidencyListener
from radixkv.runs import cut

_EMPTY: Final = np.empty(0, dtype=np.int64)  # (Final: compiled, a C static, not a module-dict lookup)

if TYPE_CHECKING:
    from radixkv.eviction.view import FixedPolicyView, NodeView


class RadixTree(residency.ResidentTree):
    def __init__(self, page_size: int, policy: EvictionPolicy, host_tier: bool = False,
                 listener: ResidencyListener | None = None, secondary_groups: int = 0,
                 reaches: tuple[Reach, ...] = ()) -> None:
        super().__init__(page_size)
        self.policy = policy
        self.index = EvictableIndex(policy.key)
        self.pins = None  # pins with a deadline (radix/pins.py), from pins_on() on
        self.host_index = EvictableIndex(host_first(policy, self.on_device)) if host_tier else None
        # secondary layer groups (radix/node.py): per group, the nodes holding a component, policy order
        self.group_index = tuple(EvictableIndex(policy.key) for _ in range(secondary_groups))
        self.reaches = reaches  # per secondary group: what resuming needs of it (windows.py); () without groups
        self.roots: dict[bytes, TreeNode] = {}  # namespace key -> root, while it has children or locks
        self._idle_roots = IdleRoots()  # roots with no children and no locks, while held elsewhere
        self.listener = listener
        self.evictable_size = 0
        self.protected_size = 0
        self.host_size = 0
        self.learns = policy.learns
        self._insert_is_use = policy.insert_is_use
        self._epoch = policy.epoch  # the policy's order the indexes are keyed by
        self.shadow_keys = ShadowKeys()  # one for all of this tree's shadows (radix/shadow.py)

    # ------------------------------------------------------------------ structure

    def root(self, ns: bytes) -> TreeNode:
        """The root of namespace `ns` (one object per namespace while anyone holds it)."""
        root = self.roots.get(ns)
        if root is None:
            root = self._idle_roots.get(ns)
            if root is None:
                root = self.new_node(ns, None, b"", [])
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

    def new_node(self, ns: bytes, parent: TreeNode | None, key: bytes, pages: list[int] | None) -> TreeNode:
        node = self.make_node(ns, parent, key)
        node.pages = pages
        if self.group_index:
            node.secondary = [None] * len(self.group_index)
        return node

    def split(self, node: TreeNode, k: int) -> TreeNode:
        """Cut `node`'s edge after k tokens (whole pages). The new upper node takes the first k; `node` keeps the
        lower half, so it still means the same prefix. Counters are unchanged."""
        kp = k // self.page_size
        upper = self.split_edge(node, k)
        upper.lock_ref = node.lock_ref
        if node.pages is not None:
            upper.pages, node.pages = cut(node.pages, kp)
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

    def match(self, key: bytes, start: TreeNode) -> MatchInfo:
        """Longest device-cached prefix of `key` below `start`. Splits the edge where the device
        match ends and refreshes the recency and hits of every node it matched whole. With secondary
        groups (`start` a root): the longest prefix every group can resume from (windows.py)."""
        path, matched = self.walk(key, start)
        if not path:
            self._matched_tick = -1
            if self.learns:
                self._learn_lookup(start, key, 0)
            return MatchInfo(start, 0, [], 0)
        length = matched // 4
        k, dev = device_prefix(self, path, length, start)
        if self.reaches and dev:  # from a root: shorten to where every group can resume
            length = dev = resumable(path[:k], dev, self.reaches, self.page_size)
            k = sum(n.depth < dev for n in path[:k])
        if k and path[k - 1].end > start.end + dev:  # split first: the unmatched tail is not a hit
            path[k - 1] = self.split(path[k - 1], start.end + dev - path[k - 1].depth)
        if k < len(path):
            path = path[:k] + [n for n in path[k:] if n.end <= start.end + length]
        self._touch(path, hit=True)
        self._matched_tick = self.tick
        if self.learns:
            if k:
                self.policy.on_hit(path[k - 1])
            self._learn_lookup(start, key, dev)
        if k == 0:
            return MatchInfo(start, 0, [], length)
        return MatchInfo(path[k - 1], dev, device_runs(path, k), length - dev)

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
               accept: Callable[[int, list[TreeNode], int], list[int] | None] | None = None, use: bool = False,
               after: TreeNode | None = None) -> InsertResult:
        """Cache `key` (whole pages) below `start` with device `pages` (int64, one per page of key).

        `use`: the insert is a use of every node on its path (SGLang counts a hit on each node an
        insert passes, the new leaf included): a direct `RadixCache.insert`. Nodes the match just
        before it counted (nothing ticked in between: a request's match, then its own insert) are
        not counted twice. A Sequence's commit is not a use: its open() matched already.

        `accept(cached_len, path, k)` sees what is cached (pages: `path[:k]`'s) before anything changes and
        may raise to refuse (the tree is then unchanged; `tree_pages` are read only without it); it may return
        the runs of `pages` from cached_len on (radixkv/runs.py), else they are read off `pages`. Host-only
        nodes on the way take their part of `pages`; the new suffix becomes a leaf. The caller's pages for
        [0, cached_len) are not used (the tree's own, or duplicates the caller frees); pages are copied.
        `after`: a device node below `start` whose path the caller proved spells the first tokens (MatchedSlots);
        `key` then holds only the rest, walked from there (a learning policy's on_cache gets it below `after`)."""
        skip = 0
        if after is None:
            path, matched = self.walk(key, start)
        else:
            more, matched = self.walk(key, after)
            path, skip = self.ancestry(after, start) + more, after.end - start.end
        length = skip + matched // 4
        k, dev = device_prefix(self, path, length, start)
        tree_pages = device_pages(path, k, dev // self.page_size) if accept is None else _EMPTY
        new = accept(dev, path, k) if accept is not None else None
        node, gained, ps = start, [], self.page_size
        lo = dev // ps  # `new` starts at page lo of `pages`
        if path:
            if path[-1].end > start.end + length:
                path[-1] = self.split(path[-1], start.end + length - path[-1].depth)
            node = path[-1]
        for host_only in path[k:]:
            first = (host_only.depth - start.end) // ps
            host_only.pages = node_runs(pages, new, first, host_only.size // ps, lo)
            gained.append(host_only)
        leaf = None
        if matched < len(key):
            leaf = self.add_leaf(node, key[matched:])
            leaf.pages = node_runs(pages, new, length // ps, len(pages) - length // ps, lo)
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
        residency.gain_device(self, gained)
        if self.learns:
            if leaf is not None:
                self.policy.on_insert(leaf)
            self.policy.on_cache(start if after is None else after, key, self.evictable_size + self.protected_size, use)
            self._follow_policy()
        return InsertResult(node, dev, tree_pages, gained)

    # ------------------------------------------------------------------ learning policies

    @staticmethod
    def on_device(node: NodeView) -> bool:
        return cast(TreeNode, node).pages is not None  # policies hold this tree's nodes as NodeViews

    def shadow(self, policy: FixedPolicyView) -> ShadowTree:
        """An empty metadata-only replay of this tree's core under `policy` (radix/shadow.py)."""
        return ShadowTree(policy, self.page_size, self.shadow_keys)

    def shadow_copy(self, policy: FixedPolicyView) -> ShadowTree:
        """A shadow under `policy` that starts from what this tree holds on the device now."""
        shadow = ShadowTree(policy, self.page_size, self.shadow_keys)
        shadow.load(self.roots.values())
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

    # ------------------------------------------------------------------ victims

    def evicted(self, victim: TreeNode) -> None:
        """`victim` (a popped device leaf) is about to lose its device copy: the policy learns."""
        if self.learns:
            self.policy.on_evict(victim)
            self._follow_policy()

    # ------------------------------------------------------------------ iteration

    def nodes(self) -> list[TreeNode]:
        """Every node of every namespace, parents before children (for checks, events, printing)."""
        out = list(self.roots.values())
        for node in out:
            out.extend(node.children.values())
        return out


