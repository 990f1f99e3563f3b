"""ShadowTree: the tree core (radix/core.py) with sizes and times only, no pages, KV or locks.

What a prefix cache under another eviction policy would hold. A learning policy
(eviction/adaptive.py) replays the real cache's traffic into one: the same matches and inserts,
keys and namespaces, a capacity that follows the real cache's occupancy. It runs the index's own
core (the same walk and split, so a match splits the edge where it ends and counts a hit on every
node it passed); an insert adds one leaf; an eviction takes the leaf with the smallest policy key
and trims its tail when less is needed, as radix/evict.py does. So a shadow running policy P
reports, request for request, the hits the real cache would get under P
(tests/test_adaptive.py checks this against the real cache on the bench traces).

Its nodes and its evictable leaves' heap are radix/shadow_heap.py's. The adaptive policy gets shadows from the tree
it serves (RadixTree.shadow / shadow_copy) through eviction/view.py, and never imports this module.

Keys: int32 token bytes, as the real tree's, at every page size. An edge is, where it can be, the real tree's own
bytes object: told where the real match ended (radix/shadow_keys.py), a match gives the deepest edge of its walk
that ends where a real edge of that match ends, and the lower half of an edge it split, the real node's key when
the bytes are equal (`_share`); an insert's new leaf keeps the real new leaf's key (`tail`): one copy for both trees.

Cost per call: one walk over the edges of the key (the core's: where the key and an edge part, a binary search
of memcmps, `parting`; a match told the real end takes the edges that are the real path's own key objects without
a compare, `_walk_along`), a split at most, and O(log n) heap work per leaf touched or evicted. An insert that
extends the last match walks on from where it ended; it may take its key as the match's key, a cut and the rest
(head[:cut] + key: the adaptive policy's insert that the real tree walked on from its lookup's end), never put
together then. A trim keeps the victim's head in place under the id the upper node of a split would take (the
same keys and order, no new node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

from radixkv.eviction.view import NodeFields, ShadowView
from radixkv.radix.core import PrefixNode, joined, starts_part, unlink_child
from radixkv.radix.shadow_heap import LeafHeap, ShadowNode, pop_first
from radixkv.radix.shadow_keys import ShadowKeys

if TYPE_CHECKING:
    from radixkv.eviction.view import FixedPolicyView

_SCAN: Final = 4  # _walk_along looks for a shared edge among this many children at most by their key objects


class ShadowTree(LeafHeap, ShadowView):
    """A metadata-only prefix cache under `policy` (a fixed policy: its key reads node fields only), its
    evictable leaves in LeafHeap's heap; a namespace's root is in `roots` while it has children."""

    def __init__(self, policy: FixedPolicyView, page_size: int, keys: ShadowKeys | None = None) -> None:
        super().__init__(policy, page_size)
        self.keys = keys if keys is not None else ShadowKeys()  # shared by a tree's shadows
        self._counts_uses = policy.insert_is_use
        self._held: ShadowNode | None = None  # the path end an insert protects while it evicts
        self._refreshed: ShadowNode | None = None  # a leaf the last match refreshed, re-keyed in the heap later
        self._version = 0  # bumped by every insert: a remembered walk is valid only within one version
        self._matched: tuple[bytes, bytes, list[ShadowNode], int, int] | None = None  # the last match's walk

    def match(self, ns: bytes, key: bytes, end: int = -1) -> int:
        """Tokens of `key` (int32 token bytes; with `end` >= 0 its first `end` bytes only, not copied; a trailing
        partial page matches nothing) the shadow holds below namespace `ns`; refreshes them."""
        if self._refreshed is not None:
            self._rekey_refreshed(None)
        root = self.roots.get(ns)
        self._matched_tick = -1
        if root is None:
            self.tick += 1
            return 0
        real = self.keys.real_end(key)
        path, pos = self.walk(key, root) if real is None else self._walk_along(key, root, real)
        if 0 <= end < pos:  # the walk of key[:end] is this one's, cut at end's last whole page
            pos = end // self.page_bytes * self.page_bytes
            while path and 4 * path[-1].depth >= pos:
                path.pop()
        if not path:
            self.tick += 1
            return 0
        last, matched, lower = path[-1], pos // 4, None
        if last.depth + last.size > matched:  # the walk ended inside it: split where the match ends
            lower, last = last, self.split_edge(last, matched - last.depth)
            path[-1] = last
        self.tick = tick = self.tick + 1
        for node in path:
            node.last_access = tick
            node.hit_count += 1
        if last.hkey is not None:  # only the last node of a path can be a leaf: re-keyed at the next call
            self._refreshed = last
        self._share(path, lower, real)
        self._matched_tick = tick
        self._matched = (ns, key, path, pos, self._version)
        return matched

    def _walk_along(self, key: bytes, root: ShadowNode, real: PrefixNode[Any]) -> tuple[list[ShadowNode], int]:
        """The walk of `key` from `root`, where `real` is a real node on the real walk of that key (or below its end,
        on a path that goes on from it): while the shadow's edges are the very key objects of the real path's nodes
        at the same depths (shared: `_share`, `tail`) and end within the key, they are matched whole without a
        compare (the real walk compared them); from the first that is not, the core's walk. Such an edge is found
        among at most _SCAN children by its key object (the child under the key's page: the edges of the real path
        spell the key); among more, or where none is, by the dict's lookup of the key's page."""
        chain: list[NodeFields[Any]] = []  # the real path, deepest first
        r = cast("NodeFields[Any]", real)
        while r.parent is not None:
            chain.append(r)
            r = r.parent
        pb, end, pos, node = self.page_bytes, len(key), 0, root
        path: list[ShadowNode] = []
        for i in range(len(chain) - 1, -1, -1):
            r = chain[i]
            edge = r.key
            if pos + len(edge) > end or 4 * r.depth != pos:
                break
            children, child = node.children, None
            if not children:  # (a leaf: NO_CHILDREN, whose values() would be a generic call, compiled)
                return path, pos
            if len(children) <= _SCAN:  # the child that shares the edge, by the key object (no slice, no hash)
                for c in children.values():
                    if c.key is edge:
                        child = c
                        break
            if child is None:
                child = children.get(key[pos:pos + pb])
                if child is None:
                    return path, pos
                if child.key is not edge:  # the core walk compares it, from its parent
                    break
            path.append(child)
            pos += len(edge)
            node = child
        more, pos = self.walk(key, node, pos)
        path += more
        return path, pos

    def _share(self, path: list[ShadowNode], lower: ShadowNode | None, real: PrefixNode[Any] | None) -> None:
        """The deepest node of `path` (a walk's, from a root's child down) that ends where a node on the path
        of `real` (a real node the same key's walk reached, or one below it) ends takes that node's key object
        if it spans the same tokens (bytes equal): one object for both trees, not a copy each, where they split
        an edge alike (the real tree's split makes new objects). A few steps up both paths, no more: an edge
        shared once stays shared while neither tree splits it. `lower`: the lower half of the path's last edge,
        split by this walk, likewise against real's child."""
        if real is None:
            return
        fields = cast("NodeFields[Any]", real)  # (its fields read natively, compiled: a PrefixNode's are not)
        if lower is not None and fields.depth + fields.size == lower.depth:
            below: NodeFields[Any] | None = real.children.get(lower.key[:self.page_bytes])
            if below is not None and below.size == lower.size and below.key == lower.key:
                lower.key = below.key
        i, r = len(path) - 1, cast("NodeFields[Any] | None", fields)
        while i >= 0 and r is not None and r.parent is not None:
            node = path[i]
            end, real_end = node.depth + node.size, r.depth + r.size
            if end < real_end:
                r = r.parent
                continue
            if end == real_end:
                if node.depth == r.depth and node.key is not r.key and node.key == r.key:
                    node.key = r.key
                return
            i -= 1

    def _rekey_refreshed(self, end: ShadowNode | None) -> None:
        """Re-key the leaf the last match refreshed, unless it is `end`, the path end of the insert that follows
        (a new leaf below it drops it from the heap, else the insert re-keys it): one heap push, not two. The
        heap's order is by keys alone, so a push made later with the same key changes nothing."""
        node, self._refreshed = self._refreshed, None
        if node is not None and node is not end and node.hkey is not None:
            self._push(node)

    def _walk_on(self, ns: bytes, key: bytes, root: ShadowNode, head: bytes | None, cut: int
                 ) -> tuple[list[ShadowNode], int, bytes, int]:
        """The walk of the key (`key`, or head[:cut] + key), continued from the last match when the key
        extends it and nothing changed since (the lifecycle match(prompt) -> insert(prompt + output) walks
        the prompt once), and the key's bytes past the walk: (path, pos, left, off), the key's from pos on
        being left[off:]. Where the last match asked `head` itself the key is never put together, and its
        bytes past the match are copied only for a walk that can go on from there."""
        matched, self._matched = self._matched, None
        if matched is not None:
            m_ns, m_key, path, pos, version = matched
            if version == self._version and m_ns == ns:
                past = _past(m_key, pos, key, head, cut)
                if past is not None:
                    left, off = past
                    node, pb = path[-1], self.page_bytes
                    if off < len(left) and left[off:off + pb] in node.children:
                        more, end = self.walk(left, node, off)
                        return path + more, pos + end - off, left, end
                    return path, pos, left, off
        if head is not None:
            key = joined(head, 0, cut, key)
        path, pos = self.walk(key, root)
        return path, pos, key, pos

    def insert(self, ns: bytes, key: bytes, capacity: int, use: bool = True, tail: bytes | None = None,
               head: bytes | None = None, cut: int = 0) -> int:
        """Cache `key` (int32 token bytes, a trailing partial page dropped; with `head`, head[:cut] + key, `cut`
        bytes of whole pages) below `ns`, first evicting down to `capacity` tokens in all (never the path of the
        key itself); `use` counts it as RadixTree.insert(use=True) does. `tail`, the key's last bytes (the
        caller's promise: the real tree's new leaf's key), is a new leaf's key when the leaf needs that many
        (one bytes object for both trees instead of a copy each; not compared). Returns the tokens added."""
        root = self.roots.get(ns)
        if root is None:
            root = self._root(ns)
        if len(key) % self.page_bytes:  # a partial page matches nothing: it is not cached
            key = key[:len(key) - len(key) % self.page_bytes]
        path, pos, left, off = self._walk_on(ns, key, root, head, cut)
        self._version += 1
        node = root
        if path:  # (pos: bytes of whole pages, 4 a token)
            node = path[-1]
            if node.depth + node.size > pos // 4:
                node = path[-1] = self.split_edge(node, pos // 4 - node.depth)
        if self._refreshed is not None:
            self._rekey_refreshed(node)
        excess = self.used + (len(left) - off) // 4 - capacity
        if excess > 0:
            self._held = node
            if node.hkey is not None:
                self._drop(node)
            self.evict(excess)
            self._held = None
            if node.parent is not None and not node.children and off >= len(left):  # (else a new leaf's parent)
                self._push(node)
            if ns not in self.roots:  # eviction drops emptied roots, this one included
                self.roots[ns] = root
        leaf = None
        if off < len(left):
            share = tail is not None and len(tail) == len(left) - off  # (tail is the key's end: left's)
            leaf = self.add_leaf(node, tail if share and tail is not None else left[off:] if off else left)
            self.used += leaf.size
            path.append(leaf)
            if node.hkey is not None:
                self._drop(node)
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
        if self._refreshed is not None:
            self._rekey_refreshed(None)
        ps, freed = self.page_size, 0
        while freed < num_tokens and self._live:
            leaf = self._take_least()  # its entry is the heap's first: popped or replaced below
            keep = leaf.size - -(-(num_tokens - freed) // ps) * ps
            if keep > 0:  # only its tail pages go: its head stays as the node a split would make (with the next id)
                freed += leaf.size - keep
                leaf.key = leaf.key[:4 * keep]
                leaf.size = keep
                leaf.id = self._next_id
                self._next_id += 1
                self._push(leaf, True)
                break
            freed += leaf.size
            parent = leaf.parent
            assert parent is not None  # a leaf in the heap is never a root
            unlink_child(parent, leaf.first)  # (the dict's own key object: no slice, its hash kept)
            if parent.parent is None and not parent.children:
                del self.roots[parent.ns]
            if parent.children or parent.parent is None or parent is self._held:
                pop_first(self._heap)
            else:
                self._push(parent, True)  # a leaf now
        self.used -= freed
        return freed

    def fork(self, policy: FixedPolicyView) -> ShadowTree:
        """A copy of this shadow under `policy` (LeafHeap.copy_nodes): what it would hold had it run `policy` so
        far, if it has not evicted yet and `policy` reads no hit counts that this one's inserts counted."""
        twin = ShadowTree(policy, self.page_size, self.keys)
        twin.copy_nodes(self)
        twin.used = self.used
        return twin


def _past(m_key: bytes, pos: int, key: bytes, head: bytes | None, cut: int) -> tuple[bytes, int] | None:
    """(left, off), the key's (`key`, or head[:cut] + key) bytes from `pos` on being left[off:], if its first
    `pos` are `m_key`'s (a match's walk that reached `pos` is the key's walk there), else None."""
    if head is None:
        # (the lifecycle's insert extends its match's key: no copy)
        if key is m_key or key.startswith(m_key) or pos < len(m_key) and starts_part(key, m_key, 0, pos):
            return key, pos
        return None
    if head is not m_key:
        return None
    if pos <= cut:
        return (key, 0) if pos == cut else (joined(head, pos, cut, key), 0)
    return (key, pos - cut) if starts_part(key, head, cut, pos) else None
