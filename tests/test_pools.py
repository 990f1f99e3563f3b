"""Pools: the page allocator, the KV pool's layout, and req_to_token rows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, ConfigError, InvalidSlotsError, OutOfRowsError, OutOfSlotsError, RadixCache
from radixkv.pools import (CACHED, FREE, PRIVATE, RESERVED, PageLedger, ReqToTokenPool, SlotAllocator,
                           TokenToKVPool, page_slots, slot_pages)
from radixkv.runs import runs_of
from radixkv.tokens import distinct


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
    more = ledger.take(1, RESERVED, 2, evict=lambda n: asked.append(n) or [int(cached[0]), 1])  # (runs)
    assert asked == [2] and more.tolist() == cached[:1].tolist()  # the evicted page is reused at once
    assert ledger.state.tolist().count(CACHED) == 1 and ledger.all_in(private, PRIVATE)
    ledger.release(private)
    assert ledger.num_free_pages == 2 and ledger.all_in(private, FREE)
    ledger.check()
    ledger.state[private[0]] = PRIVATE  # a state that disagrees with the allocator is caught
    with pytest.raises(AssertionError):
        ledger.check()


def test_allocator_memory_does_not_grow_with_the_pool() -> None:
    # Never-used pages are a count, freed ones a stack of runs: alloc and free touch only the runs they
    # move, and a run of freed pages is two ints however long, never a page's worth each.
    small, big = SlotAllocator(8, 1), SlotAllocator(1 << 22, 1)
    for alloc in (small, big):
        alloc.free_pages(alloc.alloc_pages(3))
        assert alloc.num_free_pages == alloc.num_pages
    assert small._runs == [5, 3] and big._runs == [(1 << 22) - 3, 3]  # the top 3 never-used, freed
    while big.num_free_pages:  # filled by requests of 1000 pages, then a full pool's steady state:
        big.alloc_pages(min(1000, big.num_free_pages))  # each alloc takes what was just freed
    for _ in range(3):
        pages = np.arange(5000, 6000)
        big.free_pages(pages)
        assert big.alloc_pages(1000).tolist() == pages.tolist()
    assert big._runs == []
    big.free_pages(np.arange(7000, 9000))
    big.free_pages(np.arange(9000, 9500))  # continues the top run: merged
    assert big._runs == [7000, 2500]


def test_allocator_hands_out_pages_as_one_preloaded_stack() -> None:
    # Against the stack it replaces: arange(num_pages), popped from the top, freed pages pushed on it.
    rng = np.random.default_rng(0)
    alloc, stack, out = SlotAllocator(300, 2), list(range(300)), []
    for _ in range(400):
        if out and rng.random() < 0.5:
            freed = [out.pop(rng.integers(len(out))) for _ in range(rng.integers(1, len(out) + 1))]
            alloc.free_pages(np.array(freed, dtype=rng.choice([np.int32, np.int64])))
            stack += freed
        else:
            k = int(rng.integers(0, 40))
            if k > len(stack):
                with pytest.raises(OutOfSlotsError):
                    alloc.alloc_pages(k)
                continue
            got = alloc.alloc_pages(k)
            assert got.dtype == np.int64 and got.tolist() == stack[len(stack) - k:]
            del stack[len(stack) - k:]
            out += got.tolist()
        assert alloc.num_free_pages == len(stack)
        assert np.flatnonzero(alloc.free_mask()).tolist() == sorted(stack)


def test_free_mask_catches_a_page_freed_twice() -> None:
    alloc = SlotAllocator(8, 1)
    pages = alloc.alloc_pages(2)
    alloc.free_pages(pages)
    alloc.free_pages(pages[:1])  # on the freed stack twice
    with pytest.raises(AssertionError):
        alloc.free_mask()
    alloc = SlotAllocator(8, 1)
    alloc.free_pages(np.array([0]))  # never handed out
    with pytest.raises(AssertionError):
        alloc.free_mask()


def test_page_slots() -> None:
    assert page_slots(np.array([2, 0]), 3).tolist() == [6, 7, 8, 0, 1, 2]
    assert page_slots(np.array([5, 1]), 1).tolist() == [5, 1]
    big = np.array([2**31 - 1], dtype=np.int32)  # a tree node's int32 pages: slots are int64, never wrapped
    assert page_slots(big, 16).tolist() == [(2**31 - 1) * 16 + i for i in range(16)]
    assert page_slots(big, 1).dtype == page_slots(big, 16).dtype == np.int64


@pytest.mark.parametrize("page_size", [1, 2, 3, 4, 5, 16, 64])
def test_slot_pages_is_floor_division_of_each_page_first_slot(page_size: int) -> None:
    # a power of two shifts instead of dividing: the same floor division for any int64, negative ones included
    # (insert reads the pages of slots it has not range-checked yet)
    rng = np.random.default_rng(page_size)
    slots = np.concatenate([rng.integers(-2**40, 2**40, 200), [-1, -page_size, -page_size - 1, 0, 2**62]])
    slots = slots.repeat(page_size)
    assert slot_pages(slots, page_size).tolist() == [s // page_size for s in slots[::page_size].tolist()]
    assert page_slots(slot_pages(page_slots(np.arange(9), page_size), page_size), page_size).tolist() \
        == page_slots(np.arange(9), page_size).tolist()


def test_page_ids_are_handed_out_int64_and_taken_back_int32_or_int64() -> None:
    alloc = SlotAllocator(num_pages=8, page_size=2)
    pages = alloc.alloc_pages(3)
    assert pages.dtype == np.int64  # numpy indexes much faster with int64 than with int32 arrays
    alloc.free_pages(pages[:1].astype(np.int32))
    alloc.free_pages(pages[1:])
    assert alloc.free_mask().all() and alloc._runs == [5, 3]
    with pytest.raises(ConfigError):
        SlotAllocator(num_pages=2**31, page_size=1)


def test_ledger_keeps_one_byte_per_page() -> None:
    # the state (1): pages never handed out are a count, freed ones a stack of what is free now, and
    # the distinctness check sorts a copy; what the checks compare against grows with the longest call
    tracemalloc.start()
    try:
        ledger = PageLedger(num_pages=1 << 20, page_size=1)
        pages = ledger.take(1000, PRIVATE, 0, evict=lambda n: pytest.fail("enough free pages"))
        assert ledger.private_and_distinct(pages) is None and ledger.all_in(pages, PRIVATE)
        ledger.release(pages)
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 1 << 20 <= used < (1 << 20) + 64_000


def test_ledger_remembers_the_last_alloc_until_a_page_changes_state() -> None:
    ledger = PageLedger(num_pages=8, page_size=4)
    no_eviction = lambda n: pytest.fail("enough free pages")  # noqa: E731
    slots = ledger.alloc_slots(6, 0, no_eviction)  # two pages, the second's first two slots
    pages = np.unique(slots // 4)
    assert len(slots) == 6 and len(pages) == 2 and ledger.all_in(pages, PRIVATE)
    assert ledger.fresh_start(slots) == 0
    assert ledger.fresh_start(np.concatenate([np.arange(4), slots])) == 4  # after a page of other slots
    assert ledger.fresh_start(np.concatenate([np.arange(2), slots])) == -1  # not at a page boundary
    assert ledger.fresh_start(slots[1:]) == -1 and ledger.fresh_start(slots[::-1].copy()) == -1
    slots[0] += 1  # what the caller got is its own: writing into it changes nothing remembered
    assert ledger.fresh_start(slots) == -1
    slots[0] -= 1
    ledger.take(1, RESERVED, 0, no_eviction)  # other pages change state: still remembered
    assert ledger.fresh_start(slots) == 0
    ledger.move(pages[:1], CACHED)
    assert ledger.fresh_start(slots) == -1
    again = ledger.alloc_slots(4, 0, no_eviction)
    ledger.release(np.unique(again // 4))
    assert ledger.fresh_start(again) == -1
    ledger.check()


def _cache(page_size: int) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=16 * page_size,
                                  page_size=page_size, max_requests=2, max_context_len=16 * page_size,
                                  dtype=torch.float32))


@pytest.mark.parametrize("ps", [1, 4])
def test_insert_of_what_alloc_just_gave(ps: int) -> None:
    # the usual lifecycle, where the ledger vouches for alloc()'s slots: match, alloc, insert
    cache = _cache(ps)
    toks = list(range(3 * ps + ps // 2))  # a partial last page when ps > 1
    m = cache.match_prefix(toks)
    assert cache.insert(toks, torch.cat([m.slots, cache.alloc(len(toks) - m.length)])) == 0
    cache.check_invariants()
    assert cache.sizes().cached == 3 * ps and cache.sizes().private == 0
    # a prompt matched shorter than what insert finds cached: alloc()'s first pages duplicate cached ones
    longer = toks[:3 * ps] + [99] * (2 * ps)
    m = cache.match_prefix(longer[:ps])
    assert m.length == ps
    assert cache.insert(longer, torch.cat([m.slots, cache.alloc(len(longer) - m.length)])) == 3 * ps
    cache.check_invariants()
    assert cache.sizes().cached == 5 * ps and cache.sizes().private == 0
    # slots from an earlier alloc() before the fresh ones, where the tree has its own: a duplicate, freed
    earlier, fresh = cache.alloc(ps), cache.alloc(ps)
    assert cache.insert(longer[:2 * ps], torch.cat([earlier, fresh])) == 2 * ps
    earlier, fresh = cache.alloc(ps), cache.alloc(ps)
    assert cache.insert([7] * 2 * ps, torch.cat([earlier, fresh])) == 0
    cache.check_invariants()
    assert cache.sizes().cached == 7 * ps and cache.sizes().private == 0


@pytest.mark.parametrize("ps", [1, 4])
def test_alloc_pages_read_private_until_insert_settles_them(ps: int) -> None:
    # alloc()'s PRIVATE write is lazy (pools/ledger.py): every reader of ledger.state sees it, and an
    # insert that takes alloc()'s own slots writes each page once (CACHED, or FREE for a partial tail)
    cache = _cache(ps)

    def state(slots: torch.Tensor) -> np.ndarray:
        return cache.ledger.state[np.unique(slots.numpy() // ps)]

    first = cache.alloc(2 * ps)
    second = cache.alloc(ps + 1)  # the first alloc's pages are written when the second's are taken
    assert (state(first) == PRIVATE).all() and (state(second) == PRIVATE).all()
    cache.check_invariants()
    cache.insert(list(range(ps + 1)), second)  # at page_size > 1 a partial last page: freed
    assert (state(second[:ps]) == CACHED).all() and (state(second[ps:]) == (FREE if ps > 1 else CACHED)).all()
    assert (state(first) == PRIVATE).all()
    cache.check_invariants()
    cache.free(first)
    assert (state(first) == FREE).all()
    third = cache.alloc(ps)
    assert cache.sizes().private == ps
    cache.insert([9] * ps, third)
    assert (state(third) == CACHED).all() and cache.sizes().private == 0
    cache.check_invariants()


def test_pages_evicted_for_an_alloc_are_not_written_free_in_between() -> None:
    # alloc_slots pushes the pages it evicts and pops them again at once (pools/ledger.py): they read
    # PRIVATE through `state`, and evicted pages the alloc did not need are written FREE at once
    ledger = PageLedger(num_pages=8, page_size=2)
    no_eviction = lambda n: pytest.fail("enough free pages")  # noqa: E731
    cached = ledger.take(7, CACHED, 0, no_eviction)
    asked: list[int] = []

    def evict(tokens: int) -> list[int]:  # gives back more than asked: pages 0-3 of the cached ones, as runs
        asked.append(tokens)
        return runs_of(cached[:4])

    slots = ledger.alloc_slots(5, 7, evict)  # 3 pages: 1 free, 2 evicted (of 4 evicted)
    assert asked == [4] and len(slots) == 5
    pages = np.unique(slots // 2)
    assert ledger.all_in(pages, PRIVATE) and ledger.all_in(cached[:1], FREE) and ledger.all_in(cached[4:], CACHED)
    ledger.check()
    cached = ledger.take(2, CACHED, 0, no_eviction)  # the free pages, cached again
    slots = ledger.alloc_slots(4, 9, lambda n: runs_of(cached))  # both evicted, popped again
    assert ledger.fresh_start(slots) == 0  # (remembered after an alloc that evicted)
    ledger.settle(np.unique(slots // 2), np.empty(0, dtype=np.int64), True, 0)
    assert ledger.all_in(np.unique(slots // 2), CACHED)
    ledger.check()


@pytest.mark.parametrize("ps", [1, 4])
def test_insert_of_pages_alloc_evicted_writes_each_state_it_ends_in(ps: int) -> None:
    # a full cache: every alloc evicts; insert settles the pages that were free before and the
    # evicted ones alike (CACHED, duplicates and a partial tail FREE), as check_invariants recomputes
    cache = _cache(ps)
    for i in range(4):
        cache.insert([100 + i] * 4 * ps, cache.alloc(4 * ps))

    def alloc_evicting(n: int) -> torch.Tensor:
        evicted = cache.stats.evicted_tokens
        slots = cache.alloc(n)
        assert cache.stats.evicted_tokens > evicted
        return slots

    toks = [100] * 2 * ps + list(range(3 * ps + ps // 2))  # 2 pages cached, then new ones
    m = cache.match_prefix(toks)
    assert cache.insert(toks, torch.cat([m.slots, alloc_evicting(len(toks) - m.length)])) == 2 * ps
    cache.check_invariants()
    cache.evict(ps)  # one page free: the next alloc pops it and evicts the rest
    toks = [102] * 2 * ps + list(range(20, 20 + 3 * ps))
    m = cache.match_prefix(toks)
    assert cache.insert(toks, torch.cat([m.slots, alloc_evicting(len(toks) - m.length)])) == m.length
    cache.check_invariants()
    toks = [101] * 2 * ps + list(range(50, 50 + 3 * ps))
    m = cache.match_prefix(toks)
    fresh = alloc_evicting(len(toks) - m.length)
    assert (cache.ledger.state[np.unique(fresh.numpy() // ps)] == PRIVATE).all()  # written when read
    assert cache.insert(toks, torch.cat([m.slots, fresh])) == m.length
    cache.check_invariants()
    # matched shorter than what is cached: alloc()'s first pages (evicted ones among them) are duplicates
    longer = toks + [7] * 2 * ps
    m = cache.match_prefix(longer[:ps])
    assert cache.insert(longer, torch.cat([m.slots, alloc_evicting(len(longer) - m.length)])) == len(toks)
    cache.check_invariants()
    assert cache.sizes().private == 0


@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("misuse", ["written into", "freed since", "inserted twice", "named before", "misordered"])
def test_insert_refuses_alloc_slots_that_are_no_longer_what_it_gave(ps: int, misuse: str) -> None:
    cache = _cache(ps)
    cache.insert([5] * ps, cache.alloc(ps))
    toks = list(range(2 * ps))
    slots = cache.alloc(2 * ps)
    if misuse == "written into":
        slots[ps:] = slots[:ps].clone()  # one page named twice
    elif misuse == "freed since":
        cache.free(slots[:ps])
    elif misuse == "inserted twice":
        cache.insert([6] * 2 * ps, slots)
    elif misuse == "named before":  # a fresh page also named before the fresh slots
        toks, slots = list(range(3 * ps)), torch.cat([slots[ps:], slots])
    elif misuse == "misordered":
        slots = torch.cat([slots[:ps], slots[ps:].flip(0)]) if ps > 1 else slots.flip(0)[:1].repeat(2)
    before = (cache.sizes(), cache.ledger.state.copy())
    with pytest.raises(InvalidSlotsError):
        cache.insert(toks, slots)
    assert cache.sizes() == before[0] and np.array_equal(cache.ledger.state, before[1])
    cache.check_invariants()


@pytest.mark.parametrize("ps", [1, 4])
@pytest.mark.parametrize("misuse", ["none", "a prefix", "written into", "a page named twice", "evicted since",
                                    "split since", "strided"])
def test_insert_checks_the_slots_match_prefix_gave(misuse: str, ps: int) -> None:
    # the cache keeps its own copy of the last match's slots; a head equal to (a start of) it is whole pages
    # in order, and the tree's own while the match's node holds the same pages (else compared with the tree's)
    cache = _cache(ps)
    toks = list(range(3 * ps))
    cache.insert(toks, cache.alloc(3 * ps))
    m = cache.match_prefix(toks + [50] * ps)
    assert m.length == 3 * ps
    head, more = m.slots, toks + [50] * ps
    if misuse == "a prefix":
        head, more = head[:2 * ps], toks[:2 * ps] + [50] * ps
    elif misuse == "written into":
        head[1], head[2] = int(head[2]), int(head[1])  # a page's slots out of order
    elif misuse == "a page named twice":
        head[:ps] = head[ps:2 * ps].clone()
    elif misuse == "evicted since":
        cache.evict(3 * ps)
    elif misuse == "split since":  # the match's node keeps its lower part, in a new array: compared instead
        cache.locate(toks[:ps])
    slots = torch.cat([head, cache.alloc(len(more) - len(head))])
    if misuse == "strided":  # no flat buffer to compare against: copied first
        slots = torch.stack([slots, slots]).t().reshape(-1)[::2]
        assert not slots.is_contiguous()
    before = (cache.sizes(), cache.ledger.state.copy())
    if misuse in ("none", "a prefix", "split since", "strided"):
        assert cache.insert(more, slots) == len(head)
        assert cache.sizes().cached == 4 * ps and cache.sizes().private == 0
    else:
        with pytest.raises(InvalidSlotsError):
            cache.insert(more, slots)
        assert cache.sizes() == before[0] and np.array_equal(cache.ledger.state, before[1])
    cache.check_invariants()


@pytest.mark.parametrize("ps", [1, 4])
def test_insert_after_the_matched_node_regained_other_pages(ps: int) -> None:
    # the match's node left the device (a host copy kept it in the tree) and came back with other pages:
    # the slots that match gave are not the tree's any more, though the node is on the insert's path
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=16 * ps, page_size=ps,
                                   max_requests=2, max_context_len=16 * ps, dtype=torch.float32,
                                   host_slots=16 * ps, host_write_policy="write_through"))
    toks = list(range(100, 100 + 6 * ps))
    cache.insert(toks, cache.alloc(6 * ps))
    m = cache.match_prefix(toks + [7] * ps)
    assert m.length == 6 * ps
    cache.evict(6 * ps)  # host-only now
    hold = cache.alloc(6 * ps)  # the pages just freed (handed out last-freed first)
    cache.insert(toks, cache.alloc(6 * ps))  # the node regains other pages
    cache.free(hold)
    slots = torch.cat([m.slots, cache.alloc(ps)])
    before = (cache.sizes(), cache.ledger.state.copy())
    with pytest.raises(InvalidSlotsError):
        cache.insert(toks + [7] * ps, slots)
    assert cache.sizes() == before[0] and np.array_equal(cache.ledger.state, before[1])
    cache.check_invariants()


@pytest.mark.parametrize("n", [2, 3, 7, 8, 9, 100, 1000])
def test_distinct_finds_a_repeat_at_any_length(n: int) -> None:
    rng = np.random.default_rng(n)
    for dtype in (np.int32, np.int64):
        values = rng.permutation(4 * n)[:n].astype(dtype)
        assert distinct(values) and distinct(values[:1]) and distinct(values[:0])
        for i, j in ((0, n - 1), (n // 2, n // 2 - 1), (n - 1, 0)):  # a repeat anywhere, neighbours too
            repeated = values.copy()
            repeated[i] = repeated[j]
            assert not distinct(repeated)
            assert np.array_equal(repeated[j], values[j])  # the caller's array is not reordered


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
