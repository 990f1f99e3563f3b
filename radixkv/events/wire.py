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

from typing import Any

import msgspec

from radixkv.events import records
from radixkv.events.records import FIELDS, EventFormatError, KVEvent, parse_event

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


_WIRE = {records.BlockStored: BlockStored, records.BlockRemoved: BlockRemoved, records.AllBlocksCleared: AllBlocksCleared}
_encoder = msgspec.msgpack.Encoder()


def to_wire(event: KVEvent) -> KVCacheEvent:
    """The wire struct of one in-process event (same fields, same values)."""
    cls = type(event)
    return _WIRE[cls](*(getattr(event, k) for k in FIELDS[cls.__name__]))


def encode_batch(events: list[KVEvent], ts: float, data_parallel_rank: int | None = 0) -> bytes:
    """One msgpack payload: KVEventBatch(ts, events, data_parallel_rank). vLLM's publisher always
    sets the rank (0 without data parallelism), so the batch is a 3-element array."""
    return _encoder.encode(KVEventBatch(ts, [to_wire(e) for e in events], data_parallel_rank))


def decode_batch(payload: object) -> tuple[float, list[KVEvent], int | None]:
    """(ts, validated events, data_parallel_rank) of one payload; EventFormatError for anything
    that is not a well-formed batch (bad msgpack, wrong shapes, any malformed event)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise EventFormatError(f"a payload must be bytes, got {type(payload).__name__}")
    try:
        batch = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as e:
        raise EventFormatError(f"not msgpack: {e}") from None
    if not isinstance(batch, list) or len(batch) < 2 or not isinstance(batch[1], list):
        raise EventFormatError("a KVEventBatch is an array [ts, events, data_parallel_rank]")
    ts, rank = batch[0], batch[2] if len(batch) > 2 else None
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or (rank is not None and type(rank) is not int):
        raise EventFormatError(f"KVEventBatch: ts must be a number and data_parallel_rank an int, got {ts!r:.40}, {rank!r:.40}")
    return float(ts), [parse_event(e) for e in batch[1]], rank
