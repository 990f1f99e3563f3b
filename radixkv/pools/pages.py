"""PageStates: who owns each page, the record behind `sizes()` and the ownership checks.

Every page is in exactly one state at every moment:

    FREE      in the SlotAllocator
    CACHED    owned by exactly one tree node
    PRIVATE   handed out by alloc(), not yet freed or inserted
    RESERVED  handed out by reserve() to the open Sequence whose row is `owner[page]`

Transitions are vectorized over the pages moved; nothing here walks the whole pool.
"""

from __future__ import annotations

import numpy as np

FREE, CACHED, PRIVATE, RESERVED = 0, 1, 2, 3
STATE_NAMES = {FREE: "free", CACHED: "cached", PRIVATE: "private (alloc)", RESERVED: "reserved by a Sequence"}


class PageStates:
    def __init__(self, num_pages: int) -> None:
        self.state = np.zeros(num_pages, dtype=np.int8)
        self.owner = np.full(num_pages, -1, dtype=np.int32)  # row of the Sequence for RESERVED

    def set(self, pages: np.ndarray, state: int, owner: int = -1) -> None:
        self.state[pages] = state
        self.owner[pages] = owner

    def all_in(self, pages: np.ndarray, state: int, owner: int = -1) -> bool:
        if not len(pages):
            return True
        ok = (self.state[pages] == state).all()
        return bool(ok and (state != RESERVED or (self.owner[pages] == owner).all()))

    def describe(self, pages: np.ndarray, want: int) -> str:
        """Say which of `pages` are not in state `want`, and what they are instead."""
        bad = pages[self.state[pages] != want][:4]
        states = ", ".join(f"page {p} is {STATE_NAMES[int(self.state[p])]}" for p in bad)
        return states or "pages belong to another Sequence"

    def count(self, state: int) -> int:
        return int((self.state == state).sum())
