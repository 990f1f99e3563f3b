"""KV events of a hybrid model's secondary layer groups (vLLM 0.33's group_idx and kv-cache spec).

vLLM keys cached blocks by (block hash, KV-cache group): a hybrid model's groups cache the same
block hashes, each on its own, and its BlockStored says which group (`group_idx`) and what the
group keeps (`kv_cache_spec_kind`, `kv_cache_spec_sliding_window`, as vLLM's KVCacheManager fills
them from `get_kv_cache_spec_kind` / `get_kv_cache_spec_sliding_window`); BlockRemoved carries
`group_idx` only. radixkv's groups (radix/node.py): group 0 is full KV (`pages`), group g >= 1 a
component `secondary[g - 1]` of a node, or a tombstone. A secondary group holds block b when:

    per-page groups (sliding window, chunked):  every node whose edge covers part of block b has
                                                a group-g component (a block may start in an
                                                ancestor's edge)
    state groups (mamba):                       the node whose edge ends exactly at (b + 1) * E
                                                has a snapshot (the state after block b)

GroupEvents keeps, per group, which blocks it reported for each node (`held`), and when a
component is attached or dropped recomputes what the node and the nodes below it within one block
hold, reporting the difference (stored or removed), so a removal always names exactly what was
stored. The digests are the recorder's (the same hashes as group 0's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from radixkv.events.records import DEVICE, BlockHashes

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode

# vLLM's KVCacheSpecKind values (vllm/v1/kv_cache_interface.py) that radixkv's groups map to
FULL_ATTENTION, SLIDING_WINDOW, CHUNKED, MAMBA, UNKNOWN = ("full_attention", "sliding_window",
                                                          "chunked_local_attention", "mamba", "unknown")
_KINDS = {"state": MAMBA, "chunk": CHUNKED}  # radixkv GroupSpec kinds -> vLLM's, windows aside


@dataclass(frozen=True)
class EventGroup:
    """What a group's BlockStored says of it: vLLM's spec kind and, for a window, its width."""

    kind: str  # a KVCacheSpecKind value
    sliding_window: int | None = None  # tokens, for SLIDING_WINDOW only

    @property
    def state(self) -> bool:
        """One snapshot per node (the state after the edge's last token), not KV per page."""
        return self.kind == MAMBA

    def fields(self, group: int) -> tuple[int, str, int | None]:
        return group, self.kind, self.sliding_window


FULL = EventGroup(FULL_ATTENTION)


def event_groups(specs: Sequence[Any]) -> tuple[EventGroup, ...]:
    """The EventGroups of a cache's secondary groups (CacheConfig.groups): GroupSpec kind "window"
    with its `size`, "state" (vLLM files every recurrent layer, gated delta nets included, under
    its MambaSpec kind), anything else vLLM's "unknown" (routers then take the safe rule)."""
    return tuple(EventGroup(SLIDING_WINDOW, s.size) if s.kind == "window" else EventGroup(_KINDS.get(s.kind, UNKNOWN))
                 for s in specs)


class Recorder(Protocol):
    """What GroupEvents uses of its EventRecorder (events/recorder.py)."""

    block_size: int

    def digests(self, node: TreeNode) -> tuple[Any, BlockHashes]: ...

    def withdraw(self, hashes: BlockHashes, medium: str, group: int) -> None: ...

    def store_blocks(self, node: TreeNode, hashes: BlockHashes, first: int, group: int) -> None: ...


class GroupEvents:
    def __init__(self, recorder: Recorder, specs: Sequence[EventGroup]) -> None:
        self.rec = recorder
        self.specs = tuple(specs)
        self.held: list[dict[TreeNode, tuple[int, int]]] = [{} for _ in self.specs]  # node -> blocks [lo, hi)

    def changed(self, node: TreeNode, group: int) -> None:
        """`node`'s group-`group` component appeared or went: report what it and the nodes below it
        (whose first block may start in its edge) hold now."""
        self._refresh(node, group)
        size = self.rec.block_size
        todo = list(node.children.values())
        for child in todo:
            if child.depth // size * size < node.end and child.secondary[group - 1] is not None:
                self._refresh(child, group)
                todo.extend(child.children.values())

    def dropped(self, node: TreeNode) -> None:
        """`node` is losing its device KV, every component with it: report them removed."""
        for g in range(1, len(self.specs) + 1):
            self._report(node, g, (0, 0))

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """Blocks ending in the new upper edge move to `upper` (the components were cut the same way)."""
        cut = upper.end // self.rec.block_size
        for held in self.held:
            got = held.pop(lower, None)
            if got is not None:
                lo, hi = got
                if lo < min(cut, hi):
                    held[upper] = (lo, min(cut, hi))
                if max(lo, cut) < hi:
                    held[lower] = (max(lo, cut), hi)

    def _refresh(self, node: TreeNode, group: int) -> None:
        self._report(node, group, self._holds(node, group))

    def _holds(self, node: TreeNode, group: int) -> tuple[int, int]:
        """Blocks [lo, hi) of `node`'s edge that group `group` holds now."""
        size, g = self.rec.block_size, group - 1
        first, last = node.depth // size, node.end // size
        if node.pages is None or node.secondary[g] is None or first >= last:
            return 0, 0
        if self.specs[g].state:
            return (last - 1, last) if node.end % size == 0 else (0, 0)
        anc = node.parent  # the first block may start above this edge: every node it covers must hold it
        while anc is not None and anc.parent is not None and anc.end > first * size:
            if anc.secondary[g] is None:
                return first + 1, last
            anc = anc.parent
        return first, last

    def _report(self, node: TreeNode, group: int, now: tuple[int, int]) -> None:
        held = self.held[group - 1]
        lo, hi = held.pop(node, (0, 0))
        if now[0] < now[1]:
            held[node] = now
        ints = self.rec.digests(node)[1] if lo < hi or now[0] < now[1] else BlockHashes(b"")
        first = node.depth // self.rec.block_size
        gone = [b for b in range(lo, hi) if not now[0] <= b < now[1]]
        if gone:
            self.rec.withdraw(BlockHashes.of(ints[b - first] for b in gone), DEVICE, group)
        new = [b for b in range(*now) if not lo <= b < hi]
        if new:  # one run: both ranges end at the edge's last block, or one is empty
            self.rec.store_blocks(node, ints[new[0] - first:new[-1] + 1 - first], new[0], group)
