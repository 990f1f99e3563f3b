"""The traffic a learning policy sees before the real cache first evicts, kept compactly for a replay.

Until its first eviction the real cache holds every key it was asked to cache, so most of the history
need not keep key bytes (before: every entry kept its whole key from the namespace's root, so a chat
trace's history grew with the sum of its prompt lengths, up to 16 MiB, about 16 bytes per cached
token of a 1M-token cache):

    an insert that made a new leaf ending its key    -> that leaf: the key is the path from its root,
                                                        rebuilt at replay (a node keeps meaning the same
                                                        prefix after splits; none is removed before the
                                                        first eviction)
    a lookup that the next insert's key extends       -> its length (the lifecycle match(prompt) then
                                                        insert(prompt + output))
    anything else                                     -> its key bytes

`bytes` charges ENTRY_BYTES per entry plus the key bytes kept, from the first entry (the policy drops
the history past its budget). Iteration yields the same (ns, key, use) entries the full copy held; `replay`
also yields with each the real leaf whose path spells the key (or goes on from it), whose key objects the
replay's shadows then share instead of holding copies (radix/shadow_keys.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Iterator, Union, cast

from radixkv.eviction.view import NodeFields

if TYPE_CHECKING:
    from radixkv.eviction.view import NodeView

Item = Union[bytes, int, "NodeView"]  # key bytes, a length into the next entry's key, or a leaf


class History:
    ENTRY_BYTES: Final = 112  # charged per entry besides the key bytes it keeps: what an entry took as a 3-tuple in a
    # list (tuple 64, list slot 8, 9 amortized; a kept key's bytes header 33, rounded up). Kept now that an entry is
    # three list slots (24, 27 amortized, no tuple), so the budget (adaptive.py's HISTORY) drops the history where
    # it did: the charge decides, not the bytes (tests/test_adaptive.py measures the real bytes below the budget)

    def __init__(self) -> None:
        # entry i is (ns[i], items[i], uses[i]): three lists, no tuple an entry (a GC-counted allocation each)
        self._ns: list[bytes] = []
        self._items: list[Item] = []  # a key's bytes, a length into the next entry's key, or a leaf
        self._uses: list[bool | None] = []  # None: a lookup; else the insert's use
        self.bytes = 0
        self.inserted = 0  # tokens the inserts' keys held, new or not (the prior's reuse: eviction/prior.py)

    def __len__(self) -> int:
        return len(self._uses)

    @property
    def entries(self) -> list[tuple[bytes, Item, bool | None]]:
        """(ns, item, use) per entry, made on each call (for tests and bench scripts)."""
        return list(zip(self._ns, self._items, self._uses))

    def _append(self, ns: bytes, item: Item, use: bool | None) -> None:
        self._ns.append(ns)
        self._items.append(item)
        self._uses.append(use)

    def lookup(self, ns: bytes, key: bytes) -> None:
        """A lookup of `key` (from the root of namespace `ns`)."""
        self._append(ns, key, None)
        self.bytes += self.ENTRY_BYTES + len(key)

    def insert(self, ns: bytes, key: bytes, leaf: NodeView | None, use: bool, head: bytes | None = None,
               cut: int = 0) -> None:
        """`key` (from the root of `ns`; with `head`, head[:cut] + key, put together only if kept as bytes) is
        cached now; `leaf` is the leaf this insert made, if any."""
        items = self._items
        self.inserted += (cut + len(key)) // 4
        if items:
            last = items[-1]
            if self._uses[-1] is None and isinstance(last, bytes) and self._ns[-1] == ns and (
                    key.startswith(last) if head is None else last is head and key.startswith(last[cut:])):
                items[-1] = len(last)
                self.bytes -= len(last)
        if leaf is not None and leaf.end * 4 == cut + len(key):
            self._append(ns, leaf, use)
            self.bytes += self.ENTRY_BYTES
        else:
            whole = key if head is None else head[:cut] + key
            self._append(ns, whole, use)
            self.bytes += self.ENTRY_BYTES + len(whole)

    def __iter__(self) -> Iterator[tuple[bytes, bytes, bool | None]]:
        """(ns, key from the root, None for a lookup or the insert's use), in order. Valid until the
        tree first evicts (leaves are read then)."""
        for ns, key, end, use, _ in self.replay():
            yield ns, key if end == len(key) else key[:end], use

    def replay(self) -> Iterator[tuple[bytes, bytes, int, bool | None, NodeView | None]]:
        """As iteration, but each entry's key as `key[:end]` (a lookup that the next insert
        extends: that insert's key, not copied) and with the real leaf whose path spells the key (an insert that
        made it) or goes on from it (that insert's leaf), None for a key kept as bytes: (ns, key, end, use, leaf)."""
        names, items, uses, ahead = self._ns, self._items, self._uses, b""
        for i in range(len(items)):
            ns, item, use = names[i], items[i], uses[i]
            if isinstance(item, int):  # a prefix of the next entry's key (an insert: bytes or a leaf)
                after = items[i + 1]
                ahead = _resolve(after)
                yield ns, ahead, item, use, _leaf(after)
                continue
            key, ahead = (ahead, b"") if ahead else (_resolve(item), b"")
            yield ns, key, len(key), use, _leaf(item)


def _leaf(item: Item) -> NodeView | None:
    return None if isinstance(item, (bytes, int)) else item


def _resolve(item: Item) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, int):
        raise AssertionError("history: a length follows a length")
    return absolute_key(item, b"")


def absolute_key(start: NodeView, key: bytes) -> bytes:
    """`key` below `start` as a key from its namespace's root."""
    node = cast(NodeFields, start)  # (its fields read natively, compiled: eviction/view.py)
    if node.parent is None:
        return key
    parts = [key]
    while node.parent is not None:
        parts.append(node.key)
        node = node.parent
    return b"".join(reversed(parts))
