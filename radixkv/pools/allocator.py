"""SlotAllocator: hands out free pages of `page_size` consecutive slots.

Page `p` holds slots `[p * page_size, (p + 1) * page_size)`. The free pages form one LIFO stack,
kept in two parts (pools hold fewer than 2**31 pages, so page ids are stored int32):

    [0, _unused)       pages never handed out: only a count. An alloc that finds the stack empty
                       takes the top ones as they are; one that finds a few pages there moves a chunk
                       (the top 8192, or as many as it needs) onto the stack below them
    _stack[:_top]      int32, 4 bytes a page: such a chunk and the pages freed since, the last freed
                       on top. Its array grows (doubling) to the most pages it held at once and never
                       shrinks (a full cache empties it on every alloc): in a full cache's steady
                       state, where each alloc evicts about what it takes, about the longest request

`alloc_pages(k)` pops k ids (the freed ones first, then the top of the never-used ones) and
`free_pages(pages)` pushes them, so both cost O(pages moved), never O(pool size) (SGLang's allocator
`torch.cat`s its whole free list on every free). Pages come out exactly as from one stack preloaded
with `arange(num_pages)`: pages freed last are handed out first, which keeps recently touched KV warm.
Page ids are handed around int64: numpy indexes with an int32 array 2-10x slower than with an int64
one (it converts the index first), and every page handed out indexes the ledger's state at once.
The allocator trusts its caller to free only pages it handed out (the PageLedger checks page
states first); `free_mask()` rebuilds the free set from both parts and raises if a page is in it twice.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from radixkv.errors import ConfigError, OutOfSlotsError

MAX_PAGES = 2**31 - 1  # page ids are stored int32
_I64: Final = np.dtype(np.int64)  # (Final: compiled, a C static, not a module-dict lookup)
_TILES: dict[int, np.ndarray] = {}  # page_size -> arange(page_size) repeated, int64, read only; grows to the longest call
# page_size -> itself as a 0-d int64 array: a ufunc operand that needs no scalar conversion (~2k instructions a call)
_FACTORS: dict[int, np.ndarray] = {}


def page_slots(pages: np.ndarray, page_size: int) -> np.ndarray:
    """Slots of `pages` (int32 or int64), page after page: int64 `[len(pages) * page_size]`
    (`pages` itself at page_size 1 when it is int64). Each page's first slot repeated page_size
    times, plus 0..page_size-1 from a kept tile: two long passes (a `[pages, 1] + [page_size]`
    broadcast runs a page_size-long inner loop per page, 2-4x slower at page 16)."""
    if page_size == 1:  # (a dtype test is a struct read; astype(copy=False) a method call)
        return pages if pages.dtype is _I64 else pages.astype(_I64)
    n = len(pages) * page_size
    tile = _TILES.get(page_size)
    if tile is None or len(tile) < n:
        reps = max(len(pages), 64, 0 if tile is None else 2 * len(tile) // page_size)
        tile = _TILES[page_size] = np.tile(np.arange(page_size, dtype=np.int64), reps)
        tile.flags.writeable = False
    slots = (pages * _factor(page_size)).repeat(page_size)  # int64 before the product: no overflow
    slots += tile if len(tile) == n else tile[:n]
    return slots


def slot_pages(slots: np.ndarray, page_size: int) -> np.ndarray:
    """Pages of whole-page `slots` laid out page after page (the inverse of page_slots). A power of two
    shifts: the same floor division (an arithmetic shift, negative values included), one instruction a
    value where numpy's `//` takes ~20."""
    if page_size == 1:
        return slots
    if page_size & (page_size - 1):
        return slots[::page_size] // _factor(page_size)
    return slots[::page_size] >> _factor(page_size.bit_length() - 1)


def _factor(page_size: int) -> np.ndarray:
    factor = _FACTORS.get(page_size)
    if factor is None:
        factor = _FACTORS[page_size] = np.array(page_size, dtype=np.int64)
        factor.flags.writeable = False
    return factor


_MIN_STACK: Final = 64  # pages the stack's array holds at least (256 bytes)
_REFILL: Final = 8192  # never-used pages moved onto the stack at once (32 KB): a move and an arange per 8192 pages
_arange: Final = np.arange  # (Final: compiled, a C static, not a module getattr per call)


class SlotAllocator:
    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages > MAX_PAGES:
            raise ConfigError(f"a pool holds at most {MAX_PAGES} pages (int32 page ids), got {num_pages}")
        self.num_pages = num_pages
        self.page_size = page_size
        self._unused = num_pages  # pages [0, _unused) were never handed out
        self._stack = np.empty(_MIN_STACK, dtype=np.int32)  # free pages: _stack[:_top], the last freed on top
        self._top = 0

    @property
    def num_free_pages(self) -> int:
        return self._top + self._unused

    @property
    def num_free_slots(self) -> int:
        return (self._top + self._unused) * self.page_size

    def alloc_pages(self, k: int) -> np.ndarray:
        """Pop `k` free pages: int64 `[k]`. Raises OutOfSlotsError (nothing changed) if fewer are free."""
        top = self._top - k
        if top < 0:
            if k > self._top + self._unused:
                raise OutOfSlotsError(f"asked for {k} pages ({k * self.page_size} slots), "
                                      f"{self._top + self._unused} free; free or evict pages first")
            if not self._top:  # never-used pages alone: handed out as they are, never written to the stack
                self._unused -= k
                return _arange(self._unused, self._unused + k, dtype=_I64)
            self._refill(k)
            top = self._top - k
        self._top = top
        return self._stack[top:top + k].astype(_I64)

    def _refill(self, k: int) -> None:
        """Move the top never-used pages under the freed ones (the order of one preloaded stack), until
        the stack holds `max(k, _REFILL)` pages or every never-used page."""
        top, unused = self._top, self._unused
        n = min(unused, max(k, _REFILL) - top)
        self._grow(top + n)
        self._stack[n:top + n] = self._stack[:top].copy()
        self._stack[:n] = _arange(unused - n, unused, dtype=np.int32)
        self._unused, self._top = unused - n, top + n

    def free_pages(self, pages: np.ndarray) -> None:
        """Push `pages` (int32 or int64 `[k]`, distinct, handed out by alloc_pages and not yet freed) back."""
        top = self._top
        end = top + len(pages)
        if end > len(self._stack):
            self._grow(end)
        self._stack[top:end] = pages
        self._top = end

    def _grow(self, size: int) -> None:
        """The stack's array holds at least `size` pages (doubling)."""
        if size > len(self._stack):
            stack = np.empty(max(size, 2 * len(self._stack)), dtype=np.int32)
            stack[:self._top] = self._stack[:self._top]
            self._stack = stack

    def free_mask(self) -> np.ndarray:
        """bool `[num_pages]`: which pages are free, rebuilt from both parts (for checks)."""
        freed = self._stack[:self._top]
        mask = np.zeros(self.num_pages, dtype=np.bool_)
        mask[:self._unused] = True
        mask[freed] = True
        if mask.sum() != self._unused + len(freed):
            raise AssertionError("allocator: a page is free twice (on the freed stack twice, or never handed out)")
        return mask
