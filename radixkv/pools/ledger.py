"""PageLedger: the state of every page, and the allocator behind it. The only code that changes either.

Every page is in exactly one state at every moment:

    FREE      in the SlotAllocator
    CACHED    owned by exactly one tree node
    PRIVATE   handed out by alloc(), not yet freed or inserted
    RESERVED  handed out by reserve() to an open Sequence (which one: the Sequence's own pages say)

Callers validate, then move pages: `take` pops free pages into a state (asking the caller's
`evict` callback for cached pages first when too few are free), `move` changes the state of pages
that stay out of the allocator (private -> cached when the tree adopts them), `release` gives pages
back. Transitions are vectorized over the pages moved; nothing here walks the whole pool.

The ledger remembers the last `alloc_slots` (its pages as runs, radixkv/runs.py: `are_first_slots`
compares a caller's buffer with them, no copy of either) until any page changes state again (`move`,
`release`): slots a caller hands back that equal them value for value (`fresh_start`) are known
private and distinct without reading a page's state, which spares insert() its per-page checks in
the usual lifecycle (match, alloc, insert). Any other slots get the full checks.
The last `alloc_slots`' pages are written PRIVATE lazily: on the first read of `state` or the next
change of any page, unless `settle` moves every one of them on at once (insert's usual end: each
page is then written once, not PRIVATE and then CACHED; at page_size 1 a write per token).
Pages that `alloc_slots` had to evict and pops again at once (the allocator hands out the pages
freed last first) are not written FREE in between: until that lazy write their entry in `_state`
still reads CACHED, so `settle` writes CACHED only to the pages that were free before. In the
steady state of a full cache, where every allocation evicts, that spares both writes per token.

`fresh_runs` hands insert those runs for a new leaf's pages, so no request turns pages into runs.

Memory: per page, the state (1 byte). The allocator keeps its free pages as runs (a few ints per
run, a count for the never-used ones), and the distinctness check
sorts a copy of the pages it is given (no table per page). The constant rows that `all_in` compares against grow with
the largest call, not the pool; the last alloc is its runs.
"""

from __future__ import annotations

from typing import Callable, Final

import numpy as np

from radixkv.errors import OutOfSlotsError
from radixkv.pools.allocator import SlotAllocator
from radixkv.runs import are_first_slots, count, expand, expand_slots, section
from radixkv.tokens import distinct

FREE, CACHED, PRIVATE, RESERVED = 0, 1, 2, 3
_max: Final = np.maximum.reduce  # ndarray.max() without its Python wrapper (Final: compiled, a C static)
_I64: Final = np.dtype(np.int64)
_U64: Final = np.dtype(np.uint64)
STATE_NAMES = {FREE: "free", CACHED: "cached", PRIVATE: "private (alloc)", RESERVED: "reserved by a Sequence"}


class PageLedger:
    def __init__(self, num_pages: int, page_size: int) -> None:
        self.page_size = page_size
        self.num_pages = num_pages
        self.allocator = SlotAllocator(num_pages, page_size)
        self._state = np.zeros(num_pages, dtype=np.int8)  # FREE / CACHED / PRIVATE / RESERVED per page
        self._unwritten = False  # whether the last alloc_slots()' pages (`_fresh_runs`), PRIVATE, are not yet in _state
        self._stale = 0  # how many of those pages, the last ones, still read CACHED in _state (evicted, popped again)
        self._popped_stale = 0  # the same count for the last `_pop`
        self._rows = {s: b"" for s in (FREE, CACHED, PRIVATE, RESERVED)}  # state -> its byte repeated: memcmp checks
        self._fresh = -1  # how many slots the last alloc_slots() handed out, until a page changes state; -1 after
        self._fresh_runs: list[int] = []  # the last alloc_slots()' pages as runs ...
        self._fresh_pages = 0  # ... and how many

    @property
    def state(self) -> np.ndarray:
        """int8 `[num_pages]`: FREE / CACHED / PRIVATE / RESERVED per page (every page written)."""
        if self._unwritten:
            self._write_unwritten()
        return self._state

    def _write_unwritten(self) -> None:
        self._unwritten = False
        self._stale = 0
        if self._fresh_pages:
            self._state[expand(self._fresh_runs, self._fresh_pages)] = PRIVATE

    @property
    def num_free_pages(self) -> int:
        return self.allocator.num_free_pages

    def take(self, k: int, state: int, evictable_pages: int, evict: Callable[[int], list[int]]) -> np.ndarray:
        """Pop `k` free pages into `state`: int64 `[k]`. When fewer are free, `evict(tokens)` must
        return at least the missing cached pages (as runs), which go back to the allocator first.
        OutOfSlotsError, nothing changed, if even `evictable_pages` more cannot serve."""
        pages = expand(self._pop(k, evictable_pages, evict), k)
        self._state[pages] = state  # (pages that were free: an unwritten page is not among them)
        return pages

    def _pop(self, k: int, evictable_pages: int, evict: Callable[[int], list[int]]) -> list[int]:
        """`take` without writing the pages' state, nor expanding the runs it pops. The pages evicted for it
        go onto the allocator's stack unwritten, so the last `_popped_stale` of those popped still read
        CACHED in `_state` (evicted ones left on the stack are written FREE): the caller writes them."""
        allocator = self.allocator
        short = k - allocator.num_free_pages
        self._popped_stale = 0
        if short > 0:
            if short > evictable_pages:
                ps = self.page_size
                raise OutOfSlotsError(
                    f"need {k} pages ({k * ps} slots): {allocator.num_free_pages} free and "
                    f"{evictable_pages} evictable; close Sequences, unlock nodes, or raise CacheConfig.num_slots")
            evicted = evict(short * self.page_size)  # (runs, cached until now)
            self._fresh = -1
            allocator.free_runs(evicted)
            e = count(evicted)
            if e > k:  # (pushed last, popped first: the first e - k stay free)
                self._write_runs(section(evicted, 0, e - k), FREE)
            self._popped_stale = min(e, k)
        return allocator.alloc_runs(k)

    def alloc_slots(self, n: int, evictable_pages: int, evict: Callable[[int], list[int]]) -> np.ndarray:
        """`n` private slots, the first n of ceil(n / page_size) pages from `take`: int64 `[n]` (the
        caller's to keep). Remembered, for `fresh_start`, until a page changes state again; their
        state is written PRIVATE lazily (the module's docstring)."""
        ps = self.page_size
        k = -(-n // ps)
        runs = self._pop(k, evictable_pages, evict)
        if self._unwritten:  # (the previous alloc's: before its runs are replaced)
            self._write_unwritten()
        self._fresh, self._unwritten, self._stale = n, True, self._popped_stale
        self._fresh_runs, self._fresh_pages = runs, k
        return expand_slots(runs, n, ps)

    def fresh_runs(self, lo: int, n: int) -> list[int]:
        """The runs of pages [lo, lo + n) of the last `alloc_slots`, valid while `fresh_start` is: a new list,
        or all of them (the allocator's list, which nothing writes: the caller may keep it)."""
        if lo == 0 and n == self._fresh_pages:
            return self._fresh_runs
        return section(self._fresh_runs, lo, n)

    def fresh_start(self, slots: np.ndarray) -> int:
        """Where int64 `slots` end with exactly the slots of the last `alloc_slots` (a page boundary),
        if no page has changed state since; -1 otherwise. From there on, every page is private and
        named once (whole pages in order, the last one's first slots if partial)."""
        n = self._fresh
        if n < 0:
            return -1
        start = len(slots) - n
        ps = self.page_size
        if start < 0 or start % ps:
            return -1
        return start if are_first_slots(self._fresh_runs, ps, slots if start == 0 else slots[start:]) else -1

    def move(self, pages: np.ndarray, state: int) -> None:
        """Pages that stay allocated change hands (e.g. private -> cached)."""
        self._fresh = -1
        if self._unwritten:
            self._write_unwritten()
        self._state[pages] = state

    def release(self, pages: np.ndarray) -> None:
        """Give `pages` (int32 or int64, distinct, not free: the caller checked their states) back to the allocator."""
        self._fresh = -1
        if self._unwritten:
            self._write_unwritten()
        if len(pages):
            self._state[pages.astype(_I64, copy=False)] = FREE  # numpy indexes with int64 2-3x faster than int32
            self.allocator.free_pages(pages)  # (as runs: runs_of)

    def release_runs(self, runs: list[int]) -> None:
        """`release` for pages given as runs (a tree eviction's)."""
        self._fresh = -1
        if self._unwritten:
            self._write_unwritten()
        self._write_runs(runs, FREE)
        self.allocator.free_runs(runs)

    def _write_runs(self, runs: list[int], state: int) -> None:
        st = self._state
        for j in range(0, len(runs), 2):
            st[runs[j]:runs[j] + runs[j + 1]] = state

    def settle(self, cached: np.ndarray, freed: np.ndarray, fresh_spent: bool, run_at: int = -1) -> None:
        """insert()'s end: private `cached` pages become CACHED, `freed` go back (as `move`, then
        `release`). `fresh_spent`: the caller's slots ended with the last `alloc_slots`' (its
        `fresh_start` was >= 0, nothing changed since), so `cached` and `freed` hold every one of its
        pages: their lazy PRIVATE write is skipped, each is written once here. `run_at` >= 0: `cached`
        is a run of those pages in their order, from the run_at-th on; the ones of them that
        still read CACHED (evicted for that alloc: the last `_stale`) are not written again."""
        pending, stale = self._unwritten, self._stale
        if fresh_spent and self._fresh >= 0:
            self._unwritten, self._stale = False, 0
            if pending and run_at >= 0:
                self._fresh = -1
                fresh = self._fresh_pages - stale - run_at  # pages of the run that were free before
                if fresh > 0 and len(cached):
                    self._state[cached if fresh >= len(cached) else cached[:fresh]] = CACHED
                self.release(freed)
                return
        self.move(cached, CACHED)
        self.release(freed)

    def all_in(self, pages: np.ndarray, state: int) -> bool:
        """Whether every page of `pages` (int64, in range) is in `state`."""
        return self.state[pages].tobytes() == self._row(state, len(pages))

    def private_and_distinct(self, pages: np.ndarray) -> str | None:
        """Why `pages` (int64, any values) are not distinct private pages in range, or None if they are."""
        if len(pages) and _max(pages.view(_U64)) >= self.num_pages:  # a negative page, seen as uint64, is huge
            return f"pages must lie in [0, {self.num_pages}), got max {pages.max()} and min {pages.min()}"
        if self.state[pages].tobytes() != self._row(PRIVATE, len(pages)):  # (a uint64 index would be cast first)
            return self.describe(pages, PRIVATE)
        if not distinct(pages):
            return "a private page is named twice"
        return None

    def _row(self, state: int, n: int) -> bytes:
        """`n` bytes of value `state`; the row kept per state grows (doubling) to the longest asked."""
        row = self._rows[state]
        if len(row) < n:
            row = self._rows[state] = bytes([state]) * max(n, 2 * len(row))
        return row[:n]

    def describe(self, pages: np.ndarray, want: int) -> str:
        """Say which of `pages` are not in state `want`, and what they are instead."""
        bad = pages[self.state[pages] != want][:4]
        return ", ".join(f"page {p} is {STATE_NAMES[int(self.state[p])]}" for p in bad)

    def check(self) -> None:
        """The allocator holds each page at most once, and exactly the pages in state FREE."""
        if not np.array_equal(self.allocator.free_mask(), self.state == FREE):
            raise AssertionError("ledger: pages in state FREE != pages in the allocator")
