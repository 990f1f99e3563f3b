"""The wire format: vLLM 0.33's msgspec structs, msgpack-encoded (needs the `events` extra).

The declarations below follow `vllm/distributed/kv_events.py` of vLLM 0.33.0 field for field: the
batch is array-like (`[ts, events, data_parallel_rank]`), the events are tagged by class name
(msgpack maps with a "type" key), both omit fields left at their defaults, and `lora_id`, `medium`
and `lora_name` have no default, so they are always on the wire (as None when unset). Block
hashes are `bytes | int` on vLLM's side (`ExternalBlockHash`); ours are ints in [0, 2**64).

`encode_batch` turns in-process events (radixkv.events.records) into one payload; `decode_batch`
reads any payload a vLLM or radixkv publisher sends (also the older positional event layout) and
validates every event with `parse_event`; a malformed payload of any shape raises EventFormatError.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from radixkv.events import records
from radixkv.events.parse import EventFormatError, parse_event
from radixkv.events.records import FIELDS, KVEvent

MAX_RANK = (1 << 31) - 1  # a data_parallel_rank above this is no real deployment's


def is_rank(rank: object) -> bool:
    """A data_parallel_rank vLLM's decoders take: a plain int (not a bool or numpy int) in [0, 2**31)."""
    return type(rank) is int and 0 <= rank <= MAX_RANK

ExternalBlockHash = bytes | int


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):  # type: ignore[call-arg]
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    """Base of the three KV event structs (tagged unions: the tag is the class name)."""


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


class PublishedBatch(KVEventBatch):
    """KVEventBatch plus one trailing element, the publisher's random id (radixkv.cluster.zmq_publisher):
    decoders of vLLM's KVEventBatch and llm-d's skip trailing batch elements."""

    publisher_id: int | None = None


class Batch(NamedTuple):
    ts: float
    events: list[KVEvent]
    data_parallel_rank: int | None
    publisher_id: int | None  # None from publishers that do not send one (vLLM)


_WIRE = {records.BlockStored: BlockStored, records.BlockRemoved: BlockRemoved,
         records.AllBlocksCleared: AllBlocksCleared}
_encoder = msgspec.msgpack.Encoder()


def to_wire(event: KVEvent) -> KVCacheEvent:
    """The wire struct of one in-process event (same fields, same values; block hashes and token ids as lists)."""
    cls = type(event)
    wire = _WIRE[cls](*(getattr(event, k) for k in FIELDS[cls.__name__]))
    if isinstance(wire, (BlockStored, BlockRemoved)) and isinstance(wire.block_hashes, records.BlockHashes):
        wire.block_hashes = wire.block_hashes.tolist()
    if isinstance(wire, BlockStored) and isinstance(wire.token_ids, records.TokenIds):
        wire.token_ids = wire.token_ids.tolist()
    return wire


def encode_batch(events: list[KVEvent], ts: float, data_parallel_rank: int | None = 0,
                 publisher_id: int | None = None) -> bytes:
    """One msgpack payload: KVEventBatch(ts, events, data_parallel_rank), plus `publisher_id` as a
    4th element when given. vLLM's publisher always sets the rank (0 without data parallelism)."""
    wire = [to_wire(e) for e in events]
    if publisher_id is None:
        return _encoder.encode(KVEventBatch(ts, wire, data_parallel_rank))
    return _encoder.encode(PublishedBatch(ts, wire, data_parallel_rank, publisher_id))


def decode_batch(payload: object) -> Batch:
    """(ts, validated events, data_parallel_rank, publisher_id) of one payload; EventFormatError for anything
    that is not a well-formed batch (bad msgpack, wrong shapes, any malformed event)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise EventFormatError(f"a payload must be bytes, got {type(payload).__name__}")
    try:
        batch = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as e:
        raise EventFormatError(f"not msgpack: {e}") from None
    except RecursionError:  # msgspec's own nesting limit: arrays or maps nested thousands deep
        raise EventFormatError("msgpack nested too deeply to be a KV event batch") from None
    if not isinstance(batch, list) or len(batch) < 2 or not isinstance(batch[1], list):
        raise EventFormatError("a KVEventBatch is an array [ts, events, data_parallel_rank]")
    ts, rank = batch[0], batch[2] if len(batch) > 2 else None
    pid = batch[3] if len(batch) > 3 else None
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or (rank is not None and not is_rank(rank)):
        raise EventFormatError(f"KVEventBatch: ts must be a number and data_parallel_rank an int, "
                               f"got {ts!r:.40}, {rank!r:.40}")
    if pid is not None and type(pid) is not int:
        raise EventFormatError(f"KVEventBatch: publisher_id must be an int, got {pid!r:.40}")
    return Batch(float(ts), [parse_event(e) for e in batch[1]], rank, pid)
