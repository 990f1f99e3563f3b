"""SlotAllocator: hands out free pages of `page_size` consecutive slots.

Page `p` holds slots `[p * page_size, (p + 1) * page_size)`. The free pages form one LIFO stack,
kept in two parts (pools hold fewer than 2**31 pages):

    [0, _unused)       pages never handed out: only a count, under the freed ones. An alloc that
                       finds too few freed pages takes the top never-used ones first, then every freed one
    _runs              the pages freed since, as runs (radixkv/runs.py), the last freed at the end:
                       a few ints per run, however long the run (a freed leaf's pages are a few runs)

`alloc_runs(k)` pops k ids as runs (list work, no numpy), `alloc_pages(k)` expands them to int64,
`free_runs(runs)` / `free_pages(pages)` push them (a run that continues the top one is merged into
it), so both cost O(runs moved), never O(pool size) (SGLang's allocator `torch.cat`s its whole free
list on every free). Pages come out exactly as from one stack preloaded with `arange(num_pages)`:
pages freed last are handed out first, which keeps recently touched KV warm, and a popped run reads
bottom to top as that stack's slice would. Page ids are handed around int64: numpy indexes with an
int32 array 2-10x slower than with an int64 one (it converts the index first), and every page handed
out indexes the ledger's state at once.
The allocator trusts its caller to free only pages it handed out (the PageLedger checks page
states first); `free_mask()` rebuilds the free set from both parts and raises if a page is in it twice.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from radixkv.errors import ConfigError, OutOfSlotsError
from radixkv.runs import count, expand, runs_of

MAX_PAGES = 2**31 - 1  # page ids fit int32 (the ledger and callers may keep them so)
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
        self._unused = num_pages  # pages [0, _unused) were never handed out
        self._runs: list[int] = []  # freed pages as runs [start, length, ...], the last freed at the end
        self._freed = 0  # pages in _runs

    @property
    def num_free_pages(self) -> int:
        return self._freed + self._unused

    @property
    def num_free_slots(self) -> int:
        return (self._freed + self._unused) * self.page_size

    def alloc_pages(self, k: int) -> np.ndarray:
        """Pop `k` free pages: int64 `[k]`. Raises OutOfSlotsError (nothing changed) if fewer are free."""
        return expand(self.alloc_runs(k), k)

    def alloc_runs(self, k: int) -> list[int]:
        """Pop `k` free pages as runs (a new list), in the order alloc_pages hands them out. Raises
        OutOfSlotsError (nothing changed) if fewer are free."""
        runs, freed = self._runs, self._freed
        if k > freed:
            if k > freed + self._unused:
                raise OutOfSlotsError(f"asked for {k} pages ({k * self.page_size} slots), "
                                      f"{freed + self._unused} free; free or evict pages first")
            self._unused -= k - freed  # the top never-used pages come first, then every freed one
            out = [self._unused, k - freed] + runs
            self._runs, self._freed = [], 0
            return out
        self._freed = freed - k
        at = len(runs)
        while k > 0:  # whole runs off the top, then the top part of one
            at -= 2
            length = runs[at + 1]
            if length > k:
                runs[at + 1] = length - k
                out = [runs[at] + length - k, k] + runs[at + 2:]
                del runs[at + 2:]
                return out
            k -= length
        out = runs[at:]
        del runs[at:]
        return out

    def free_runs(self, runs: list[int]) -> None:
        """Push the pages of `runs` (handed out by alloc and not yet freed), in their order."""
        if not runs:
            return
        mine = self._runs
        top = len(mine)
        mine += runs
        if top and mine[top - 2] + mine[top - 1] == mine[top]:  # its first run continues the top one
            mine[top - 1] += mine[top + 1]
            del mine[top:top + 2]
        self._freed += count(runs)

    def free_pages(self, pages: np.ndarray) -> None:
        """Push `pages` (int32 or int64 `[k]`, distinct, handed out by alloc_pages and not yet freed) back."""
        if len(pages):
            self.free_runs(runs_of(pages))

    def free_mask(self) -> np.ndarray:
        """bool `[num_pages]`: which pages are free, rebuilt from both parts (for checks)."""
        freed = expand(self._runs, self._freed)
        mask = np.zeros(self.num_pages, dtype=np.bool_)
        mask[:self._unused] = True
        mask[freed] = True
        if mask.sum() != self._unused + len(freed):
            raise AssertionError("allocator: a page is free twice (on the freed stack twice, or never handed out)")
        return mask
