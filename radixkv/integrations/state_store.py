"""Snapshots of recurrent state at page-aligned prefix positions, keyed by the radix-tree node that
ends there: what lets a hybrid model (attention + Mamba / linear attention) reuse a cached prefix.

A request can resume at position `p` only if every layer group can: the attention layers need the
KV of `[0, p)` (the tree's match) and every recurrent layer its state after exactly `p` tokens (a
snapshot here). The store is the recurrent group's owner of that second half, as SGLang's
MambaRadixCache keeps a state per node:

- a snapshot is put under the node `cache.match_prefix(tokens[:p]).node` (the match splits the edge
  so that a node ends at `p`; a node keeps meaning the same prefix after later splits);
- it is valid while that node is alive and still ends at `p` (`not node.evicted and node.end == p`):
  eviction of the KV (or a trimmed tail page) invalidates it, and it is dropped when next seen;
- the store owns its snapshots; `get` hands out the stored object and the caller copies it before
  extending it (copy-on-write: `RecurrentState.clone`), so a snapshot is never written after `put`;
- it is bounded by `budget_bytes`: putting past the budget drops invalid snapshots first, then spare
  ones never used, then the least recently used (a logical clock; `get` and `put` touch).

This maps onto a per-node component of the one-tree core: the snapshot is the recurrent group's
component of the node, absent (a tombstone) when dropped, its validity the node's own liveness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from radixkv.errors import InvalidArgumentError

if TYPE_CHECKING:
    from radixkv import RadixCache
    from radixkv.integrations.recurrent_state import RecurrentState
    from radixkv.results import LockHandle


@dataclass
class _Entry:
    node: LockHandle
    end: int  # tokens from the root: the position the state was taken at
    state: RecurrentState
    nbytes: int
    last_use: int
    spare: bool  # dropped before the others; a hit makes it a regular snapshot


class StateStore:
    """Recurrent-state snapshots keyed by tree node, bounded by bytes. Driven by the Engine's thread.

    Args:
        budget_bytes: the most bytes of state held at once (>= 0; 0 keeps nothing).
    """

    def __init__(self, budget_bytes: int) -> None:
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
            raise InvalidArgumentError(f"the state store's budget must be an int >= 0 bytes, got {budget_bytes!r}")
        self.budget_bytes = budget_bytes
        self.nbytes = 0
        self._entries: dict[LockHandle, _Entry] = {}  # by node identity
        self._tick = 0
        self.puts = self.hits = self.dropped = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, node: LockHandle, end: int) -> RecurrentState | None:
        """The snapshot after `end` tokens stored under `node`, or None (absent or no longer valid).
        Copy it before extending it. Drops an invalid one."""
        entry = self._entries.get(node)
        if entry is None or entry.end != end:
            return None
        if not _valid(entry):
            self._drop(node)
            return None
        self._tick += 1
        entry.last_use = self._tick
        entry.spare = False
        self.hits += 1
        return entry.state

    def has(self, node: LockHandle) -> bool:
        """Whether `node` holds a valid snapshot at its end; mutates nothing."""
        entry = self._entries.get(node)
        return entry is not None and _valid(entry)

    def resume_point(self, cache: RadixCache, tokens: list[int], namespace: Any = None) -> int:
        """The longest prefix of `tokens` whose KV `cache` holds and that has a snapshot here (0: none).
        Walks up from the match's node: O(depth). The match may split an edge and refreshes recency."""
        if not self._entries:
            return 0
        node = cache.match_prefix(tokens, namespace=namespace).node
        while node.parent is not None and not self.has(node):
            node = node.parent
        return node.end

    def put(self, node: LockHandle, end: int, state: RecurrentState, spare: bool = False) -> bool:
        """Store `state` (taken after `end` tokens; the store owns it now) under `node`, replacing any
        snapshot there; a `spare` one is dropped before the others until it is used. Returns False,
        storing nothing, if `node` does not end at `end` or the state is larger than the whole budget."""
        if not _alive(node) or node.end != end:
            return False
        size = state.nbytes
        self.discard(node)
        if size > self.budget_bytes:
            return False
        self._make_room(size)
        self._tick += 1
        self._entries[node] = _Entry(node, end, state, size, self._tick, spare)
        self.nbytes += size
        self.puts += 1
        return True

    def discard(self, node: LockHandle) -> None:
        """Drop the snapshot under `node`, if any."""
        if node in self._entries:
            self._drop(node)

    def check(self) -> None:
        """Recount the bytes held; AssertionError on a mismatch or when over budget."""
        assert self.nbytes == sum(e.nbytes for e in self._entries.values()), "state store byte count drifted"
        assert self.nbytes <= self.budget_bytes, (self.nbytes, self.budget_bytes)
        assert all(e.nbytes == e.state.nbytes for e in self._entries.values())

    def _make_room(self, size: int) -> None:
        if self.nbytes + size <= self.budget_bytes:
            return
        for key in [k for k, e in self._entries.items() if not _valid(e)]:
            self._drop(key)
        for key in sorted(self._entries, key=lambda k: (not self._entries[k].spare, self._entries[k].last_use)):
            if self.nbytes + size <= self.budget_bytes:
                return
            self._drop(key)

    def _drop(self, key: LockHandle) -> None:
        entry = self._entries.pop(key)
        self.nbytes -= entry.nbytes
        self.dropped += 1


def _valid(entry: _Entry) -> bool:
    return _alive(entry.node) and entry.node.end == entry.end


def _alive(node: LockHandle) -> bool:
    """Whether the tree still holds `node` (its `evicted` flag: read, as nodes allow, never written)."""
    return not getattr(node, "evicted", False)
