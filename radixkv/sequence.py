"""Sequence: one request's view of the cache, from open() to close().

Positions of a Sequence, and who owns their slots (ps = page_size):

    [0, cached_len)                 matched at open(): tree slots, locked through `node`
    [cached_len, tree_len)          committed full pages, inserted into the tree (shared now)
    [tree_len, committed_len)       committed, in the last partial page: private to the Sequence
    [committed_len, kv_len)         reserved, KV not yet declared written: private
    tree_len = committed_len // ps * ps == node.end; the Sequence holds one lock, on `node`.

`tokens` is what is known so far (the prompt, plus what commit() appended) and may run past kv_len.
The Sequence mirrors its req_to_token row in host memory (`_slots`), so bookkeeping never reads
the device table back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Hashable

import numpy as np

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode


class Sequence:
    __slots__ = ("row", "namespace", "priority", "cached_len", "committed_len", "kv_len", "node",
                 "closed", "_owner", "_tokens", "_num_tokens", "_slots")

    def __init__(self, owner: object, row: int, namespace: Hashable, priority: int,
                 tokens: np.ndarray, node: TreeNode, cached_slots: np.ndarray,
                 max_context_len: int) -> None:
        self._owner = owner
        self.row = row
        self.namespace = namespace
        self.priority = priority
        self._tokens = np.empty(max_context_len, dtype=np.int32)
        self._tokens[:len(tokens)] = tokens
        self._num_tokens = len(tokens)
        self._slots = np.empty(max_context_len, dtype=np.int64)  # mirror of req_to_token[row]
        self._slots[:len(cached_slots)] = cached_slots
        self.cached_len = self.committed_len = self.kv_len = len(cached_slots)
        self.node = node
        self.closed = False

    @property
    def tokens(self) -> np.ndarray:
        """int32 `[n]`, read-only: what is known so far."""
        view = self._tokens[:self._num_tokens]
        view.flags.writeable = False
        return view

    @property
    def tree_len(self) -> int:
        return self.node.end

    def slots(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Read-only int64 view of the row's slots for positions [start, stop) (stop <= kv_len)."""
        view = self._slots[start:self.kv_len if stop is None else stop]
        view.flags.writeable = False
        return view

    def __len__(self) -> int:
        return self.kv_len

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (f"Sequence(row={self.row}, {state}, tokens={self._num_tokens}, cached={self.cached_len}, "
                f"committed={self.committed_len}, kv={self.kv_len})")
