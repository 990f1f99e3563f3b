"""What eviction sees of a tree: a narrow, named view of a node and of its tree, defined once here.

Policies order nodes and learn from the tree's hooks; they never change a node. The radix index's
TreeNode satisfies CachedNodeView (a NodeView with its tree) and RadixTree TreeView; a shadow's
ShadowNode (both are PrefixNodes, radix/core.py) satisfies NodeView: every field a key function
reads, which is all a shadow's fixed policy asks of it. Hooks see CachedNodeViews, keys NodeViews.
A shadow itself (radix/shadow.py's ShadowTree) and the keys it shares (ShadowKeys) inherit ShadowView and
ShadowKeysView, mypyc traits declared here. Nothing in eviction/ imports radix/: the dependency runs one way,
radix -> eviction.

Every node a policy is given is also a NodeFields: the class that holds the NodeView's plain fields
(PrefixNode extends it), so a TreeNode and a ShadowNode both are one. Compiled (mypyc), a field read through
the NodeView Protocol is a generic getattr (~235 instructions), one through NodeFields an offset; so the
compiled policies read a node as `cast(NodeFields, node)` (interpreted, a no-op; compiled, a type check). The
built-in keys (policies.py) test `isinstance` first and read any other object with NodeView's fields through
the Protocol, so they answer alike compiled and pure. NodeView stays a Protocol: a mypyc trait that real nodes
implement crashes mypyc where an attribute overrides a Protocol property (bench/RESULTS.md, round 16,
"prior33").
"""

from __future__ import annotations

from typing import Generic, Mapping, Protocol, TypeVar

from mypy_extensions import trait

F = TypeVar("F", bound="NodeFields")  # a tree's own node class: its parent is of it too


class NodeView(Protocol):
    """A node as policies read it (read-only)."""

    id: int  # unique within its tree; keys end with it
    ns: bytes  # canonical namespace key
    key: bytes  # int32 little-endian tokens of the edge, whole pages
    size: int  # tokens on the edge
    depth: int  # tokens above the edge
    last_access: int  # logical clock of the last match or insert that touched it
    created: int  # logical clock at creation
    hit_count: int  # uses: matches through it (and direct inserts)
    priority: int  # max priority of the requests that inserted it

    @property
    def parent(self) -> NodeView | None: ...  # None: a namespace root

    @property
    def children(self) -> Mapping[bytes, NodeView]: ...  # first page of the child's key -> child

    @property
    def end(self) -> int: ...  # depth + size


class NodeFields(Generic[F]):
    """The plain fields of a NodeView, as a class (module docstring): every tree's node extends it (PrefixNode's
    __init__ calls this one). Written by the trees (radix/core.py) only."""

    __slots__ = ("id", "ns", "parent", "key", "size", "depth", "last_access", "created", "hit_count", "priority")

    def __init__(self, node_id: int, ns: bytes, parent: F | None, key: bytes, tick: int) -> None:
        self.id = node_id
        self.ns = ns  # canonical namespace key (radixkv.keys)
        self.parent: F | None = parent
        self.key = key  # int32 little-endian token ids of this edge, a whole number of pages
        self.size: int = len(key) // 4  # tokens on this edge
        self.depth: int = 0 if parent is None else parent.depth + parent.size  # tokens above this edge
        self.last_access = tick  # logical clock of the last match/insert that touched it
        self.created = tick
        self.hit_count = 0  # uses: matches through it (and direct inserts where the policy counts them)
        self.priority = 0  # max priority of the requests that inserted it

    @property
    def end(self) -> int:
        """Tokens from the root to the end of this edge."""
        return self.depth + self.size


class CachedNodeView(NodeView, Protocol):
    """A node of the real cache (not a shadow's), as a learning policy's hooks see it: with its tree."""

    @property
    def tree(self) -> TreeView: ...


class FixedPolicyView(Protocol):
    """A fixed policy as a shadow runs it (eviction/policies.py's EvictionPolicy satisfies it)."""

    @property
    def insert_is_use(self) -> bool: ...  # a direct insert counts as a use

    def key(self, node: NodeView) -> tuple: ...  # eviction order: smallest first


@trait
class ShadowView:
    """A metadata-only replay of a tree under one fixed policy (radix/shadow.py's ShadowTree inherits it). A mypyc
    trait, not a Protocol: compiled, the policy's calls into its shadows are native (a vtable's), where a Protocol's
    are generic method calls (arguments boxed and parsed by name); interpreted, a plain base class."""

    def match(self, ns: bytes, key: bytes, end: int = -1) -> int:  # tokens held of key[:end]; refreshes
        raise NotImplementedError

    def insert(self, ns: bytes, key: bytes, capacity: int, use: bool, tail: bytes | None = None,
               head: bytes | None = None, cut: int = 0) -> int:
        # evict down to capacity, add; `tail`: an object equal to key's end that a new leaf may keep instead of a
        # copy; with `head` the key is head[:cut] + key (never put together where the last match asked `head` itself)
        raise NotImplementedError

    def fork(self, policy: FixedPolicyView) -> ShadowView:  # a copy under `policy` (before its first eviction)
        raise NotImplementedError


@trait
class ShadowKeysView:
    """Where the real cache's last match ended, told to a tree's shadows (radix/shadow_keys.py's ShadowKeys inherits
    it; a trait, as ShadowView is)."""

    def along(self, key: bytes, node: NodeView) -> None:  # node: key's real match end; shadows share its keys
        raise NotImplementedError


class TreeView(Protocol):
    """The tree a node belongs to, as a learning policy sizing its shadows sees it."""

    page_size: int
    evictable_size: int  # device tokens no lock protects
    protected_size: int  # device tokens on a locked path

    @property
    def shadow_keys(self) -> ShadowKeysView: ...  # the keys its shadows share

    def on_device(self, node: NodeView) -> bool: ...  # does node have device KV now

    def shadow(self, policy: FixedPolicyView) -> ShadowView: ...  # an empty shadow under policy

    def shadow_copy(self, policy: FixedPolicyView) -> ShadowView: ...  # a shadow holding what the tree holds now
