"""The tree core: one radix tree of page-aligned token keys, shared by the index and its shadows.

    TreeCore            nodes, the walk of a key, the split of an edge, a leaf added
      RadixTree         (radix/tree.py)    the core plus pages, locks, counters, evictable indexes
      ShadowTree        (radix/shadow.py)  the core with sizes and times only: an eviction policy's
                                           metadata-only replay (eviction/adaptive.py)

A PrefixNode is what every tree's node has: its identity, its edge (`key`, int32 little-endian
bytes, a whole number of pages), its place (`parent`, `children` by first page, `depth`) and the
fields eviction policies order by (`last_access`, `created`, `hit_count`, `priority`). Policies
read nodes through eviction/view.py's NodeView, which these fields satisfy. The core writes them;
its subclasses add their own slots and write those.

Cost: a walk is one dict lookup and one memcmp per edge; a split is O(1) (plus the subclass's part).
Node creation is on every tree's hot path: subclasses call PrefixNode.__init__ directly (no super()
object) and split_edge / add_leaf construct inline.
"""

from __future__ import annotations

from radixkv.keys import common_bytes


class PrefixNode:
    __slots__ = ("id", "tree", "ns", "parent", "children", "key", "size", "depth", "last_access", "created",
                 "hit_count", "priority")

    def __init__(self, tree: TreeCore, node_id: int, ns: bytes, parent: PrefixNode | None, key: bytes,
                 tick: int) -> None:
        self.id = node_id
        self.tree = tree  # the owning tree: a node of another tree is rejected, never used
        self.ns = ns  # canonical namespace key (radixkv.keys)
        self.parent = parent
        self.children: dict[bytes, PrefixNode] = {}  # first page of the child's key -> child
        self.key = key  # int32 little-endian token ids of this edge, a whole number of pages
        self.size = len(key) // 4  # tokens on this edge
        self.depth = 0 if parent is None else parent.depth + parent.size  # tokens above this edge
        self.last_access = tick  # logical clock of the last match/insert that touched it
        self.created = tick
        self.hit_count = 0  # uses: matches through it (and direct inserts where the policy counts them)
        self.priority = 0  # max priority of the requests that inserted it

    def __len__(self) -> int:
        return self.size

    @property
    def end(self) -> int:
        """Tokens from the root to the end of this edge."""
        return self.depth + self.size


class TreeCore:
    """Structure only: subclasses set `node_type` and keep whatever else their nodes carry."""

    node_type: type[PrefixNode] = PrefixNode

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.page_bytes = 4 * page_size
        self.tick = 0  # logical clock: +1 per match or insert that touches nodes
        self._next_id = 0
        self._matched_tick = -1  # the tick of the last match when nothing has ticked since, else -1

    def make_node(self, ns: bytes, parent: PrefixNode | None, key: bytes) -> PrefixNode:
        node = self.node_type(self, self._next_id, ns, parent, key, self.tick)
        self._next_id += 1
        return node

    def count_insert_use(self, path: list, leaf: PrefixNode | None) -> None:
        """A direct insert is a use of `path` (as in SGLang), but a request's match followed by its own
        insert counts once: from the end, the nodes the last match already counted are a prefix."""
        seen = self.tick if self._matched_tick == self.tick else -1
        for n in reversed(path):
            if n.last_access == seen and n is not leaf:
                break
            n.hit_count += 1

    def walk(self, key: bytes, node: PrefixNode) -> tuple[list, int]:
        """Read-only: the nodes a match of `key` (whole pages) below `node` passes through and the
        matched bytes (whole pages; the last node may be matched only in part)."""
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

    def split_edge(self, node: PrefixNode, k: int) -> PrefixNode:
        """Cut `node`'s edge after k tokens (whole pages): a new upper node takes the first k with
        node's times, hits and priority; `node` keeps the lower half and so its meaning."""
        kb, parent = 4 * k, node.parent
        upper = self.node_type(self, self._next_id, node.ns, parent, node.key[:kb], self.tick)  # make_node, inline
        self._next_id += 1
        upper.last_access, upper.created = node.last_access, node.created
        upper.hit_count, upper.priority = node.hit_count, node.priority
        node.key = node.key[kb:]
        node.size -= k
        node.depth += k
        node.parent = upper
        upper.children[node.key[:self.page_bytes]] = node
        parent.children[upper.key[:self.page_bytes]] = upper
        return upper

    def add_leaf(self, parent: PrefixNode, key: bytes) -> PrefixNode:
        leaf = self.node_type(self, self._next_id, parent.ns, parent, key, self.tick)  # make_node, inline
        self._next_id += 1
        parent.children[key[:self.page_bytes]] = leaf
        return leaf
