"""RadixTree: which token prefixes are cached, where their KV lives, and who protects them.

A pure index. It owns the nodes, their lock counts, the size counters and the evictable indexes,
and nothing else: `match` returns what is cached, `insert` returns what it kept and what was
already there, eviction (evict.py) returns the pages it let go. It never touches the page ledger,
the pools or KV; the caller moves pages (RadixCache). Each namespace has its own root, kept only while it has
children or locks (a read-only match of a new namespace leaves nothing behind).

Keys are page-granular bytes: every edge holds a whole number of pages, a child is found by its
first page's bytes, and a match always ends on a page boundary. The work per match or insert is
proportional to the pages compared (one memcmp per edge), never to the size of the tree.

    root ── [a b c d] ── [e f] ...          lock(node) adds 1 to lock_ref of node and every
                     └── [x y z w]           ancestor; a node with lock_ref > 0 is protected.

Counters (SGLang's meaning, over device-resident tokens): `evictable_size` is every cached token no
lock protects, `protected_size` every cached token on a locked path; `host_size` counts tokens with
a host-tier copy. Locks know their holder: `user_locks` (lock/unlock) and `seq_locks` (Sequences).

Where KV lives is kept in two evictable indexes (the order is the policy's key):

    index       nodes on the device, unlocked, with no child on the device     (device leaves)
    host_index  nodes with a host copy and no child with one                   (host leaves)

Every residency change goes through gain_device / drop_device / set_host / lose_host / unlink,
which keep the counters, the indexes and the event listener in step; the eviction walks that
choose victims are in evict.py.
"""

from __future__ import annotations

import weakref
from typing import Callable

import numpy as np

from radixkv.errors import LockError
from radixkv.eviction import EvictableIndex, EvictionPolicy, host_first
from radixkv.keys import common_bytes
from radixkv.radix.node import TreeNode
from radixkv.radix.types import DEVICE, HOST, USER, InsertResult, MatchInfo, ResidencyListener
from radixkv.radix.pins import Pins, pinned_last

_EMPTY = np.empty(0, dtype=np.int64)


class RadixTree:
    def __init__(self, page_size: int, policy: EvictionPolicy, host_tier: bool = False,
                 listener: ResidencyListener | None = None) -> None:
        self.page_size = page_size
        self.page_bytes = 4 * page_size
        self.policy = policy
        self.index = EvictableIndex(policy.key)
        self.pins: Pins | None = None  # pins with a deadline (radix/pins.py), from enable_pins() on
        self.host_index = EvictableIndex(host_first(policy)) if host_tier else None
        self.roots: dict[bytes, TreeNode] = {}  # namespace key -> root, while it has children or locks
        self._idle_roots: weakref.WeakValueDictionary[bytes, TreeNode] = weakref.WeakValueDictionary()
        self.listener = listener
        self.evictable_size = 0
        self.protected_size = 0
        self.host_size = 0
        self._learns = policy.learns
        self._epoch = policy.epoch  # the policy's order the indexes are keyed by
        self._tick = 0
        self._next_id = 0

    # ------------------------------------------------------------------ structure

    def root(self, ns: bytes) -> TreeNode:
        """The root of namespace `ns` (one object per namespace while anyone holds it)."""
        root = self.roots.get(ns)
        if root is None:
            root = self._idle_roots.get(ns)
            if root is None:
                root = self._idle_roots[ns] = self.new_node(ns, None, b"", _EMPTY)
        return root

    def _hold_root(self, root: TreeNode) -> None:
        if root.ns not in self.roots:
            self.roots[root.ns] = root
            self._idle_roots.pop(root.ns, None)

    def release_root_if_idle(self, root: TreeNode) -> None:
        if not root.children and not root.lock_ref and self.roots.get(root.ns) is root:
            del self.roots[root.ns]
            self._idle_roots[root.ns] = root

    def new_node(self, ns: bytes, parent: TreeNode | None, key: bytes, pages: np.ndarray | None) -> TreeNode:
        node = TreeNode(self, self._next_id, ns, parent, key, pages, self._tick)
        self._next_id += 1
        return node

    def split(self, node: TreeNode, k: int) -> TreeNode:
        """Cut `node`'s edge after k tokens (whole pages). The new upper node takes the first k;
        `node` keeps the lower half, so it still means the same prefix. Counters are unchanged."""
        kb, kp = 4 * k, k // self.page_size
        parent = node.parent
        upper = self.new_node(node.ns, parent, node.key[:kb], None if node.pages is None else node.pages[:kp].copy())
        upper.lock_ref, upper.last_access, upper.created = node.lock_ref, node.last_access, node.created
        upper.hit_count, upper.priority = node.hit_count, node.priority
        if self.pins is not None:
            self.pins.split(upper, node)
        if node.host_pages is not None:
            upper.host_pages, node.host_pages = node.host_pages[:kp].copy(), node.host_pages[kp:].copy()
        node.key = node.key[kb:]
        node.size -= k
        if node.pages is not None:
            node.pages = node.pages[kp:].copy()
        node.depth += k
        node.parent = upper
        if self.listener is not None:  # KV events: the listener cuts what it keeps for `node`
            self.listener.split(upper, node)
        upper.children[node.key[:self.page_bytes]] = node
        parent.children[upper.key[:self.page_bytes]] = upper
        return upper

    # ------------------------------------------------------------------ lookup

    def _walk(self, key: bytes, node: TreeNode) -> tuple[list[TreeNode], int]:
        """Read-only: the nodes a match of `key` (whole pages) below `node` passes through, on any
        tier, and the matched bytes (whole pages; the last node may be matched only in part)."""
        pb, pos, end, path = self.page_bytes, 0, len(key), []
        while pos < end:
            child = node.children.get(key[pos:pos + pb])
            if child is None:
                break
            path.append(child)
            if key.startswith(child.key, pos):
                pos += len(child.key)
                node = child
            else:
                pos += common_bytes(child.key, key, pos, pb)
                break
        return path, pos

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
        path, matched = self._walk(key, start)
        if not path:
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
        if self._learns:
            if k:
                self.policy.on_hit(path[k - 1])
            self._learn_lookup(start, key, dev)
        if k == 0:
            return MatchInfo(start, 0, _EMPTY, length)
        node = path[k - 1]
        return MatchInfo(node, dev, np.concatenate([n.pages for n in path[:k]]), length - dev)

    def host_pages_below(self, key: bytes, start: TreeNode) -> np.ndarray:
        """Read-only: host pages of the host-only continuation of `key` below `start` (whole pages),
        where `start` ends a device match of the tokens before `key`."""
        path, matched = self._walk(key, start)
        host = [n.host_pages for n in path if n.pages is None]
        return np.concatenate(host)[:matched // self.page_bytes] if host else _EMPTY

    def locate(self, key: bytes, start: TreeNode) -> TreeNode:
        """The node ending the longest device-cached prefix of `key` below `start` (whole pages),
        splitting the edge where it ends. Unlike `match`, refreshes no recency or hit count."""
        path, matched = self._walk(key, start)
        k, dev = self._device_prefix(path, matched // 4, start)
        if not k:
            return start
        if path[k - 1].end > start.end + dev:
            return self.split(path[k - 1], start.end + dev - path[k - 1].depth)
        return path[k - 1]

    def enable_pins(self) -> Pins:
        """Start keeping pins (before the first one): from now on the device index orders pinned
        leaves after every unpinned one. O(evictable leaves), once."""
        if self.pins is None:
            self.pins = Pins(self.index)
            self.index.rekey(pinned_last(self.policy.key))
        return self.pins

    def pinned_length(self, key: bytes, start: TreeNode) -> int:
        """Read-only: how many leading tokens of `key` below `start` are pinned (pins are ancestor-closed)."""
        path, matched = self._walk(key, start)
        n = 0
        for node in path:
            if not node.pin_until or node.pages is None:
                break
            n = min(node.end - start.end, matched // 4)
        return n

    def _touch(self, path: list[TreeNode], hit: bool) -> None:
        self._tick += 1
        tick, index, members = self._tick, self.index, self.index.members
        for node in path:
            node.last_access = tick
            node.hit_count += hit
            if node.id in members:
                index.refresh(node)
        if self.host_index is not None:
            for node in path:
                self.host_index.refresh(node)

    # ------------------------------------------------------------------ insert

    def insert(self, key: bytes, pages: np.ndarray, start: TreeNode, priority: int = 0,
               accept: Callable[[int, np.ndarray], None] | None = None) -> InsertResult:
        """Cache `key` (whole pages) below `start` with device `pages` (int64, one per page of key).

        `accept(cached_len, tree_pages)` sees what is already cached before anything changes and
        may raise to refuse (the tree is then unchanged). Host-only nodes on the way take their part
        of `pages`; the new suffix becomes a leaf. The caller's pages for [0, cached_len) are not
        used (they are the tree's own, or duplicates the caller frees); pages are copied."""
        path, matched = self._walk(key, start)
        length = matched // 4
        k, dev = self._device_prefix(path, length, start)
        if k == 1:  # the usual case (a single edge matched): a view, read only below
            tree_pages = path[0].pages[:dev // self.page_size]
        else:
            tree_pages = np.concatenate([n.pages for n in path[:k]])[:dev // self.page_size] if k else _EMPTY
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
            leaf = self.new_node(start.ns, node, key[matched:], pages[length // ps:].copy())
            node.children[key[matched:matched + self.page_bytes]] = leaf
            if node.parent is None:
                self._hold_root(node)
            path.append(leaf)
            gained.append(leaf)
            node = leaf
        if priority > 0:
            for n in path:
                n.priority = max(n.priority, priority)
        if path:
            self._touch(path, hit=False)
        self.gain_device(gained)
        if self._learns:
            if leaf is not None:
                self.policy.on_insert(leaf)
            self.policy.on_cache(start, key, self.evictable_size + self.protected_size)
            self._follow_policy()
        return InsertResult(node, dev, tree_pages, gained)

    # ------------------------------------------------------------------ learning policies

    def _learn_lookup(self, start: TreeNode, key: bytes, length: int) -> None:
        self.policy.on_lookup(start, key, length)
        self._follow_policy()

    def _follow_policy(self) -> None:
        """A learning policy that changed its order wholesale (a new `epoch`): re-key the indexes."""
        if self.policy.epoch != self._epoch:
            self._epoch = self.policy.epoch
            self.index.rekey(self.policy.key if self.pins is None else pinned_last(self.policy.key))
            if self.host_index is not None:
                self.host_index.rekey(host_first(self.policy))

    # ------------------------------------------------------------------ locks

    def lock(self, node: TreeNode, holder: int) -> None:
        """Protect `node` and its ancestors; `holder` is USER or SEQUENCE. LockError (nothing
        changed) for a node of another cache or one no longer on the device."""
        self.check_node(node)
        if node.evicted or node.pages is None:
            raise LockError(f"cannot lock {node}: it is no longer on the device; match_prefix again")
        if holder == USER:
            node.user_locks += 1
        else:
            node.seq_locks += 1
        if not node.lock_ref:
            self.index.discard(node)  # only the bottom node can be a leaf: ancestors have it as a child
        moved, x = 0, node
        while x is not None:
            if not x.lock_ref:
                moved += x.size
            x.lock_ref += 1
            root, x = x, x.parent
        self.evictable_size -= moved
        self.protected_size += moved
        self._hold_root(root)

    def unlock(self, node: TreeNode, holder: int) -> None:
        """Undo one lock of `node` by `holder`. LockError (nothing changed) when that holder has none."""
        self.check_node(node)
        if (node.user_locks if holder == USER else node.seq_locks) == 0:
            who = "lock(node)" if holder == USER else "an open Sequence"
            raise LockError(f"unlock of {node} without a matching {who}: a node is released only by "
                            "whoever locked it (a Sequence's lock only by close())")
        if holder == USER:
            node.user_locks -= 1
        else:
            node.seq_locks -= 1
        moved, x = 0, node
        while x is not None:
            x.lock_ref -= 1
            if not x.lock_ref:
                moved += x.size
            root, x = x, x.parent
        self.protected_size -= moved
        self.evictable_size += moved
        if not node.lock_ref:
            self._reindex(node)
        self.release_root_if_idle(root)

    def move_lock(self, old: TreeNode, new: TreeNode, holder: int) -> None:
        """Move one lock of `holder` from `old` down to its descendant `new` (a Sequence whose
        committed prefix grew). Ancestors of `old` keep their counts, so this costs the nodes
        between the two, not the depth: a decode step at page_size 1 stays O(1)."""
        if new is old:
            return
        if holder == USER:
            old.user_locks -= 1
            new.user_locks += 1
        else:
            old.seq_locks -= 1
            new.seq_locks += 1
        if not new.lock_ref:
            self.index.discard(new)
        moved, x = 0, new
        while x is not old:
            if not x.lock_ref:
                moved += x.size
            x.lock_ref += 1
            x = x.parent
        self.evictable_size -= moved
        self.protected_size += moved

    def check_node(self, node: object) -> None:
        if not isinstance(node, TreeNode):
            raise LockError(f"expected a TreeNode from match_prefix, got {type(node).__name__}")
        if node.tree is not self:
            raise LockError(f"{node} belongs to another RadixCache")

    # ------------------------------------------------------------------ residency

    def _reindex(self, node: TreeNode) -> None:
        """Recompute `node`'s membership of both evictable indexes."""
        if node.parent is None:
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
        self._reindex(node)
        self._reindex(node.parent)
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
                self.index.discard(node.parent)
            if self.listener is not None:
                self.listener.stored(node, DEVICE)

    def drop_device(self, node: TreeNode) -> None:
        if self.listener is not None:
            self.listener.removed(node, DEVICE)
        self.evictable_size -= node.size
        if self.pins is not None:
            self.pins.dropped(node)
        node.pages = None

    def set_host(self, node: TreeNode, host_pages: np.ndarray) -> None:
        """`node` now has a host copy in `host_pages` (int64, one per page; the KV is copied)."""
        node.host_pages = host_pages
        self.host_size += node.size
        self._reindex(node)
        self._reindex(node.parent)
        if self.listener is not None:
            self.listener.stored(node, HOST)

    def lose_host(self, node: TreeNode) -> None:
        if self.listener is not None:
            self.listener.removed(node, HOST)
        self.host_size -= node.size
        node.host_pages = None
        self._reindex(node)
        self._reindex(node.parent)

    def unlink(self, node: TreeNode) -> None:
        """Remove a node that no tier holds any more (it has no children)."""
        self.index.discard(node)
        if self.host_index is not None:
            self.host_index.discard(node)
        parent = node.parent
        del parent.children[node.key[:self.page_bytes]]
        node.evicted = True
        self._reindex(parent)
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
