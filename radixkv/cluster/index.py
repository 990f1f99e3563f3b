"""KVIndex: which instance of a fleet holds which block, fed by the instances' KV events.

Every instance of a fleet publishes batches of KV events (radixkv.events: BlockStored,
BlockRemoved, AllBlocksCleared, or their dict forms from the wire) under its `instance_id`. The
index keeps, per block hash, the set of (instance, medium) pairs that hold it, and answers

    holders(block_hashes)  -> [instances holding block 0, instances holding block 1, ...]
    lookup(block_hashes)   -> {instance: longest run of consecutive blocks held from block 0}

for the block hashes of a request (radixkv.events.block_hashes, namespace included). A block counts
as held when it is on any medium (GPU or CPU tier). Hybrid models (cluster/groups.py): blocks of
KV-cache groups other than 0 are kept per (hash, group), `holders` reports group 0, and `lookup` /
`resumable` cap an instance's prefix where one of its groups cannot resume.

Batch contract (both backends): a batch is validated whole before anything is applied. If any
payload is malformed, `ingest` raises EventFormatError naming the instance, the position in the
batch and the reason, adds the number of malformed payloads to `stats().rejected`, and applies
none of the batch; the instance's state in the index is then stale until it resyncs. Events of a
valid batch are applied in order. `ingest` returns whether the index already held state for this
instance before the batch (False the first time, after `drop_instance`, and for RedisIndex after a
server restart or TTL expiry): a publisher that gets False must resync (see publisher.py).

InMemoryIndex is the default: a dict in the router's process, no server, not thread-safe.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from radixkv.cluster.groups import GroupSpec, group_of, resume_point, spec_of
from radixkv.errors import InvalidArgumentError, RadixKVError
from radixkv.events import HASH_LIMIT, AllBlocksCleared, BlockStored, EventFormatError, KVEvent, parse_event

__all__ = ["HASH_LIMIT", "IndexStats", "IndexUnavailableError", "KVIndex", "InMemoryIndex", "longest_prefix",
           "check_instance_id", "check_hashes", "parse_batch"]


class IndexUnavailableError(RadixKVError):
    """The index's server could not be reached; the call had no effect. Route without it and retry."""


@dataclass
class IndexStats:
    applied: int = 0  # events applied, all instances
    rejected: int = 0  # malformed payloads seen (their whole batch was dropped)
    rejected_batches: int = 0
    server_errors: int = 0  # calls the server refused (RedisIndex: OOM, READONLY, ...)
    malformed_members: int = 0  # RedisIndex: stored members that are not "medium:instance" (skipped)


class KVIndex(Protocol):
    """What a Router needs from an index; InMemoryIndex and RedisIndex implement it."""

    def ingest(self, instance_id: str, events: Iterable[KVEvent | dict]) -> bool: ...

    def holders(self, block_hashes: Sequence[int]) -> list[frozenset[str]]: ...

    def lookup(self, block_hashes: Sequence[int]) -> dict[str, int]: ...

    def resumable(self, block_hashes: Sequence[int], prefix: dict[str, int]) -> dict[str, int]: ...

    def drop_instance(self, instance_id: str) -> None: ...

    def stats(self) -> IndexStats: ...


def longest_prefix(holders: Sequence[frozenset[str]]) -> dict[str, int]:
    """{instance: number of consecutive blocks it holds from block 0}; instances with 0 are left out."""
    out: dict[str, int] = {}
    alive = set(holders[0]) if holders else set()
    for b, held in enumerate(holders):
        alive &= held
        if not alive:
            break
        for inst in alive:
            out[inst] = b + 1
    return out


INSTANCE_ID_CHARS = frozenset(string.ascii_letters + string.digits + "._-/")
MAX_INSTANCE_ID = 253  # a DNS name's length: pod names and host:port-free service names fit


def check_instance_id(instance_id: object) -> str:
    """An instance id: 1 to 253 characters from letters, digits and `.`, `_`, `-`, `/` (a pod or host
    name). Separators of the indexes' and topics' encodings (`:` `,` `@` newlines) never occur."""
    if (not isinstance(instance_id, str) or not 0 < len(instance_id) <= MAX_INSTANCE_ID
            or not INSTANCE_ID_CHARS.issuperset(instance_id)):
        raise InvalidArgumentError(f"instance_id must be 1-{MAX_INSTANCE_ID} characters from letters, digits and "
                                   f"'._-/', got {instance_id!r:.60}")
    return instance_id


def check_hashes(block_hashes: object) -> Sequence[int]:
    """Block hashes as a lookup takes them: a list or tuple of ints in [0, 2**64)."""
    if not isinstance(block_hashes, (list, tuple)) or not all(
            type(h) is int and 0 <= h < HASH_LIMIT for h in block_hashes):
        raise InvalidArgumentError(f"block_hashes must be a list of ints in [0, 2**64), got {block_hashes!r:.60}")
    return block_hashes


def parse_batch(instance_id: str, events: object, stats: IndexStats) -> list[KVEvent]:
    """Validate a whole batch (every event through parse_event); raise EventFormatError, counted in
    `stats`, before anything is applied. A batch that is not a list of events (None, a dict, a
    string) is rejected the same way."""
    if not isinstance(events, (list, tuple)) and (isinstance(events, (str, bytes, dict))
                                                  or not isinstance(events, Iterable)):
        stats.rejected += 1
        stats.rejected_batches += 1
        raise EventFormatError(f"instance {instance_id!r}: a batch is a list of KV events, got {type(events).__name__}")
    out: list[KVEvent] = []
    errors: list[str] = []
    for i, ev in enumerate(events):
        try:
            out.append(parse_event(ev))
        except EventFormatError as e:
            errors.append(f"event {i}: {e}")
    if errors:
        stats.rejected += len(errors)
        stats.rejected_batches += 1
        raise EventFormatError(
            f"instance {instance_id!r}: rejected a batch of {len(out) + len(errors)} events, "
            f"{len(errors)} malformed ({'; '.join(errors[:3])}); nothing was applied, resync this instance")
    return out


class InMemoryIndex:
    """A KVIndex in this process: block -> {instance: set of media}, plus each instance's blocks. A
    block is its hash (group 0) or (hash, group) for a hybrid model's other groups."""

    def __init__(self) -> None:
        self._blocks: dict[int | tuple[int, int], dict[str, set[str]]] = {}  # block -> instance -> media
        self._owned: dict[str, set[tuple[int | tuple[int, int], str]]] = {}  # instance -> {(block, medium)}
        self._specs: dict[str, dict[int, GroupSpec]] = {}  # instance -> its groups >= 1 (kept over clears)
        self._stats = IndexStats()

    def ingest(self, instance_id: str, events: Iterable[KVEvent | dict]) -> bool:
        """Apply one batch from `instance_id` (see the module docstring for the contract). Mutates."""
        check_instance_id(instance_id)
        batch = parse_batch(instance_id, events, self._stats)
        known = instance_id in self._owned
        owned = self._owned.setdefault(instance_id, set())
        for ev in batch:
            if isinstance(ev, AllBlocksCleared):
                self._clear(instance_id, owned)
                continue
            g = group_of(ev)
            if g and isinstance(ev, BlockStored):
                self._specs.setdefault(instance_id, {})[g] = spec_of(ev)
            for h in ev.block_hashes:
                block = (h, g) if g else h
                if isinstance(ev, BlockStored):
                    self._blocks.setdefault(block, {}).setdefault(instance_id, set()).add(ev.medium)
                    owned.add((block, ev.medium))
                else:
                    self._remove(instance_id, block, ev.medium)
                    owned.discard((block, ev.medium))
        self._stats.applied += len(batch)
        return known

    def _remove(self, instance_id: str, block: int | tuple[int, int], medium: str) -> None:
        per = self._blocks.get(block)
        media = per.get(instance_id) if per else None
        if media is None:
            return
        media.discard(medium)
        if not media:
            del per[instance_id]
            if not per:
                del self._blocks[block]

    def _clear(self, instance_id: str, owned: set[tuple[int | tuple[int, int], str]]) -> None:
        for block, medium in owned:
            self._remove(instance_id, block, medium)
        owned.clear()

    def holders(self, block_hashes: Sequence[int]) -> list[frozenset[str]]:
        """Instances holding each block (any medium), in order. Does not mutate."""
        check_hashes(block_hashes)
        empty: dict[str, set[str]] = {}
        return [frozenset(self._blocks.get(h, empty)) for h in block_hashes]

    def lookup(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """{instance: longest consecutive hit in blocks from block 0 where every group can resume}.
        Does not mutate."""
        return self.resumable(block_hashes, longest_prefix(self.holders(block_hashes)))

    def resumable(self, block_hashes: Sequence[int], prefix: dict[str, int]) -> dict[str, int]:
        """`prefix` ({instance: blocks}) capped, per hybrid instance, where all its groups can resume
        (cluster/groups.py); other instances unchanged. Does not mutate."""
        check_hashes(block_hashes)
        out = dict(prefix)
        empty: dict[str, set[str]] = {}
        for inst, k in prefix.items():
            specs = self._specs.get(inst)
            if specs:
                out[inst] = resume_point(
                    min(k, len(block_hashes)), specs,
                    lambda g, b, i=inst: i in self._blocks.get((block_hashes[b], g), empty))  # type: ignore[misc]
        return out

    def drop_instance(self, instance_id: str) -> None:
        """Forget everything about an instance (it left the fleet); a no-op for an unknown one."""
        check_instance_id(instance_id)
        owned = self._owned.pop(instance_id, None)
        self._specs.pop(instance_id, None)
        if owned is not None:
            self._clear(instance_id, owned)

    def stats(self) -> IndexStats:
        return IndexStats(**vars(self._stats))

    def blocks_of(self, instance_id: str) -> set[tuple[int | tuple[int, int], str]]:
        """(block, medium) of everything the index says `instance_id` holds (a copy); a block is its
        hash, or (hash, group) for a group other than 0."""
        check_instance_id(instance_id)
        return set(self._owned.get(instance_id, ()))

    def num_blocks(self) -> int:
        """Distinct blocks (hash, and group other than 0) held by any instance."""
        return len(self._blocks)
