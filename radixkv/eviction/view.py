"""What eviction sees of a tree: a narrow, named view of a node and of its tree, defined once here.

Policies order nodes and learn from the tree's hooks; they never change a node. The radix index's
TreeNode satisfies CachedNodeView (a NodeView with its tree) and RadixTree TreeView; a shadow's
ShadowNode (both are PrefixNodes, radix/core.py) satisfies NodeView: every field a key function
reads, which is all a shadow's fixed policy asks of it. Hooks see CachedNodeViews, keys NodeViews.
Nothing in eviction/ imports radix/: the dependency runs one way, radix -> eviction.
"""

from __future__ import annotations

from typing import Mapping, Protocol


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


class CachedNodeView(NodeView, Protocol):
    """A node of the real cache (not a shadow's), as a learning policy's hooks see it: with its tree."""

    @property
    def tree(self) -> TreeView: ...


class FixedPolicyView(Protocol):
    """A fixed policy as a shadow runs it (eviction/policies.py's EvictionPolicy satisfies it)."""

    @property
    def insert_is_use(self) -> bool: ...  # a direct insert counts as a use

    def key(self, node: NodeView) -> tuple: ...  # eviction order: smallest first


class ShadowView(Protocol):
    """A metadata-only replay of a tree under one fixed policy (radix/shadow.py's ShadowTree)."""

    def match(self, ns: bytes, key: bytes, end: int = -1) -> int: ...  # tokens held of key[:end]; refreshes

    def insert(self, ns: bytes, key: bytes, capacity: int, use: bool, tail: bytes | None = None,
               head: bytes | None = None, cut: int = 0) -> int: ...
    # evict down to capacity, add; `tail`: an object equal to key's end that a new leaf may keep instead of a copy;
    # with `head` the key is head[:cut] + key (never put together where the last match asked `head` itself)


class ShadowKeysView(Protocol):
    """Where the real cache's last match ended, told to a tree's shadows (radix/shadow_keys.py's ShadowKeys)."""

    def along(self, key: bytes, node: NodeView) -> None: ...  # node: key's real match end; shadows share its keys


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
