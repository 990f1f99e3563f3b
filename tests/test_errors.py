"""Every misuse in DESIGN.md raises its typed error and leaves the cache exactly as it was."""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pytest
import torch

from radixkv import (CacheConfig, ContextLengthError, InvalidArgumentError, InvalidSlotsError, InvalidTokensError,
                     LockError, OutOfRowsError, OutOfSlotsError, RadixCache, RadixKVError, Sequence, SequenceError)


class Busy(NamedTuple):
    """A cache in a busy state and the handles the tests use (a compiled RadixCache takes no new attributes)."""
    cache: RadixCache
    held: torch.Tensor  # private slots from alloc(5): 2 pages, 8 slots
    seq: Sequence  # an open Sequence: 8 cached, positions 8..9 committed, 10 reserved


@pytest.fixture
def busy() -> Busy:
    """Cached tokens (one path locked), private slots, an open Sequence."""
    c = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=32, page_size=4,
                               max_requests=2, max_context_len=16, dtype=torch.float32))
    c.insert(list(range(8)), c.alloc(8))
    c.lock(c.match_prefix(list(range(4))).node)
    held = c.alloc(5)
    seq = c.open(list(range(12)))  # 8 cached; positions 8..11 known, not yet computed
    c.reserve(seq, 3)
    c.commit(seq, [8, 9])
    c.check_invariants()
    return Busy(c, held, seq)


def snapshot(b: Busy) -> tuple:
    c, s = b.cache, b.seq
    return (c.sizes(), c.req_pool.req_to_token.clone(), s.committed_len, s.kv_len, s.tokens.tolist(),
            c.ledger.state.copy())


MISUSES: dict[str, tuple[type[Exception], Callable[[Busy], object]]] = {
    "float tokens": (InvalidTokensError, lambda b: b.cache.match_prefix([1.5, 2.0])),
    "bool tokens": (InvalidTokensError, lambda b: b.cache.match_prefix([True, False])),
    "bool tensor": (InvalidTokensError, lambda b: b.cache.open(torch.tensor([True]))),
    "float tensor": (InvalidTokensError, lambda b: b.cache.insert(torch.tensor([1.0]), b.held[:1])),
    "2-D tokens": (InvalidTokensError, lambda b: b.cache.match_prefix(np.zeros((2, 2), dtype=np.int64))),
    "negative id": (InvalidTokensError, lambda b: b.cache.open([1, -1])),
    "id over int32": (InvalidTokensError, lambda b: b.cache.match_prefix(np.array([2**31], dtype=np.int64))),
    "a string": (InvalidTokensError, lambda b: b.cache.match_prefix("hello")),
    "slot out of pool": (InvalidSlotsError, lambda b: b.cache.free([32])),
    "negative slot": (InvalidSlotsError, lambda b: b.cache.free([-1])),
    "duplicate slots": (InvalidSlotsError, lambda b: b.cache.insert([1, 2], [b.held[0], b.held[0]])),
    "free a free slot": (InvalidSlotsError, lambda b: b.cache.free([31])),
    "free a cached slot": (InvalidSlotsError, lambda b: b.cache.free(b.cache.match_prefix([0, 1, 2, 3]).slots)),
    "free a reserved slot": (InvalidSlotsError, lambda b: b.cache.free(b.seq.slots(10, 11).copy())),
    "insert length mismatch": (InvalidSlotsError, lambda b: b.cache.insert([5, 6, 7, 8], b.held[:3])),
    "insert free slots": (InvalidSlotsError, lambda b: b.cache.insert([7, 7, 7, 7], torch.arange(28, 32))),
    "insert cached slots elsewhere": (InvalidSlotsError, lambda b: b.cache.insert(
        [9, 9, 9, 9], b.cache.match_prefix([0, 1, 2, 3]).slots)),
    "insert reserved slots": (InvalidSlotsError, lambda b: b.cache.insert([5, 5], b.seq.slots(8, 10).copy())),
    "insert misordered page": (InvalidSlotsError, lambda b: b.cache.insert([5, 5, 5, 5], b.held[:4].flip(0))),
    "alloc too much": (OutOfSlotsError, lambda b: b.cache.alloc(17)),
    "alloc negative": (InvalidArgumentError, lambda b: b.cache.alloc(-1)),
    "evict bool": (InvalidArgumentError, lambda b: b.cache.evict(True)),
    "unlock unlocked": (LockError, lambda b: b.cache.unlock(b.cache.match_prefix([]).node)),
    "unlock a non-node": (LockError, lambda b: b.cache.unlock("node")),
    "open too long": (ContextLengthError, lambda b: b.cache.open(list(range(17)))),
    "reserve past context": (ContextLengthError, lambda b: b.cache.reserve(b.seq, 6)),
    "commit past kv_len": (SequenceError, lambda b: b.cache.commit(b.seq, [10, 11, 12, 13])),
    "commit contradicts tokens": (SequenceError, lambda b: b.cache.commit(b.seq, [11])),
    "foreign sequence": (SequenceError, lambda b: b.cache.reserve(RadixCache(b.cache.config).open([1]), 1)),
    "batch twice": (SequenceError, lambda b: b.cache.batch([b.seq, b.seq])),
}


@pytest.mark.parametrize("name", list(MISUSES))
def test_misuse_raises_typed_and_changes_nothing(busy: Busy, name: str) -> None:
    error, call = MISUSES[name]
    before = snapshot(busy)
    with pytest.raises(error) as info:
        call(busy)
    assert isinstance(info.value, RadixKVError)
    busy.cache.check_invariants()
    after = snapshot(busy)
    assert after[0] == before[0], f"sizes changed: {before[0]} -> {after[0]}"
    assert torch.equal(after[1], before[1]) and after[2:5] == before[2:5]
    assert np.array_equal(after[5], before[5])


def test_out_of_rows_then_closed_sequence(busy: Busy) -> None:
    cache, seq = busy.cache, busy.seq
    cache.open([1])
    before = cache.sizes()
    with pytest.raises(OutOfRowsError):
        cache.open([2])
    assert cache.sizes() == before
    cache.close(seq)
    for call in (lambda: cache.reserve(seq, 1), lambda: cache.commit(seq, [1]), lambda: cache.close(seq),
                 lambda: cache.batch([seq])):
        with pytest.raises(SequenceError):
            call()
    cache.check_invariants()


def test_reserve_out_of_slots_changes_nothing(busy: Busy) -> None:
    cache, seq = busy.cache, busy.seq
    hog = cache.alloc(cache.sizes().free + cache.sizes().evictable)
    before = snapshot(busy)
    cache.reserve(seq, 1)  # fills the tail of its private page: no new page needed
    with pytest.raises(OutOfSlotsError):
        cache.reserve(seq, 2)
    assert seq.kv_len == before[3] + 1 and cache.sizes() == before[0]
    cache.free(hog)
    cache.check_invariants()
