"""The tree core: one radix tree of page-aligned token keys, shared by the index and its shadows.

    TreeCore            nodes, the walk of a key, the split of an edge, a leaf added
      RadixTree         (radix/tree.py)    the core plus pages, locks, counters, evictable indexes
      ShadowTree        (radix/shadow.py)  the core with sizes and times only: an eviction policy's
                                           metadata-only replay (eviction/adaptive.py)

A PrefixNode is what every tree's node has: its identity, its edge (`key`, int32 little-endian
bytes, a whole number of pages, in a shadow too: radix/shadow.py),
its place (`parent`, `children` by first page, `depth`) and the fields eviction policies order by
(`last_access`, `created`, `hit_count`, `priority`). All but `children` are eviction/view.py's
NodeFields, which PrefixNode extends: policies read nodes through its NodeView (a Protocol these fields
satisfy), compiled as NodeFields (a field offset, not a getattr). The core writes them; its subclasses
add their own slots and write those.

A leaf's `children` is NO_CHILDREN, one empty dict every tree's leaves share, which refuses every write: most
nodes are leaves, and a dict each was a GC-counted allocation and 64 bytes a leaf. A node gets a dict of its own
when its first child is linked (`link_child`, or split_edge's new upper node) and gives it back when its last goes
(`unlink_child`: an emptied dict keeps its table). Whoever links or unlinks a child does so through these two.

Cost: a walk is one dict lookup and one memcmp per edge (a binary search of them on the edge where it ends
inside; compiled, one C call an edge does both: radixkv/_runs_native.c's `shared`); a split is O(1) (plus the
subclass's part).
Node creation is on every tree's hot path: subclasses call PrefixNode.__init__ directly (no super()
object). Typed for mypyc (radixkv/build.py): a tree's nodes are of one class, `N`, so a walk of a
RadixTree yields TreeNodes and one of a ShadowTree ShadowNodes, with no casts. (N's bound is PrefixNode[Any],
so a node's `parent` and `children` read through N are Any to mypy: a local that holds one is typed N, or
its fields would be read by generic getattrs, compiled.)
"""

from __future__ import annotations

from typing import Any, Callable, Final, Generic, NoReturn, TypeVar

from mypy_extensions import mypyc_attr

from radixkv.core_loader import native
from radixkv.eviction.view import NodeFields

N = TypeVar("N", bound="PrefixNode")  # a tree's own node class: its parent and children are of it too


# radixkv/_runs_native.c's `shared` while the compiled core runs (Final: compiled, a C static); None otherwise: then
# the walk compares with `startswith` and `parting`, which give the same
_c_shared: Final[Callable[[bytes, bytes, int, int], int] | None] = native("shared")
_c_joined: Final[Callable[[bytes, int, int, bytes], bytes] | None] = native("joined")  # (and these two: a slice
_c_starts_part: Final[Callable[[bytes, bytes, int, int], bool] | None] = native("starts_part")  # does it otherwise)


def joined(head: bytes, lo: int, hi: int, key: bytes) -> bytes:
    """head[lo:hi] + key: compiled, one copy in C (the slice and the join copy head's part twice)."""
    return head[lo:hi] + key if _c_joined is None else _c_joined(head, lo, hi, key)


def starts_part(key: bytes, head: bytes, lo: int, hi: int) -> bool:
    """key.startswith(head[lo:hi]): compiled, a memcmp in C, no slice."""
    return key.startswith(head[lo:hi]) if _c_starts_part is None else _c_starts_part(key, head, lo, hi)


@mypyc_attr(native_class=False)  # (a plain class, compiled too: a native one cannot extend dict)
class _NoChildren(dict):  # type: ignore[type-arg]
    """NO_CHILDREN's class: an empty dict that refuses every write (reads are a dict's own, compiled and not)."""

    __slots__ = ()

    def _refuse(self) -> NoReturn:
        raise TypeError("NO_CHILDREN is every leaf's shared empty children: link a child with link_child")

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        self._refuse()

    def __delitem__(self, key: Any) -> NoReturn:
        self._refuse()

    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        self._refuse()

    def clear(self) -> NoReturn:
        self._refuse()

    def pop(self, *args: Any) -> NoReturn:
        self._refuse()

    def popitem(self) -> NoReturn:
        self._refuse()

    def setdefault(self, *args: Any) -> NoReturn:
        self._refuse()

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()


NO_CHILDREN: Final[dict[bytes, Any]] = _NoChildren()  # a leaf's children (module docstring)


def link_child(parent: N, first: bytes, child: N) -> None:
    """`child` under `parent` by its first page `first`: parent's first child gets parent a dict of its own."""
    children = parent.children
    if children is NO_CHILDREN:
        parent.children = {first: child}
    else:
        children[first] = child


def unlink_child(parent: N, first: bytes) -> None:
    """The child under `parent` by first page `first` goes; parent's last gives its dict back for NO_CHILDREN."""
    children = parent.children
    del children[first]
    if not children:
        parent.children = NO_CHILDREN


class PrefixNode(NodeFields[N]):
    """A node of any tree: the fields policies read (eviction/view.py's NodeFields) and its children."""

    __slots__ = ("children",)

    def __init__(self, node_id: int, ns: bytes, parent: N | None, key: bytes, tick: int) -> None:
        NodeFields.__init__(self, node_id, ns, parent, key, tick)
        self.children: dict[bytes, N] = NO_CHILDREN  # first page of the child's key -> child; a leaf's: shared

    def __len__(self) -> int:
        return self.size


class TreeCore(Generic[N]):
    """Structure only: subclasses make their own nodes (`make_node`) and keep whatever else they carry."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.page_bytes = 4 * page_size  # key bytes per page: int32 tokens
        self.tick = 0  # logical clock: +1 per match or insert that touches nodes
        self._next_id = 0
        self._matched_tick = -1  # the tick of the last match when nothing has ticked since, else -1
        self.roots: dict[bytes, N] = {}  # namespace key -> root (which roots a subclass keeps: its own comment)

    def __del__(self) -> None:
        """The tree goes: its nodes go with it. A node holds its parent and is held by it (`children`), a
        cycle per edge, so a dropped tree's nodes and keys would wait for a full collection of the cycle
        collector (a few a run): a dropped shadow held megabytes of heap until then. Emptying every node's
        children leaves only references up, which refcounting frees at once, leaves first. Nodes that
        someone still holds keep their path up to the root, never their children."""
        stack = list(self.roots.values())
        while stack:
            children = stack.pop().children
            if children:
                stack += children.values()
                children.clear()

    def make_node(self, ns: bytes, parent: N | None, key: bytes) -> N:
        """A new node of this tree's own class, id `_next_id` (which it advances), created now."""
        raise NotImplementedError

    def count_insert_use(self, path: list[N], leaf: N | None) -> None:
        """A direct insert is a use of `path` (as in SGLang), but a request's match followed by its own
        insert counts once: from the end, the nodes the last match already counted are a prefix."""
        seen = self.tick if self._matched_tick == self.tick else -1
        for i in range(len(path) - 1, -1, -1):  # (not path[::-1]: a generic slice compiled; not reversed(): mypyc
            n = path[i]  # 2.4 fails on reversed() over a list of a TypeVar)
            if n.last_access == seen and n is not leaf:
                break
            n.hit_count += 1

    def walk(self, key: bytes, node: N, pos: int = 0) -> tuple[list[N], int]:
        """Read-only: the nodes a match of `key` (whole pages) below `node` passes through and the
        matched bytes (whole pages; the last node may be matched only in part). With `pos`, of key[pos:] (`node`
        ends there), not copied: the bytes are then counted from key's start."""
        pb, end = self.page_bytes, len(key)
        path: list[N] = []
        while pos < end:
            child: N | None = node.children.get(key[pos:pos + pb])  # (typed: its reads native, compiled)
            if child is None:
                break
            path.append(child)
            edge = child.key
            if _c_shared is not None:  # compiled: one C call (a startswith at an offset is a generic call)
                same = _c_shared(key, edge, pos, pb)
            elif key.startswith(edge, pos):
                same = len(edge)
            else:
                same = self.parting(edge, key, pos)
            pos += same
            if same < len(edge):
                break
            node = child
        return path, pos

    def ancestry(self, node: N, start: N) -> list[N]:
        """The nodes from just below `start` (an ancestor of `node`) down to `node`: a walk's path there."""
        path: list[N] = []
        x: N | None = node
        while x is not start:
            assert x is not None  # `start` is an ancestor
            path.append(x)
            x = x.parent
        path.reverse()
        return path

    def parting(self, edge: bytes, key: bytes, pos: int) -> int:
        """Bytes of whole pages that `edge` and `key[pos:]` share from the start, their first page equal: where
        a walk leaves an edge. A binary search: the first `lo` pages are known equal, so a step compares only
        pages [lo, mid) of both, sliced (~two edges' bytes copied in all). The interpreted walk's; the compiled
        one calls radixkv/_runs_native.c's `shared`, which gives the same (tests/test_shadow_walks.py)."""
        pb = self.page_bytes
        lo, hi = 1, min(len(edge), len(key) - pos) // pb
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if key[pos + lo * pb:pos + mid * pb] == edge[lo * pb:mid * pb]:
                lo = mid
            else:
                hi = mid - 1
        return lo * pb

    def split_edge(self, node: N, k: int) -> N:
        """Cut `node`'s edge after k tokens (whole pages): a new upper node takes the first k with
        node's times, hits and priority; `node` keeps the lower half and so its meaning."""
        kb = 4 * k
        parent: N | None = node.parent  # (typed: N's own parameter is Any to mypy, so `node.parent` is Any)
        assert parent is not None  # a root has no edge to cut
        upper = self.make_node(node.ns, parent, node.key[:kb])
        upper.last_access, upper.created = node.last_access, node.created
        upper.hit_count, upper.priority = node.hit_count, node.priority
        node.key = node.key[kb:]
        node.size -= k
        node.depth += k
        node.parent = upper
        upper.children = {node.key[:self.page_bytes]: node}  # (a new node's first child)
        parent.children[upper.key[:self.page_bytes]] = upper
        return upper

    def add_leaf(self, parent: N, key: bytes) -> N:
        leaf = self.make_node(parent.ns, parent, key)
        link_child(parent, key[:self.page_bytes], leaf)
        return leaf

