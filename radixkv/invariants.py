"""check_cache: one check per owner, then a cross-check that recomputes page ownership from scratch.

    ledger.check()      the allocator's stack against its mask, and FREE == in the allocator
    check_tree(tree)    edges, locks by holder, counters, evictable indexes (radix/check.py)
    host.check(...)     host pages: free, or one node's copy
    seqs.check()        rows in use, handles, lengths in order, req_to_token == each row's mirror
    check_groups        each secondary group's ledger against the tree (and a window group's
                        against the open Sequences: cache_windows.py)
    cross-check         every page's state re-derived from who actually holds it (allocator, tree
                        nodes, open Sequences; whatever remains must be alloc-private); each open
                        Sequence's row: [0, tree_len) equals the slots along its locked path and
                        [tree_len, kv_len) its own pages laid out in order; each node's Sequence
                        locks equal the open Sequences that hold it.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from radixkv.cache_windows import WindowGroup
from radixkv.pools import CACHED, FREE, PRIVATE, RESERVED, PageLedger, page_slots
from radixkv.radix import RadixTree, check_tree
from radixkv.runs import count, expand

if TYPE_CHECKING:
    from radixkv.cache_groups import SecondaryGroup
    from radixkv.host_tier import HostTier
    from radixkv.sequences import SequenceTable


def _path_pages(node) -> np.ndarray:  # noqa: ANN001 - a TreeNode
    chunks = []
    while node.parent is not None:
        chunks.append(expand(node.pages, count(node.pages)))
        node = node.parent
    return np.concatenate(chunks[::-1]) if chunks else np.empty(0, dtype=np.int64)


def _check_sequence(rec, ps: int, expected: np.ndarray) -> None:  # noqa: ANN001 - a sequence record
    tree_len = rec.node.end
    if tree_len != rec.committed_len // ps * ps or rec.cached_len % ps or rec.node.evicted:
        raise AssertionError(f"{rec.handle}: tree_len {tree_len} does not cover its full committed pages")
    if not np.array_equal(page_slots(_path_pages(rec.node), ps), rec.slots[:tree_len]):
        raise AssertionError(f"{rec.handle}: row prefix differs from the slots along its locked path")
    private = rec.slots[tree_len:rec.kv_len]
    pages = private[::ps] // ps
    if not np.array_equal(private, page_slots(pages, ps)[:len(private)]):
        raise AssertionError(f"{rec.handle}: private slots are not laid out page by page")
    if (expected[pages] != PRIVATE).any():
        raise AssertionError(f"{rec.handle}: a private page is also free, cached or another Sequence's")
    expected[pages] = RESERVED


def check_cache(ledger: PageLedger, tree: RadixTree, seqs: SequenceTable, host: HostTier | None) -> None:
    ps = ledger.page_size
    ledger.check()
    cached_pages, host_pages = check_tree(tree)
    if host is not None:
        host.check(host_pages)
    expected = np.full(ledger.num_pages, PRIVATE, dtype=np.int8)
    expected[ledger.allocator.free_mask()] = FREE
    if (expected[cached_pages] != PRIVATE).any():
        raise AssertionError("a cached page is also free")
    expected[cached_pages] = CACHED
    seqs.check()
    records = seqs.records()
    for rec in records:
        _check_sequence(rec, ps, expected)
    holders = Counter(id(r.node) for r in records)
    for node in tree.nodes():
        if node.seq_locks != holders.get(id(node), 0):
            raise AssertionError(f"{node}: {node.seq_locks} Sequence locks but {holders.get(id(node), 0)} "
                                 "open Sequences hold it")
    if not np.array_equal(expected, ledger.state):
        bad = np.flatnonzero(expected != ledger.state)[:8]
        raise AssertionError(f"page states disagree with their holders at pages {bad.tolist()}")
    if tree.evictable_size + tree.protected_size != len(cached_pages) * ps:
        raise AssertionError("tree counters disagree with the pages its nodes hold")


def check_groups(groups: tuple[SecondaryGroup, ...], seqs: SequenceTable) -> None:
    """Each secondary group's ledger against the tree; a window group's also against the open
    Sequences: their private pages' window pages, and window KV for every position they still read."""
    for group in groups:
        if not isinstance(group, WindowGroup):
            group.check()
            continue
        ps, reach, private, needed = group.page_size, group.reach, [], []
        for rec in seqs.records():
            private.append(rec.slots[rec.node.end:rec.kv_len][::ps] // ps)
            needed.append(np.unique(rec.slots[max(0, reach.first(rec.committed_len)):rec.kv_len] // ps))
        group.check_window(private, needed)
