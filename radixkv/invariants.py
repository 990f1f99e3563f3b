"""check_cache: recompute the whole state of a RadixCache from scratch and compare.

Checked: the allocator's stack against its mask; the tree (edges, locks, counters, evictable
index: radix/check.py); every page's state re-derived from who actually holds it (allocator, tree
nodes, open Sequences; whatever remains must be alloc-private); sizes(); and each open
Sequence's row: [0, tree_len) equals the slots along its locked path, [tree_len, kv_len) its own
reserved pages, and req_to_token agrees with the Sequence's host mirror.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from radixkv.pools import page_slots
from radixkv.pools.pages import CACHED, FREE, PRIVATE, RESERVED
from radixkv.radix.check import check_tree

if TYPE_CHECKING:
    from radixkv.cache import RadixCache
    from radixkv.sequence import Sequence


def _path_slots(seq: Sequence) -> np.ndarray:
    chunks, node = [], seq.node
    while node.parent is not None:
        chunks.append(node.slots)
        node = node.parent
    return np.concatenate(chunks[::-1]) if chunks else np.empty(0, dtype=np.int64)


def _check_sequence(cache: RadixCache, seq: Sequence, expected: np.ndarray) -> None:
    ps = cache.page_size
    if not (seq.cached_len <= seq.committed_len <= seq.kv_len <= cache.config.max_context_len):
        raise AssertionError(f"{seq}: lengths out of order")
    if seq.tree_len != seq.committed_len // ps * ps or seq.cached_len % ps or seq.node.evicted:
        raise AssertionError(f"{seq}: tree_len {seq.tree_len} does not cover its full committed pages")
    if seq.node.own_locks < 1 or seq._num_tokens < seq.committed_len:
        raise AssertionError(f"{seq}: holds no lock on its node, or lost committed tokens")
    if not np.array_equal(_path_slots(seq), seq._slots[:seq.tree_len]):
        raise AssertionError(f"{seq}: row prefix differs from the slots along its locked path")
    private = seq._slots[seq.tree_len:seq.kv_len]
    pages = private[::ps] // ps
    if not np.array_equal(private, page_slots(pages, ps)[:len(private)]):
        raise AssertionError(f"{seq}: private slots are not laid out page by page")
    if (expected[pages] != PRIVATE).any():
        raise AssertionError(f"{seq}: a private page is also free, cached or another Sequence's")
    expected[pages] = RESERVED
    table = cache.req_pool.req_to_token[seq.row, :seq.kv_len].cpu().numpy()
    if not np.array_equal(table, seq._slots[:seq.kv_len]):
        raise AssertionError(f"{seq}: req_to_token row differs from the Sequence's slots")


def check_cache(cache: RadixCache) -> None:
    ps, num_pages = cache.page_size, cache.config.num_pages
    cache.allocator.check()
    cached_slots, host_slots = check_tree(cache.tree)
    if cache.host is not None:
        cache.host.check(host_slots)
    expected = np.full(num_pages, PRIVATE, dtype=np.int8)
    expected[cache.allocator.free_mask()] = FREE
    cached_pages = cached_slots[::ps] // ps
    if (expected[cached_pages] != PRIVATE).any():
        raise AssertionError("a cached page is also free")
    expected[cached_pages] = CACHED
    if sorted(cache._seqs) != cache.req_pool.rows_in_use():
        raise AssertionError("open Sequences and rows in use disagree")
    for row, seq in cache._seqs.items():
        if seq.row != row or seq.closed:
            raise AssertionError(f"{seq}: filed under row {row}")
        _check_sequence(cache, seq, expected)
    if not np.array_equal(expected, cache.pages.state):
        bad = np.flatnonzero(expected != cache.pages.state)[:8]
        raise AssertionError(f"page states disagree with their holders at pages {bad.tolist()}")
    s = cache.sizes()
    if (s.free, s.cached) != (int((expected == FREE).sum()) * ps, len(cached_slots)):
        raise AssertionError(f"sizes() {s} disagree with the recomputed free/cached counts")
    if s.free + s.cached + s.private != s.total or s.cached != s.evictable + s.protected:
        raise AssertionError(f"sizes() {s} do not add up")
