"""Pools: the page allocator, the KV pool's layout, and req_to_token rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, ConfigError, InvalidSlotsError, OutOfRowsError, OutOfSlotsError
from radixkv.pools import (CACHED, FREE, PRIVATE, RESERVED, PageLedger, ReqToTokenPool, SlotAllocator,
                           TokenToKVPool, page_slots)


def test_allocator_hands_out_each_page_once_and_takes_it_back() -> None:
    alloc = SlotAllocator(num_pages=10, page_size=4)
    a, b = alloc.alloc_pages(3), alloc.alloc_pages(7)
    assert sorted(np.concatenate([a, b]).tolist()) == list(range(10))
    assert alloc.num_free_pages == 0
    with pytest.raises(OutOfSlotsError):
        alloc.alloc_pages(1)
    alloc.free_pages(b[::2])
    assert alloc.free_mask().tolist() == [p in set(b[::2].tolist()) for p in range(10)]
    assert alloc.num_free_slots == 4 * 4
    again = alloc.alloc_pages(4)
    assert sorted(again.tolist()) == sorted(b[::2].tolist())
    assert not alloc.free_mask().any()


def test_ledger_tracks_states_and_evicts_through_the_callback() -> None:
    ledger = PageLedger(num_pages=4, page_size=2)
    cached = ledger.take(2, CACHED, 0, evict=lambda n: pytest.fail("nothing to evict yet"))
    private = ledger.take(2, PRIVATE, 0, evict=lambda n: pytest.fail("enough free pages"))
    with pytest.raises(OutOfSlotsError):
        ledger.take(1, PRIVATE, 0, evict=lambda n: pytest.fail("must refuse before evicting"))
    asked = []
    more = ledger.take(1, RESERVED, 2, evict=lambda n: asked.append(n) or cached[:1])
    assert asked == [2] and more.tolist() == cached[:1].tolist()  # the evicted page is reused at once
    assert ledger.state.tolist().count(CACHED) == 1 and ledger.all_in(private, PRIVATE)
    ledger.release(private)
    assert ledger.num_free_pages == 2 and ledger.all_in(private, FREE)
    ledger.check()
    ledger.state[private[0]] = PRIVATE  # a state that disagrees with the allocator is caught
    with pytest.raises(AssertionError):
        ledger.check()


def test_allocator_cost_does_not_grow_with_the_pool() -> None:
    # The free list is a preallocated stack: alloc and free touch only the pages they move.
    small, big = SlotAllocator(8, 1), SlotAllocator(1 << 22, 1)
    for alloc in (small, big):
        p = alloc.alloc_pages(3)
        alloc.free_pages(p)
    assert big._stack.base is None and len(big._stack) == 1 << 22  # never reallocated


def test_page_slots() -> None:
    assert page_slots(np.array([2, 0]), 3).tolist() == [6, 7, 8, 0, 1, 2]
    assert page_slots(np.array([5, 1]), 1).tolist() == [5, 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_kv_pool_layout(dtype: torch.dtype) -> None:
    pool = TokenToKVPool(num_slots=7, num_layers=3, num_kv_heads=2, head_dim=5, dtype=dtype, device="cpu")
    assert len(pool.k_buffer) == len(pool.v_buffer) == 3
    assert pool.k_buffer[1].shape == (7, 2, 5) and pool.v_buffer[2].dtype == dtype
    assert pool.bytes_per_token == 2 * 3 * 2 * 5 * torch.tensor([], dtype=dtype).element_size()
    assert pool.k_buffer[0].data_ptr() != pool.v_buffer[0].data_ptr()


def test_req_pool_rows() -> None:
    pool = ReqToTokenPool(max_requests=2, max_context_len=9, device="cpu")
    assert pool.req_to_token.shape == (2, 9) and pool.req_to_token.dtype == torch.int32
    a, b = pool.alloc_row(), pool.alloc_row()
    assert {a, b} == {0, 1}
    with pytest.raises(OutOfRowsError):
        pool.alloc_row()
    pool.free_row(a)
    with pytest.raises(InvalidSlotsError):
        pool.free_row(a)
    assert pool.alloc_row() == a and pool.rows_in_use() == [0, 1]


@pytest.mark.parametrize("bad", [dict(num_slots=10, page_size=4), dict(num_layers=0), dict(head_dim=True),
                                 dict(dtype=torch.int32), dict(eviction="random"), dict(max_requests=-1)])
def test_config_rejects(bad: dict) -> None:
    base = dict(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=16)
    with pytest.raises(ConfigError):
        CacheConfig(**{**base, **bad})


def test_config_is_frozen() -> None:
    cfg = CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=16, page_size=4)
    assert cfg.num_pages == 4
    with pytest.raises(AttributeError):
        cfg.num_slots = 8  # type: ignore[misc]
