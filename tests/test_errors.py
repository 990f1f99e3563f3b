"""Every misuse in DESIGN.md raises its typed error and leaves the cache exactly as it was."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import torch

from radixkv import (CacheConfig, ContextLengthError, InvalidArgumentError, InvalidSlotsError, InvalidTokensError, LockError,
                     OutOfRowsError, OutOfSlotsError, RadixCache, RadixKVError, SequenceError)


@pytest.fixture
def cache() -> RadixCache:
    """A cache in a busy state: cached tokens (one path locked), private slots, open Sequences."""
    c = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=32, page_size=4,
                               max_requests=2, max_context_len=16, dtype=torch.float32))
    c.insert(list(range(8)), c.alloc(8))
    c.lock(c.match_prefix(list(range(4))).node)
    c.held = c.alloc(5)  # private: pages 2 slots worth 8
    seq = c.open(list(range(12)))  # 8 cached; positions 8..11 known, not yet computed
    c.reserve(seq, 3)
    c.commit(seq, [8, 9])
    c.seq = seq
    c.check_invariants()
    return c


def snapshot(c: RadixCache) -> tuple:
    s = c.seq
    return (c.sizes(), c.req_pool.req_to_token.clone(), s.committed_len, s.kv_len, s.tokens.tolist(),
            c.ledger.state.copy())


MISUSES: dict[str, tuple[type[Exception], Callable[[RadixCache], object]]] = {
    "float tokens": (InvalidTokensError, lambda c: c.match_prefix([1.5, 2.0])),
    "bool tokens": (InvalidTokensError, lambda c: c.match_prefix([True, False])),
    "bool tensor": (InvalidTokensError, lambda c: c.open(torch.tensor([True]))),
    "float tensor": (InvalidTokensError, lambda c: c.insert(torch.tensor([1.0]), c.held[:1])),
    "2-D tokens": (InvalidTokensError, lambda c: c.match_prefix(np.zeros((2, 2), dtype=np.int64))),
    "negative id": (InvalidTokensError, lambda c: c.open([1, -1])),
    "id over int32": (InvalidTokensError, lambda c: c.match_prefix(np.array([2**31], dtype=np.int64))),
    "a string": (InvalidTokensError, lambda c: c.match_prefix("hello")),
    "slot out of pool": (InvalidSlotsError, lambda c: c.free([32])),
    "negative slot": (InvalidSlotsError, lambda c: c.free([-1])),
    "duplicate slots": (InvalidSlotsError, lambda c: c.insert([1, 2], [c.held[0], c.held[0]])),
    "free a free slot": (InvalidSlotsError, lambda c: c.free([31])),
    "free a cached slot": (InvalidSlotsError, lambda c: c.free(c.match_prefix([0, 1, 2, 3]).slots)),
    "free a reserved slot": (InvalidSlotsError, lambda c: c.free(c.seq.slots(10, 11).copy())),
    "insert length mismatch": (InvalidSlotsError, lambda c: c.insert([5, 6, 7, 8], c.held[:3])),
    "insert free slots": (InvalidSlotsError, lambda c: c.insert([7, 7, 7, 7], torch.arange(28, 32))),
    "insert cached slots elsewhere": (InvalidSlotsError, lambda c: c.insert(
        [9, 9, 9, 9], c.match_prefix([0, 1, 2, 3]).slots)),
    "insert reserved slots": (InvalidSlotsError, lambda c: c.insert([5, 5], c.seq.slots(8, 10).copy())),
    "insert misordered page": (InvalidSlotsError, lambda c: c.insert([5, 5, 5, 5], c.held[:4].flip(0))),
    "alloc too much": (OutOfSlotsError, lambda c: c.alloc(17)),
    "alloc negative": (InvalidArgumentError, lambda c: c.alloc(-1)),
    "evict bool": (InvalidArgumentError, lambda c: c.evict(True)),
    "unlock unlocked": (LockError, lambda c: c.unlock(c.match_prefix([]).node)),
    "unlock a non-node": (LockError, lambda c: c.unlock("node")),
    "open too long": (ContextLengthError, lambda c: c.open(list(range(17)))),
    "reserve past context": (ContextLengthError, lambda c: c.reserve(c.seq, 6)),
    "commit past kv_len": (SequenceError, lambda c: c.commit(c.seq, [10, 11, 12, 13])),
    "commit contradicts tokens": (SequenceError, lambda c: c.commit(c.seq, [11])),
    "foreign sequence": (SequenceError, lambda c: c.reserve(RadixCache(c.config).open([1]), 1)),
    "batch twice": (SequenceError, lambda c: c.batch([c.seq, c.seq])),
}


@pytest.mark.parametrize("name", list(MISUSES))
def test_misuse_raises_typed_and_changes_nothing(cache: RadixCache, name: str) -> None:
    error, call = MISUSES[name]
    before = snapshot(cache)
    with pytest.raises(error) as info:
        call(cache)
    assert isinstance(info.value, RadixKVError)
    cache.check_invariants()
    after = snapshot(cache)
    assert after[0] == before[0], f"sizes changed: {before[0]} -> {after[0]}"
    assert torch.equal(after[1], before[1]) and after[2:5] == before[2:5]
    assert np.array_equal(after[5], before[5])


def test_out_of_rows_then_closed_sequence(cache: RadixCache) -> None:
    cache.open([1])
    before = cache.sizes()
    with pytest.raises(OutOfRowsError):
        cache.open([2])
    assert cache.sizes() == before
    seq = cache.seq
    cache.close(seq)
    for call in (lambda: cache.reserve(seq, 1), lambda: cache.commit(seq, [1]), lambda: cache.close(seq),
                 lambda: cache.batch([seq])):
        with pytest.raises(SequenceError):
            call()
    cache.check_invariants()


def test_reserve_out_of_slots_changes_nothing(cache: RadixCache) -> None:
    hog = cache.alloc(cache.sizes().free + cache.sizes().evictable)
    before = snapshot(cache)
    cache.reserve(cache.seq, 1)  # fills the tail of its private page: no new page needed
    with pytest.raises(OutOfSlotsError):
        cache.reserve(cache.seq, 2)
    assert cache.seq.kv_len == before[3] + 1 and cache.sizes() == before[0]
    cache.free(hog)
    cache.check_invariants()
