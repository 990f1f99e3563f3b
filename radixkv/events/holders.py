"""Holders: how many tree nodes hold each reported block, per (medium, group).

The event recorder (events/recorder.py) counts holders when one block can end in more than one
node: siblings whose first pages differ only after the block (block_size not a multiple of
page_size), or namespaces sharing vLLM's hashes (which leave the namespace out). A block is
reported stored when its first holder appears and removed when its last one goes.

Kept per (medium, group) as the set of held hashes plus the extra holders of shared blocks
(hash -> holders - 1), so that the common case, blocks no other node holds, is one C-level set
operation per event rather than a dict update per block. Hashes within one call are distinct (a
chain repeats a hash only on a 64-bit collision).
"""

from __future__ import annotations

from typing import Iterable


class Holders:
    def __init__(self) -> None:
        self._by_medium: dict[tuple[str, int], tuple[set[int], dict[int, int]]] = {}

    def _of(self, medium: str, group: int) -> tuple[set[int], dict[int, int]]:
        got = self._by_medium.get((medium, group))
        if got is None:
            got = self._by_medium[(medium, group)] = (set(), {})
        return got

    def add(self, hashes: Iterable[int], medium: str, group: int) -> list[bool] | None:
        """One more holder of each of `hashes`; which of them had none before (None: all of them)."""
        held, extra = self._of(medium, group)
        ints = _ints(hashes)
        if held.isdisjoint(ints):
            held.update(ints)
            return None
        new = []
        for h in ints:
            if h in held:
                extra[h] = extra.get(h, 0) + 1
                new.append(False)
            else:
                held.add(h)
                new.append(True)
        return new

    def remove(self, hashes: Iterable[int], medium: str, group: int) -> Iterable[int]:
        """One holder fewer of each of `hashes` (all held); those that have none left, in order."""
        held, extra = self._of(medium, group)
        ints = _ints(hashes)
        if not extra or extra.keys().isdisjoint(ints):
            held.difference_update(ints)
            return hashes
        gone = []
        for h in ints:
            n = extra.get(h)
            if n is None:
                held.discard(h)
                gone.append(h)
            elif n == 1:
                del extra[h]
            else:
                extra[h] = n - 1
        return gone


def _ints(hashes: Iterable[int]) -> list[int]:
    """`hashes` as a list, made once: a recorder's are records.BlockHashes, whose every read makes its ints."""
    return hashes if isinstance(hashes, list) else list(hashes)


def new_runs(new: list[bool]) -> list[tuple[int, int]]:
    """The runs [i, j) of consecutive True in `new` (`Holders.add`'s answer), in order."""
    runs, start = [], -1
    for i, is_new in enumerate(new):
        if is_new and start < 0:
            start = i
        elif not is_new and start >= 0:
            runs.append((start, i))
            start = -1
    if start >= 0:
        runs.append((start, len(new)))
    return runs
