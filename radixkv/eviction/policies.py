"""Eviction policies as key functions: the evictable leaf with the smallest key goes first.

A policy has a pure `key(node) -> tuple` (computed when a leaf enters the evictable index or is
touched while in it; keys end with `node.id`, so they are unique and deterministic) and hooks the
tree calls, `on_insert(leaf)`, `on_hit(node)`, `on_evict(victim)`, `on_lookup(start, key, length)`
and `on_cache(start, key, cached, use)`, where a learning policy learns; `key()` never learns. Fixed
policies have no state (`learns = False`, and the tree skips their hooks). Recency is an integer
logical clock (`node.last_access`), never wall time.

Keys read a tree's node as eviction/view.py's NodeFields (`cast`: compiled, field offsets, not getattrs);
any other object with NodeView's fields is read through the Protocol, so compiled and pure Python answer alike.

A learning policy that changes its order wholesale (adaptive.py switches between experts) bumps
`epoch`; the tree then re-keys its indexes with the policy's current `key`. `stable_keys = True`
says that a stored key always equals `key(node)` (check_invariants verifies it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ClassVar, cast

from mypy_extensions import mypyc_attr

from radixkv.eviction.view import NodeFields

if TYPE_CHECKING:
    from radixkv.eviction.view import CachedNodeView, NodeView


@mypyc_attr(allow_interpreted_subclasses=True)  # users register policies of their own (interpreted)
class EvictionPolicy:
    # ClassVar: compiled (radixkv/build.py), a plain class attribute becomes an instance field whose
    # default a subclass's class attribute would not override; a ClassVar is looked up on the class.
    name: ClassVar[str] = "base"
    learns: ClassVar[bool] = False  # True: the tree calls the hooks below; keys may depend on what was learned
    stable_keys: ClassVar[bool] = True  # every stored key equals key(node) (False: keys drift with learned state)
    insert_is_use: ClassVar[bool] = False  # True where the key reads hit_count: a direct insert then counts a use
    epoch = 0  # bumped by a learning policy whose order changed wholesale: the tree re-keys

    def key(self, node: NodeView) -> tuple:
        raise NotImplementedError

    def on_insert(self, leaf: CachedNodeView) -> None:
        """A new leaf was just created by an insert (its parent is `leaf.parent`)."""

    def on_hit(self, node: CachedNodeView) -> None:
        """A match ended exactly at `node` (after any split), which it matched whole."""

    def on_evict(self, victim: CachedNodeView) -> None:
        """`victim` is about to lose its device copy (once per victim, before its pages are freed)."""

    def on_lookup(self, start: CachedNodeView, key: bytes, length: int) -> None:
        """A match of `key` (whole pages, int32 bytes) below `start` found `length` tokens cached."""

    def on_cache(self, start: CachedNodeView, key: bytes, cached: int, use: bool) -> None:
        """`key` (whole pages) below `start` is cached now; the device holds `cached` tokens in all;
        `use`: the insert counted as a use (a direct insert, RadixTree.insert)."""


class LRU(EvictionPolicy):
    name = "lru"

    def key(self, node: NodeView) -> tuple:
        if isinstance(node, NodeFields):  # a tree's node: native reads, compiled (module docstring)
            n = cast(NodeFields, node)
            return (n.last_access, n.id)
        return (node.last_access, node.id)


class LFU(EvictionPolicy):
    """Fewest uses first; ties go to the least recently used (SGLang's LFUStrategy). A use is a
    match through the node or a direct insert along it (RadixTree.insert), as in SGLang."""

    name = "lfu"
    insert_is_use = True

    def key(self, node: NodeView) -> tuple:
        if isinstance(node, NodeFields):  # a tree's node: native reads, compiled (module docstring)
            n = cast(NodeFields, node)
            return (n.hit_count, n.last_access, n.id)
        return (node.hit_count, node.last_access, node.id)


class MRU(EvictionPolicy):
    """Most recently used first (SGLang's MRUStrategy): for scans that never come back."""

    name = "mru"

    def key(self, node: NodeView) -> tuple:
        if isinstance(node, NodeFields):  # a tree's node: native reads, compiled (module docstring)
            n = cast(NodeFields, node)
            return (-n.last_access, n.id)
        return (-node.last_access, node.id)


class FIFO(EvictionPolicy):
    name = "fifo"

    def key(self, node: NodeView) -> tuple:
        if isinstance(node, NodeFields):  # a tree's node: native reads, compiled (module docstring)
            n = cast(NodeFields, node)
            return (n.created, n.id)
        return (node.created, node.id)


class FILO(EvictionPolicy):
    """Newest first (SGLang's FILOStrategy): what was cached first stays longest."""

    name = "filo"

    def key(self, node: NodeView) -> tuple:
        if isinstance(node, NodeFields):  # a tree's node: native reads, compiled (module docstring)
            n = cast(NodeFields, node)
            return (-n.created, n.id)
        return (-node.created, node.id)


class Priority(EvictionPolicy):
    """Lowest request priority first, then least recently used."""

    name = "priority"

    def key(self, node: NodeView) -> tuple:
        if isinstance(node, NodeFields):  # a tree's node: native reads, compiled (module docstring)
            n = cast(NodeFields, node)
            return (n.priority, n.last_access, n.id)
        return (node.priority, node.last_access, node.id)


class SLRU(EvictionPolicy):
    """Segmented LRU: nodes hit at least `protected_threshold` times outlive all others (SGLang's
    SLRUStrategy); LRU inside each segment."""

    name = "slru"
    insert_is_use = True

    def __init__(self, protected_threshold: int = 2) -> None:
        self.protected_threshold = protected_threshold

    def key(self, node: NodeView) -> tuple:
        if isinstance(node, NodeFields):  # a tree's node: native reads, compiled (module docstring)
            n = cast(NodeFields, node)
            return (n.hit_count >= self.protected_threshold, n.last_access, n.id)
        return (node.hit_count >= self.protected_threshold, node.last_access, node.id)


def host_first(policy: EvictionPolicy, on_device: Callable[[NodeView], bool]):  # noqa: ANN201 - a key function
    """The host tier's order: host-only leaves (no device copy) before host copies of device nodes,
    each group in the order of `policy`."""
    inner = policy.key

    def key(node: NodeView) -> tuple:
        return (on_device(node),) + inner(node)

    return key
