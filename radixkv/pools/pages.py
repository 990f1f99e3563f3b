"""PageStates: who owns each page, the record behind `sizes()` and the ownership checks.

Every page is in exactly one state at every moment:

    FREE      in the SlotAllocator
    CACHED    owned by exactly one tree node
    PRIVATE   handed out by alloc(), not yet freed or inserted
    RESERVED  handed out by reserve() to an open Sequence (which one: the Sequence's own slots say)

Transitions are vectorized over the pages moved; nothing here walks the whole pool.
"""

from __future__ import annotations

import numpy as np

FREE, CACHED, PRIVATE, RESERVED = 0, 1, 2, 3
STATE_NAMES = {FREE: "free", CACHED: "cached", PRIVATE: "private (alloc)", RESERVED: "reserved by a Sequence"}


class PageStates:
    def __init__(self, num_pages: int) -> None:
        self.state = np.zeros(num_pages, dtype=np.int8)

    def set(self, pages: np.ndarray, state: int) -> None:
        self.state[pages] = state

    def all_in(self, pages: np.ndarray, state: int) -> bool:
        return not len(pages) or bool((self.state[pages] == state).all())

    def describe(self, pages: np.ndarray, want: int) -> str:
        """Say which of `pages` are not in state `want`, and what they are instead."""
        bad = pages[self.state[pages] != want][:4]
        return ", ".join(f"page {p} is {STATE_NAMES[int(self.state[p])]}" for p in bad)

