"""Page runs (radixkv/runs.py): tree nodes, the allocator's free pages and an alloc's pages as runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.pools import CACHED, FREE, PRIVATE, PageLedger, SlotAllocator
from radixkv.runs import count, cut, expand, runs_of, section, well_formed


def _page_lists(seed: int, n: int) -> list[np.ndarray]:
    """Random page lists: permutations (runs of 1-2) and concatenated runs of random lengths."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(0, 120))
        if i % 3 == 0:
            pages = rng.permutation(400)[:k]
        else:
            starts, lengths = rng.integers(0, 10_000, 8), rng.integers(1, 40, 8)
            pages = np.concatenate([np.arange(s, s + m) for s, m in zip(starts, lengths)])[:k]
        out.append(pages.astype(rng.choice([np.int32, np.int64])))
    return out


def _reference_runs(pages: list[int]) -> list[int]:
    """Maximal runs: pages whose id less their position is the same, in a row (another way than runs_of's)."""
    runs: list[int] = []
    for _, group in itertools.groupby(enumerate(pages), key=lambda ip: ip[1] - ip[0]):
        ids = [p for _, p in group]
        runs += [ids[0], len(ids)]
    return runs


def test_runs_round_trip_against_a_reference() -> None:
    for pages in _page_lists(0, 300):
        runs = runs_of(pages)
        assert runs == _reference_runs(pages.tolist()) and all(type(x) is int for x in runs)
        assert well_formed(runs, len(pages)) and count(runs) == len(pages)
        for n in {0, 1, len(pages) // 2, len(pages)}:
            got = expand(runs, min(n, len(pages)))
            assert got.dtype == np.int64 and got.flags.writeable and got.tolist() == pages[:n].tolist()


def test_sections_and_cuts_equal_slices() -> None:
    for pages in _page_lists(1, 60):
        runs, n = runs_of(pages), len(pages)
        for lo in range(0, n + 1, 3):
            for k in (0, 1, 7, n - lo):
                part = section(runs, lo, min(k, n - lo))
                assert expand(part, count(part)).tolist() == pages[lo:lo + k].tolist()
        for k in range(1, n):
            head, tail = cut(runs, k)
            assert expand(head, k).tolist() == pages[:k].tolist()
            assert expand(tail, n - k).tolist() == pages[k:].tolist()
            assert runs == runs_of(pages)  # never written in place


def test_malformed_runs_are_not_well_formed() -> None:
    assert well_formed([3, 2, 9, 1], 3) and well_formed([], 0)
    for bad, n in (([3, 2, 9], 2), ([3, 0], 0), ([-1, 2], 2), ([3, 2], 3), ([3.0, 2], 2), ((3, 2), 2),
                   (np.array([3, 2]), 2), ([True, 1], 1)):
        assert not well_formed(bad, n), bad


def test_allocator_pops_runs_in_stack_order_and_merges_pushes() -> None:
    alloc = SlotAllocator(100, 1)
    a = alloc.alloc_runs(10)
    assert a == [90, 10] and alloc.num_free_pages == 90
    alloc.free_runs([90, 4])
    alloc.free_runs([94, 6])  # continues the top run
    assert alloc._runs == [90, 10]
    alloc.free_runs([])
    assert alloc.alloc_runs(3) == [97, 3] and alloc._runs == [90, 7]
    assert alloc.alloc_runs(12) == [85, 5, 90, 7]  # never-used ones under the freed: those first
    assert alloc._runs == [] and alloc.num_free_pages == 85
    alloc.free_runs([90, 7, 10, 2])
    assert alloc.alloc_runs(8) == [91, 6, 10, 2] and alloc._runs == [90, 1]


def test_allocator_runs_hand_out_what_alloc_pages_would() -> None:
    rng = np.random.default_rng(2)
    by_runs, by_pages, out = SlotAllocator(500, 1), SlotAllocator(500, 1), []
    for _ in range(300):
        if out and rng.random() < 0.5:
            freed = [out.pop(int(rng.integers(len(out)))) for _ in range(int(rng.integers(1, len(out) + 1)))]
            by_runs.free_runs(runs_of(np.array(freed)))
            by_pages.free_pages(np.array(freed))
        else:
            k = int(rng.integers(0, min(60, by_pages.num_free_pages) + 1))
            runs, pages = by_runs.alloc_runs(k), by_pages.alloc_pages(k)
            assert expand(runs, count(runs)).tolist() == pages.tolist() and count(runs) == k
            out += pages.tolist()
        assert by_runs.free_mask().tolist() == by_pages.free_mask().tolist()


def test_ledger_fresh_runs_and_release_runs() -> None:
    ledger = PageLedger(num_pages=64, page_size=2)
    cached = ledger.take(6, CACHED, 0, lambda n: pytest.fail("enough free pages"))
    slots = ledger.alloc_slots(2 * 60, 6, lambda n: runs_of(cached[:2]))  # 58 free and 2 evicted
    pages = slots[::2] // 2
    assert expand(ledger.fresh_runs(0, 60), 60).tolist() == pages.tolist()
    assert expand(ledger.fresh_runs(5, 20), 20).tolist() == pages[5:25].tolist()
    assert ledger.all_in(pages, PRIVATE)
    ledger.release_runs(runs_of(pages[:30]))
    assert ledger.all_in(pages[:30], FREE) and ledger.all_in(pages[30:], PRIVATE)
    ledger.check()


def _cache(ps: int, slots: int) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=slots, page_size=ps,
                                  max_requests=2, max_context_len=slots, dtype=torch.float32))


@pytest.mark.parametrize("ps", [1, 4])
def test_nodes_hold_runs_of_their_pages_through_splits_and_evictions(ps: int) -> None:
    rng = np.random.default_rng(ps)
    cache = _cache(ps, 96 * ps)
    for i in range(120):
        toks = rng.integers(0, 3, int(rng.integers(1, 40)) * ps + int(rng.integers(0, ps))).tolist()
        m = cache.match_prefix(toks)
        cache.lock(m.node)
        new = cache.alloc(len(toks) - m.length)
        cache.insert(toks, torch.cat([m.slots, new]))
        cache.unlock(m.node)
        if i % 7 == 0:
            cache.evict(int(rng.integers(1, 20)) * ps)
        cache.check_invariants()  # (check_tree: every node's runs well formed, no page held twice)
        for node in cache.tree.nodes():
            if node.parent is not None and node.pages is not None:
                assert count(node.pages) == node.size // ps
    assert cache.stats.evicted_tokens > 0


@pytest.mark.parametrize("ps", [1, 4])
def test_checks_catch_a_page_held_twice_or_leaked(ps: int) -> None:
    cache = _cache(ps, 64 * ps)
    for toks in ([1] * 8 * ps, [2] * 8 * ps):
        cache.insert(toks, cache.alloc(len(toks)))
    cache.check_invariants()
    a, b = (n for n in cache.tree.nodes() if n.parent is not None)
    kept = b.pages
    b.pages = a.pages[:1] + [1] + section(kept, 1, count(kept) - 1)  # a's first page held twice (b's leaked)
    with pytest.raises(AssertionError):
        cache.check_invariants()
    b.pages = [40, count(kept)]  # free pages held, and b's own pages leaked (cached, held by no node)
    with pytest.raises(AssertionError):
        cache.check_invariants()
    b.pages = kept
    cache.check_invariants()
