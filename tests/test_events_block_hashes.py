"""A cache's events carry their block hashes as BlockHashes (events/records.py): 8-byte words read as a
list of ints, equal to the hashes a router computes, and given as plain lists on the wire and in dicts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.events import (BlockHashes, BlockRemoved, BlockStored, block_hashes, event_to_dict, parse_event)
from radixkv.events.wire import decode_batch, encode_batch

INTS = [0, 1, 2**63 - 1, 2**63, 2**64 - 1, 0x0123_4567_89AB_CDEF, 5, 7]


def test_block_hashes_read_as_a_list_of_ints() -> None:
    h = BlockHashes.of(INTS)
    assert h.words == b"".join(x.to_bytes(8, "little") for x in INTS)
    assert isinstance(h, Sequence) and not isinstance(h, list) and not isinstance(INTS, BlockHashes)
    assert len(h) == 8 and list(h) == INTS == h.tolist() and h == INTS and INTS == h and h == BlockHashes(h.words)
    assert all(type(x) is int for x in h) and all(type(x) is int for x in h.tolist())
    assert [h[i] for i in range(-8, 8)] == INTS + INTS and h.at(4) == 2**64 - 1
    for bad in (8, -9):
        with pytest.raises(IndexError):
            h[bad]
    assert h[2:5] == INTS[2:5] and isinstance(h[2:5], BlockHashes) and h[5:2] == [] and h[-3:] == INTS[-3:]
    assert h[::3] == INTS[::3] and h[::-1] == INTS[::-1] and h[:100] == INTS
    assert h.cut(3) == (INTS[:3], INTS[3:]) and h.cut(0) == ([], INTS) and h.cut(8) == (INTS, [])
    assert list(reversed(h)) == INTS[::-1] and h.index(2**63) == 3 and h.count(5) == 1 and 7 in h and 6 not in h
    assert h != INTS[:-1] and h != tuple(INTS) and repr(h) == repr(INTS) and not BlockHashes(b"") and h
    with pytest.raises(TypeError):
        hash(h)


def _cache(block: int) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=96, page_size=4,
                                  max_requests=4, max_context_len=256, device="cpu", kv_events=True,
                                  event_block_size=block))


@pytest.mark.parametrize("block", [8, 6])  # 8: the common case; 6 (pages of 4): blocks counted per holder
def test_a_caches_events_carry_the_routers_hashes(block: int) -> None:
    cache = _cache(block)
    rng = np.random.default_rng(0)
    toks = rng.integers(0, 2**31 - 1, 40).tolist()
    cache.insert(toks[:20], cache.alloc(20))
    cache.insert(toks, torch.cat([cache.match_prefix(toks).slots, cache.alloc(20)]))  # a split, a block across edges
    other = rng.integers(0, 2**31 - 1, 80).tolist()
    cache.insert(other, cache.alloc(80))  # evicts: BlockRemoved
    events = cache.take_events()
    removed = [e for e in events if isinstance(e, BlockRemoved)]
    assert removed and all(isinstance(e.block_hashes, BlockHashes) for e in events)
    stored = [h for e in events if isinstance(e, BlockStored) for h in e.block_hashes]
    want = block_hashes(toks, None, block)
    assert stored == want + block_hashes(other, None, block)
    assert {h for e in removed for h in e.block_hashes} <= set(want)
    for e in events:
        plain = dataclasses.replace(e, block_hashes=list(e.block_hashes))
        assert event_to_dict(e) == event_to_dict(plain) and type(event_to_dict(e)["block_hashes"]) is list
        assert encode_batch([e], 1.0) == encode_batch([plain], 1.0)
        assert decode_batch(encode_batch([e], 1.0)).events == [e] == [plain]
        assert parse_event(e) == e and isinstance(parse_event(e).block_hashes, BlockHashes)
