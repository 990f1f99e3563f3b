"""Page runs: a list of page ids kept as runs of consecutive ids, one flat list `[start, length, ...]`.

    pages    [7, 8, 9, 40, 41, 3]          int64, one id a page
    runs     [7, 3, 40, 2, 3, 1]           (start, length) per run, in the pages' order; lengths > 0

A tree node's device pages (radix/node.py), the allocator's free pages and an alloc's pages are runs:
at page 1 an edge of thousands of tokens is a handful of runs (its pages came from a few evicted
leaves), so a node keeps a few ints where an int32 array kept 4 bytes a token. Runs need not be
maximal (a run may continue the one before it); `runs_of` makes maximal ones. A runs list is never
written in place once a node holds it: cuts and sections are new lists.

Expanding runs into int64 pages or slots (`expand`, `expand_slots`: a match's, an alloc's; page p holds
slots [p * page_size, (p + 1) * page_size), so a run of pages is a run of slots) is one C call while the
compiled core runs (radixkv/_runs_native.c: an array and a loop, 2-3 instructions a slot), as is comparing
slots given back with the runs they came from (`are_first_slots`: no copy of either). Interpreted, an
expansion takes one numpy call for a lone run (an `arange`, or past _ARANGE_MAX pages an add to a slice
of one kept arange, `_iota`: int64, grown by doubling to the longest expansion asked, one request's
pages, never the pool's) and three for several: each page's run start less the run's position, made as
bytes (an 8-byte value repeated, joined: C copies, no numpy call a run), read as int64 and added to
`_iota`. A numpy call costs 2-7k instructions whatever its size (callgrind), a run ~2.5k more as numpy
slices; a running sum ~13 a page.
Used by pools/ and radix/, which must not import each other.
"""

from __future__ import annotations

import struct
from typing import Callable, Final

import numpy as np

from radixkv.core_loader import native

_I64: Final = np.dtype(np.int64)  # (Final: compiled, a C static, not a module-dict lookup)
_add: Final = np.add
_empty: Final = np.empty
_diff: Final = np.diff
_frombuffer: Final = np.frombuffer
_flatnonzero: Final = np.flatnonzero
_pack: Final = struct.Struct("=q").pack  # an int's 8 bytes as np.frombuffer reads an int64 (native order)
_arange: Final = np.arange
# A lone run shorter than this is an arange (~2.4k instructions and ~1 a page below ~500 pages, ~5 a page above),
# a longer one an add to the kept iota (~6.8k and ~1.4 a page): callgrind, numpy 2.4
_ARANGE_MAX: Final = 900
_SMALL: Final = 32  # runs_of reads at most this many pages one by one (fewer than numpy's fixed cost)


_Slots = Callable[[list[int], int, int], np.ndarray]
_Starts = Callable[[list[int], int, np.ndarray], bool]


# radixkv/_runs_native.c's slots and starts while the compiled core runs; None otherwise: then the numpy forms below run
_c_slots: Final[_Slots | None] = native("slots")
_c_starts: Final[_Starts | None] = native("starts")


class _Iota:
    """0, 1, 2, ... int64, read-only, at least as long as the longest run expanded so far."""

    def __init__(self) -> None:
        self.values = np.arange(1024, dtype=_I64)
        self.values.flags.writeable = False

    def upto(self, n: int) -> np.ndarray:
        values = self.values
        if len(values) < n:
            values = self.values = np.arange(max(n, 2 * len(values)), dtype=_I64)
            values.flags.writeable = False
        return values if len(values) == n else values[:n]


_iota: Final = _Iota()


def count(runs: list[int]) -> int:
    """How many pages `runs` holds."""
    n = 0
    for j in range(1, len(runs), 2):
        n += runs[j]
    return n


def well_formed(runs: object, n: int) -> bool:
    """Whether `runs` is a list of runs of n pages: ints, starts >= 0, lengths > 0 (for checks)."""
    if type(runs) is not list or len(runs) % 2 or any(type(x) is not int for x in runs):
        return False
    return all(x >= 0 for x in runs[::2]) and all(x > 0 for x in runs[1::2]) and count(runs) == n


def expand(runs: list[int], n: int) -> np.ndarray:
    """int64 `[n]`, a fresh array: the first n pages of `runs` (n <= count(runs))."""
    if _c_slots is not None:
        return _c_slots(runs, n, 1)
    if not n:
        return _empty(0, _I64)
    if runs[1] >= n:  # one run: one call
        start = runs[0]
        return _arange(start, start + n, dtype=_I64) if n < _ARANGE_MAX else _add(_iota.upto(n), start)
    parts: list[bytes] = []  # per page, its run's start less the run's position: bytes repeated, no numpy call
    at = 0
    for j in range(0, len(runs), 2):
        length = min(runs[j + 1], n - at)
        parts.append(_pack(runs[j] - at) * length)
        at += length
        if at == n:
            break
    return _add(_frombuffer(b"".join(parts), _I64), _iota.upto(n))


def expand_slots(runs: list[int], n: int, page_size: int) -> np.ndarray:
    """int64 `[n]`, a fresh array: the first n slots of the pages of `runs` (page p holds slots
    [p * page_size, (p + 1) * page_size): a run of pages is a run of slots; n <= count(runs) * page_size)."""
    if _c_slots is not None:
        return _c_slots(runs, n, page_size)
    return expand(runs if page_size == 1 else [x * page_size for x in runs], n)


def are_first_slots(runs: list[int], page_size: int, given: np.ndarray) -> bool:
    """Whether int64 `given` (m values) are the first m slots of the pages of `runs`: no copy of `given` in C."""
    if _c_starts is not None:
        return _c_starts(runs, page_size, given)
    m = len(given)
    return m <= count(runs) * page_size and expand_slots(runs, m, page_size).tobytes() == given.tobytes()


def runs_of(pages: np.ndarray) -> list[int]:
    """The maximal runs of `pages` (int32 or int64)."""
    n = len(pages)
    if n <= _SMALL:
        return _small_runs(pages.tolist())
    firsts = _flatnonzero(_diff(pages) != 1).tolist()  # positions of each run's last page but the final run's
    starts = pages[[0] + [i + 1 for i in firsts]].tolist() if firsts else [int(pages[0])]
    runs: list[int] = []
    prev = 0
    for j, end in enumerate(firsts):
        runs.append(starts[j])
        runs.append(end + 1 - prev)
        prev = end + 1
    runs.append(starts[-1])
    runs.append(n - prev)
    return runs


def _small_runs(ids: list[int]) -> list[int]:
    runs: list[int] = []
    for p in ids:
        if runs and runs[-2] + runs[-1] == p:
            runs[-1] += 1
        else:
            runs.append(p)
            runs.append(1)
    return runs


def section(runs: list[int], lo: int, n: int) -> list[int]:
    """A new list: the runs of pages [lo, lo + n) of `runs`."""
    out: list[int] = []
    at = 0  # pages before run j
    for j in range(0, len(runs), 2):
        if n <= 0:
            break
        length = runs[j + 1]
        if at + length > lo:
            skip = lo - at if lo > at else 0
            take = min(length - skip, n)
            out.append(runs[j] + skip)
            out.append(take)
            n -= take
        at += length
    return out


def cut(runs: list[int], k: int) -> tuple[list[int], list[int]]:
    """Two new lists: the runs of the first k pages of `runs` and of the rest (0 < k < count(runs))."""
    at = 0
    for j in range(0, len(runs), 2):
        length = runs[j + 1]
        if at + length >= k:
            head = runs[:j + 2]
            tail = runs[j + 2:]
            if at + length > k:
                inside = k - at
                head[-1] = inside
                tail = [runs[j] + inside, length - inside] + tail
            return head, tail
        at += length
    return list(runs), []
