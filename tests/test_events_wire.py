"""Our msgpack bytes read by structs written independently from vLLM 0.33's published declaration
(vllm/distributed/kv_events.py), compared field by field; and every malformed payload shape."""

from __future__ import annotations

from typing import Any, Optional, Union

import msgspec
import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.events import AllBlocksCleared, BlockRemoved, BlockStored, EventFormatError
from radixkv.events.wire import decode_batch, encode_batch
from radixkv.keys import ExtraKeys


# -- vLLM 0.33.0's declaration, retyped here from its published source (not imported from radixkv) --
class VBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class VEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class VStored(VEvent, tag="BlockStored"):
    block_hashes: list[Union[bytes, int]]
    parent_block_hash: Optional[Union[bytes, int]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None
    locality: Optional[str] = None
    ownership: Optional[str] = None
    session_id: Optional[str] = None
    lookahead_token_ids: Optional[list[list[int]]] = None


class VRemoved(VEvent, tag="BlockRemoved"):
    block_hashes: list[Union[bytes, int]]
    medium: Optional[str]
    group_idx: Optional[int] = None
    locality: Optional[str] = None
    ownership: Optional[str] = None


class VCleared(VEvent, tag="AllBlocksCleared"):
    pass


class VKVEventBatch(VBatch):
    events: list[Union[VStored, VRemoved, VCleared]]


def test_vllm_structs_decode_our_bytes_field_by_field() -> None:
    ours = [BlockStored([1, 2**64 - 1], 7, list(range(8)), 4, lora_id=3, medium="CPU", lora_name="ad",
                        extra_keys=[("ad",), ("ad", ("img", -2))]),
            BlockRemoved([5], "GPU"), AllBlocksCleared()]
    payload = encode_batch(ours, 12.5, 0, publisher_id=99)
    got = msgspec.msgpack.Decoder(VKVEventBatch).decode(payload)
    assert (got.ts, got.data_parallel_rank) == (12.5, 0)
    s, r, c = got.events
    assert isinstance(s, VStored) and isinstance(r, VRemoved) and isinstance(c, VCleared)
    for name in VStored.__struct_fields__:
        want = getattr(ours[0], name)
        have = getattr(s, name)
        if name == "extra_keys":  # msgpack has no tuples: nested ones come back as lists
            have = [tuple(tuple(x) if isinstance(x, list) else x for x in e) for e in have]
        assert have == want, name
    assert (r.block_hashes, r.medium, r.group_idx) == ([5], "GPU", None)
    raw = msgspec.msgpack.decode(payload)  # the layout itself
    assert raw[:3] == [12.5, raw[1], 0] and raw[3] == 99 and len(raw) == 4
    assert list(raw[1][0])[:8] == ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                                   "medium", "lora_name"]  # vLLM's field order: lora_id before medium
    assert raw[1][1] == {"type": "BlockRemoved", "block_hashes": [5], "medium": "GPU"}  # defaults omitted
    assert raw[1][2] == {"type": "AllBlocksCleared"}


def test_a_cache_batch_round_trips_through_both_decoders() -> None:
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=256, page_size=4,
                                   kv_events=True, event_block_size=4))
    extra = ExtraKeys(lora_id=2, lora_name="ad", cache_salt="s", mm=[("img", 5, 6)])
    toks = list(range(20))
    r = cache.match_prefix(toks, extra_keys=extra)
    cache.insert(toks, torch.cat([r.slots, cache.alloc(20 - r.length)]), extra_keys=extra)
    events = cache.take_events()
    batch = decode_batch(encode_batch(events, 1.0))
    assert batch.events == events and batch.publisher_id is None
    (stored,) = events
    assert (stored.lora_id, stored.lora_name) == (2, "ad")
    # vLLM's per-block shape: the LoRA name, (item, offset of the item in the block), the salt on block 0
    assert stored.extra_keys == [("ad", "s"), ("ad", ("img", 1)), ("ad", ("img", -3)), ("ad",), ("ad",)]
    vllm = msgspec.msgpack.Decoder(VKVEventBatch).decode(encode_batch(events, 1.0))
    assert vllm.events[0].block_hashes == stored.block_hashes


def test_the_positional_layout_llm_d_reads_is_accepted() -> None:
    payload = msgspec.msgpack.encode([1.0, [["BlockStored", [1], None, [1, 2], 2, None, "GPU", None],
                                            ["BlockRemoved", [b"\x00" * 24 + (5).to_bytes(8, "big")], "GPU"]]])
    batch = decode_batch(payload)
    assert batch.events == [BlockStored([1], None, [1, 2], 2), BlockRemoved([5], "GPU")]  # bytes: last 8, big-endian


@pytest.mark.parametrize("payload", [
    None, "x", b"", b"\xc1", msgspec.msgpack.encode({"ts": 1}), msgspec.msgpack.encode([1.0]),
    msgspec.msgpack.encode([1.0, {"type": "BlockRemoved"}]), msgspec.msgpack.encode([True, []]),
    msgspec.msgpack.encode([1.0, [{"type": ["BlockStored"]}]]), msgspec.msgpack.encode([1.0, [None]]),
    msgspec.msgpack.encode([1.0, [{"type": "BlockRemoved", "block_hashes": [-1]}]]),
    msgspec.msgpack.encode([1.0, [], "rank"]), msgspec.msgpack.encode([1.0, [], 0, "id"]),
    msgspec.msgpack.encode([1.0, [["BlockStored", [1], None, [1], 2]]]),
])
def test_malformed_payloads_of_every_shape_raise_event_format_error(payload: object) -> None:
    with pytest.raises(EventFormatError):
        decode_batch(payload)


def test_a_caches_token_ids_read_as_a_list_and_go_on_the_wire_as_one() -> None:
    import dataclasses

    import numpy as np

    from radixkv.events import TokenIds, event_to_dict, parse_event

    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=256, page_size=4,
                                   max_requests=4, max_context_len=256, device="cpu", kv_events=True,
                                   event_block_size=8))
    toks = np.random.default_rng(0).integers(0, 2**31 - 1, 40).tolist()
    cache.insert(toks[:20], cache.alloc(20))
    cache.insert(toks, torch.cat([cache.match_prefix(toks).slots, cache.alloc(20)]))  # a block across two edges
    stored = [e for e in cache.take_events() if isinstance(e, BlockStored)]
    assert [t for e in stored for t in e.token_ids] == toks[:40]
    for e in stored:
        ids, plain = e.token_ids, list(e.token_ids)
        assert isinstance(ids, TokenIds) and ids == plain and plain == ids and ids[1:9] == plain[1:9]
        assert all(type(t) is int for t in plain) and ids[-1] == plain[-1] and len(ids) == len(plain)
        assert ids != plain[:-1] and ids != tuple(plain)  # compares as a list does
        with pytest.raises(ValueError):
            ids.ids[0] = 1  # read-only: the tree's own ids
        as_list = dataclasses.replace(e, token_ids=plain)
        assert event_to_dict(e) == event_to_dict(as_list) and type(event_to_dict(e)["token_ids"]) is list
        assert encode_batch([e], 1.0) == encode_batch([as_list], 1.0)
        assert parse_event(e) == e == as_list


def test_token_ids_over_key_bytes_read_as_a_list_and_nothing_else_is_one() -> None:
    from collections.abc import Sequence

    import numpy as np

    from radixkv.events import TokenIds

    ids = TokenIds(np.arange(10, dtype="<i4").tobytes(), 8)  # bytes past the length: the last two ids are not in it
    assert isinstance([1], Sequence) and isinstance(ids, Sequence)
    assert not isinstance([1], TokenIds) and not isinstance((1,), TokenIds)  # (compiled: an ABC subclass said yes)
    assert len(ids) == 8 and list(ids) == list(range(8)) == ids.tolist() and ids == list(range(8))
    assert list(reversed(ids)) == list(range(7, -1, -1)) and ids.index(3) == 3 and ids.count(9) == 0 and 7 in ids
    assert ids[2:4] == [2, 3] and ids[-1] == 7 and repr(ids) == repr(list(range(8)))
    with pytest.raises(ValueError):
        ids.ids[0] = 1  # a read-only view of the bytes
    with pytest.raises(TypeError):
        hash(ids)
