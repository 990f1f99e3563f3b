"""Snapshots of recurrent state at page-aligned prefix positions, held as the tree's "state" layer group:
what lets a hybrid model (attention + Mamba / linear attention / short convolution) reuse a cached prefix.

A request can resume at position `p` only if every layer group can: the attention layers need the
KV of `[0, p)` (the tree's match) and every recurrent layer its state after exactly `p` tokens (a
snapshot there). As in SGLang's MambaRadixCache, that state is a component of the tree's node:

- the RadixCache has a secondary group of kind "state" (`CacheConfig.groups`, a `GroupSpec("state",
  num_slots)`: one slot per snapshot); the tree owns which node holds which slot, evicts snapshots
  before full KV when the group runs short, drops a node's snapshot with its KV, and keeps a
  snapshot with the lower half of a split (the node keeps meaning the same prefix);
- this store owns only what the tree cannot: the state tensors of each slot, and the order in which
  it gives slots up (`put` into a full group first drops one of its snapshots, locked or not: spare
  ones never used first, then by `policy`). Policies (POLICIES):
    "lru"    the least recently used;
    "flops"  Marconi's (arXiv 2411.19379): the lowest recency + alpha * FLOP efficiency, each scaled
             to [0, 1] over the candidates, FLOP efficiency being the prefill FLOPs a snapshot saves
             (`flops(end)`, the prefix it lets a request skip) per byte it holds: a long prefix's
             snapshot outlives a short one's of the same age;
- a snapshot is put under the node `cache.locate(tokens[:p])` (it splits the edge so that a node
  ends at `p`); it is valid while that node still holds its slot (the component), and the cache's
  match claims a prefix only up to a node holding one (radix/windows.py);
- `get` hands out the stored object and the caller copies it before extending it (copy-on-write:
  `RecurrentState.clone`), so a snapshot is never written after `put`.

`cache.check_invariants()` checks the group's slots against the tree; `check()` here, that every slot
the tree holds has its tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING

from radixkv.errors import InvalidArgumentError, OutOfSlotsError

if TYPE_CHECKING:
    from radixkv import RadixCache
    from radixkv.integrations.recurrent_state import RecurrentState
    from radixkv.results import LockHandle


POLICIES = ("lru", "flops")
ALPHA = 1.0  # weight of FLOP efficiency against recency in "flops" (Marconi tunes it online; a fixed middle here)


@dataclass
class _Entry:
    node: LockHandle
    end: int  # tokens from the root: the position the state was taken at
    state: RecurrentState
    last_use: int
    spare: bool  # given up before the others; a hit makes it a regular snapshot


class StateStore:
    """The tensors of a RadixCache's state group (module docstring). Driven by the cache's thread.

    Args:
        cache: a RadixCache whose `config.groups[group - 1]` is a GroupSpec of kind "state".
        group: that group's index (>= 1).
        policy: which snapshot a full group gives up first, one of POLICIES.
        flops: prefill FLOPs of a prefix of n tokens (policy "flops"; default n: any increasing cost ranks alike
            when every snapshot holds the same bytes and the cost is linear).
    """

    def __init__(self, cache: RadixCache, group: int, policy: str = "lru",
                 flops: Callable[[int], float] | None = None) -> None:
        if policy not in POLICIES:
            raise InvalidArgumentError(f"StateStore policy {policy!r:.40}: choose from {POLICIES}")
        self.policy, self.flops = policy, flops or float
        groups = cache.config.groups
        if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= len(groups) \
                or groups[group - 1].kind != "state":
            raise InvalidArgumentError(f"StateStore needs a secondary group of kind 'state', got group {group!r} "
                                       f"of {[g.kind for g in groups]}")
        self.cache, self.group = cache, cache.group(group)
        self._entries: dict[int, _Entry] = {}  # slot -> its snapshot
        self._tick = 0
        self.puts = self.hits = self.dropped = 0

    def __len__(self) -> int:
        return sum(1 for s, e in self._entries.items() if self._valid(s, e))

    @property
    def nbytes(self) -> int:
        """Bytes of the snapshots the tree holds."""
        return sum(e.state.nbytes for s, e in self._entries.items() if self._valid(s, e))

    def get(self, node: LockHandle, end: int) -> RecurrentState | None:
        """The snapshot after `end` tokens held by `node`, or None. Copy it before extending it."""
        slot = self._slot(node)
        entry = None if slot is None else self._entries.get(slot)
        if entry is None or entry.end != end or entry.node is not node:
            return None
        self._tick += 1
        entry.last_use, entry.spare = self._tick, False
        self.hits += 1
        return entry.state

    def has(self, node: LockHandle) -> bool:
        """Whether `node` holds a snapshot; mutates nothing."""
        slot = self._slot(node)
        return slot is not None and slot in self._entries and self._entries[slot].node is node

    def put(self, node: LockHandle, end: int, state: RecurrentState, spare: bool = False) -> bool:
        """Attach `state` (taken after `end` tokens; the store owns it now) to `node` as its snapshot,
        replacing any there; a `spare` one is given up before the others until it is used. Returns
        False, storing nothing, if `node` does not end at `end` (or the group has no slot to give)."""
        if node.evicted or node.end != end:
            return False
        self._tick += 1
        slot = self._slot(node)
        if slot is None:
            self._prune()
            if not self.group.sizes().free:
                self._give_up_one()
            try:
                slot = int(self.group.alloc(1)[0])
            except OutOfSlotsError:
                return False
            self.group.attach(node, [slot])
        self._entries[slot] = _Entry(node, end, state, self._tick, spare)
        self.puts += 1
        return True

    def discard(self, node: LockHandle) -> None:
        """Drop `node`'s snapshot, if any."""
        slot = self._slot(node)
        if slot is not None:
            self.group.drop(node)
            self._entries.pop(slot, None)
            self.dropped += 1

    def check(self) -> None:
        """Every slot the tree holds has its tensors, taken at its node's end; AssertionError otherwise."""
        held = [s for s, e in self._entries.items() if self._valid(s, e)]
        assert len(held) == self.group.sizes().cached, "a state slot the tree holds has no tensors here"
        assert all(self._entries[s].node.end == self._entries[s].end for s in held)

    def _slot(self, node: LockHandle) -> int | None:
        pages = self.group.component(node)  # an evicted node holds no component
        return None if pages is None else int(pages[0])

    def _valid(self, slot: int, entry: _Entry) -> bool:
        return self._slot(entry.node) == slot

    def _prune(self) -> None:
        """Forget the tensors of slots the tree took back (evicted with their KV, or by the group)."""
        for slot in [s for s, e in self._entries.items() if not self._valid(s, e)]:
            del self._entries[slot]

    def _give_up_one(self) -> None:
        """Drop one of this store's snapshots, by policy. Locks do not protect them here: a lock keeps a
        running request's KV, and that request copied its state when it resumed (the tree's own
        eviction, `group.evict`, still skips locked nodes)."""
        free = list(self._entries.values())
        if not free:
            return
        spare = [e for e in free if e.spare]
        if spare or self.policy == "lru":
            self.discard(min(spare or free, key=lambda e: e.last_use).node)
            return
        self.discard(free[marconi_victim([e.last_use for e in free],
                                         [self.flops(e.end) / e.state.nbytes for e in free])].node)


def marconi_victim(last_use: list[int], efficiency: list[float], alpha: float = ALPHA) -> int:
    """Index of the candidate with the lowest recency + alpha * efficiency (both min-max scaled to [0, 1])."""
    def scaled(xs: list[float]) -> list[float]:
        lo, hi = min(xs), max(xs)
        return [(x - lo) / (hi - lo) if hi > lo else 0.0 for x in xs]
    scores = [r + alpha * f for r, f in zip(scaled([float(u) for u in last_use]), scaled(efficiency))]
    return scores.index(min(scores))


def prefill_flops(params: int, attention_layers: int, attention_width: int) -> Callable[[int], float]:
    """FLOPs to prefill a prefix of n tokens: 2 per weight per token, plus causal attention's QK and AV
    (2 * n^2 * width per attention layer). `params`: decoder-layer weights; `attention_width`: heads x head_dim."""
    return lambda n: 2.0 * params * n + 2.0 * attention_layers * attention_width * n * n
