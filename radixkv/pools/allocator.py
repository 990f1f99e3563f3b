"""SlotAllocator: hands out free pages of `page_size` consecutive slots.

Page `p` holds slots `[p * page_size, (p + 1) * page_size)`. The free pages sit on a preallocated
int32 stack (`_stack[:_top]`, 4 bytes a page: pools hold fewer than 2**31 pages): `alloc_pages(k)`
pops k ids and `free_pages(pages)` pushes them back, so both cost O(pages moved), never O(pool
size) (SGLang's allocator `torch.cat`s its whole free list on every free). Pages freed last are
handed out first, which keeps recently touched KV warm. Page ids are stored int32 (this stack, tree
nodes) and handed around int64: numpy indexes with an int32 array 2-10x slower than with an int64
one (it converts the index first), and every page handed out indexes the ledger's state at once.
The allocator trusts its caller to free only pages it handed out (the PageLedger checks page
states first); `free_mask()` rebuilds the free set from the stack and raises if a page is on it twice.
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


class SlotAllocator:
    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages > MAX_PAGES:
            raise ConfigError(f"a pool holds at most {MAX_PAGES} pages (int32 page ids), got {num_pages}")
        self.num_pages = num_pages
        self.page_size = page_size
        self._stack = np.arange(num_pages, dtype=np.int32)
        self._top = num_pages

    @property
    def num_free_pages(self) -> int:
        return self._top

    @property
    def num_free_slots(self) -> int:
        return self._top * self.page_size

    def alloc_pages(self, k: int) -> np.ndarray:
        """Pop `k` free pages: int64 `[k]`. Raises OutOfSlotsError (nothing changed) if fewer are free."""
        if k > self._top:
            raise OutOfSlotsError(
                f"asked for {k} pages ({k * self.page_size} slots), {self._top} free; free or evict pages first")
        self._top -= k
        return self._stack[self._top:self._top + k].astype(_I64)

    def free_pages(self, pages: np.ndarray) -> None:
        """Push `pages` (int32 or int64 `[k]`, distinct, handed out by alloc_pages and not yet freed) back."""
        k = len(pages)
        self._stack[self._top:self._top + k] = pages
        self._top += k

    def free_mask(self) -> np.ndarray:
        """bool `[num_pages]`: which pages are free, rebuilt from the stack (for checks)."""
        stack = self._stack[:self._top]
        mask = np.zeros(self.num_pages, dtype=np.bool_)
        mask[stack] = True
        if mask.sum() != len(stack):
            raise AssertionError("allocator: a page sits on the free stack twice")
        return mask
