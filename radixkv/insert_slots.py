"""InsertSlots: the slots given to `RadixCache.insert`, checked before anything changes.

For insert(tokens, slots) with n = len(tokens) // page_size * page_size whole-page positions:

    [0, cached_len)      per page: the tree's own slots there (they stay), or the page_size slots of
                         one private page in order (a duplicate: freed)
    [cached_len, n)      the page_size slots of one private page per page, in order (become the tree's)
    [n, len(tokens))     a trailing partial page: private slots, whose pages are freed

Every private page named must be distinct. `accept` runs inside the tree's insert, after its
read-only walk found cached_len and before it changes anything, so a refusal changes nothing.

The usual caller matched, allocated and inserted: its slots are the match's (the tree's own) and
then exactly what alloc() just handed out. The ledger proves the second part in one comparison
(`PageLedger.fresh_start`: every page there private, named once, whole pages in order). At
page_size > 1 the first part's structure (whole pages, in order) is proved by one comparison too,
with `matched`: the cache's own copy of the slots its last match_prefix returned (page_slots of
some pages, so a run equal to its start is whole pages in order); which pages they are is then
`accept`'s check against the tree's. Anything else gets the full checks.
"""

from __future__ import annotations

import numpy as np

from radixkv.errors import InvalidSlotsError
from radixkv.pools import PageLedger, page_slots
from radixkv.tokens import check_range, same_values

_EMPTY = np.empty(0, dtype=np.int64)
_any, _ne = np.logical_or.reduce, np.not_equal  # (no Python wrappers)


class InsertSlots:
    def __init__(self, ledger: PageLedger, given: np.ndarray, n: int, matched: np.ndarray = _EMPTY) -> None:
        """`given`: int64 `[len(tokens)]` slots, not yet range-checked; `n`: whole-page positions;
        `matched`: int64 slots of whole pages in order, private to the cache (the last match's), or empty."""
        ps = ledger.page_size
        self.ledger = ledger
        start = ledger.fresh_start(given)  # positions [start, len(given)) are alloc()'s own slots, or -1
        self.fresh = start // ps  # ... from this page on (-1: none)
        body = given if n == len(given) else given[:n]
        if ps == 1:
            self.pages = body
        else:  # each page of positions: the slots of one page, in order (one memcmp against them)
            self.pages = body[::ps] // ps  # int64 [n // ps]
            head = body if start < 0 else body[:start]  # (alloc()'s own slots are whole pages in order)
            h = len(head)
            if h and not (h <= len(matched) and same_values(head, matched if h == len(matched) else matched[:h])) \
                    and page_slots(self.pages[:h // ps], ps).tobytes() != head.tobytes():
                raise InvalidSlotsError("insert: each page of positions must be the tree's own slots there "
                                        "or the page_size slots of one private page, in order")
        if n == len(given):
            self.tail = _EMPTY
        else:  # the pages of the partial tail: alloc()'s last page, or checked
            self.tail = given[n:n + 1] // ps if start >= 0 else self._tail_pages(given[n:], ps)
        self.duplicates = self.new = _EMPTY
        self.run_at = -1

    def _tail_pages(self, tail: np.ndarray, ps: int) -> np.ndarray:
        check_range(tail, self.ledger.num_pages * ps, "insert: slots")
        if len(set(tail.tolist())) != len(tail):  # fewer than page_size slots
            raise InvalidSlotsError("insert: slots must be distinct; the same slot appears twice")
        return np.array(sorted(set((tail // ps).tolist())), dtype=np.int64)

    def accept(self, cached_len: int, tree_pages: np.ndarray) -> None:
        """Classify the given pages against the tree's; InvalidSlotsError unless every page that is
        not the tree's own is private and named once."""
        ledger = self.ledger
        k, f = cached_len // ledger.page_size, self.fresh
        if 0 <= f <= k and (not f or same_values(self.pages[:f], tree_pages if f == k else tree_pages[:f])):
            # the tree's own pages up to f, alloc()'s from there: those before k duplicate cached ones
            pages = self.pages
            self.duplicates, self.new = (pages[f:k] if f < k else _EMPTY), (pages[k:] if k else pages)
            self.run_at = k - f  # `new`: alloc()'s pages in order from its (k - f)-th on (PageLedger.settle)
            return
        head = self.pages[:k]
        differ = _ne(head, tree_pages)  # (k pages each)
        duplicates = _EMPTY if not k or not _any(differ) else head[differ]
        new = self.pages[k:] if k else self.pages
        private = new if not len(duplicates) and not len(self.tail) else np.concatenate([duplicates, new, self.tail])
        why = ledger.private_and_distinct(private)
        if why is not None:
            raise InvalidSlotsError(f"insert: slots must be the tree's own, or distinct private pages from "
                                    f"alloc(): {why}")
        self.duplicates, self.new = duplicates, new

    def freed(self) -> np.ndarray:
        """Pages the caller gives up: duplicates of cached pages and the partial tail's pages."""
        return self.tail if not len(self.duplicates) else np.concatenate([self.duplicates, self.tail])
