"""The sequence table: req_to_token rows, open Sequences, and their row writes. The only writer of all three.

Positions of a Sequence, and who owns their slots (ps = page_size):

    [0, cached_len)                 matched at open(): tree slots, locked through `node`
    [cached_len, tree_len)          committed full pages, inserted into the tree (shared now)
    [tree_len, committed_len)       committed, in the last partial page: private to the Sequence
    [committed_len, kv_len)         reserved, KV not yet declared written: private
    tree_len = committed_len // ps * ps == node.end; the Sequence holds one lock, on `node`.

A `Sequence` is a read-only handle; its state lives in a record that only this table changes. The
table knows each open record by row and checks the handle's identity on every use, so a closed
Sequence, a copy of one, or one from another cache is rejected (SequenceError) before anything
changes. Each record mirrors its req_to_token row in host memory, so bookkeeping never reads the
device table back; row writes are queued in the ReqToTokenPool and applied together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import torch
from mypy_extensions import mypyc_attr

from radixkv.cascade import kv_chunk_for, plan_cascade
from radixkv.errors import ContextLengthError, InvalidArgumentError, SequenceError
from radixkv.kernels import build_kv_indices_unchecked
from radixkv.pools import ReqToTokenPool
from radixkv.results import BatchInputs, LockHandle

if TYPE_CHECKING:
    from radixkv.keys import ExtraKeys
    from radixkv.kernels import CascadePlan

H = TypeVar("H", bound=LockHandle)  # the cache's node class: what a Sequence's lock holds


class _Record(Generic[H]):
    __slots__ = ("handle", "row", "namespace", "priority", "tokens", "num_tokens", "slots", "cached_len",
                 "committed_len", "kv_len", "node", "closed", "extra_keys")

    def __init__(self, row: int, namespace: Any, priority: int, tokens: np.ndarray, node: H,
                 prefix_slots: np.ndarray, max_context_len: int) -> None:
        self.handle: Sequence | None = None
        self.row = row
        self.namespace = namespace
        self.priority = priority
        self.tokens = np.empty(max_context_len, dtype=np.int32)  # what is known so far: [:num_tokens]
        self.tokens[:len(tokens)] = tokens
        self.num_tokens = len(tokens)
        self.slots = np.empty(max_context_len, dtype=np.int64)  # host mirror of req_to_token[row]: [:kv_len]
        self.slots[:len(prefix_slots)] = prefix_slots
        self.cached_len = self.committed_len = self.kv_len = len(prefix_slots)
        self.node = node  # the node the Sequence's lock holds; node.end == tree_len
        self.extra_keys: ExtraKeys | None = None  # radixkv.keys: commit() re-keys multimodal placeholders
        self.closed = False


@mypyc_attr(native_class=False)  # a plain class when compiled: its properties are lambdas
class Sequence:
    """One request's view of the cache, from `open()` to `close()`. Every field is read-only."""

    __slots__ = ("_rec",)

    def __init__(self, rec: _Record[Any]) -> None:
        self._rec = rec

    row = property(lambda self: self._rec.row, doc="its req_to_token row")
    namespace = property(lambda self: self._rec.namespace)
    extra_keys = property(lambda self: self._rec.extra_keys, doc="the ExtraKeys it was opened with (or None)")
    priority = property(lambda self: self._rec.priority)
    cached_len = property(lambda self: self._rec.cached_len, doc="tokens reused at open()")
    committed_len = property(lambda self: self._rec.committed_len, doc="positions whose KV is written")
    kv_len = property(lambda self: self._rec.kv_len, doc="positions that have slots")
    node = property(lambda self: self._rec.node, doc="the tree node its lock holds (released by close)")
    closed = property(lambda self: self._rec.closed)

    @property
    def tree_len(self) -> int:
        """Positions in the tree: committed full pages."""
        return self._rec.node.end

    @property
    def tokens(self) -> np.ndarray:
        """int32 `[n]`, read-only: what is known so far (may run past kv_len)."""
        view = self._rec.tokens[:self._rec.num_tokens]
        view.flags.writeable = False
        return view

    def slots(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Read-only int64 view of the row's slots for positions [start, stop) (stop <= kv_len)."""
        rec = self._rec
        view = rec.slots[start:rec.kv_len if stop is None else min(stop, rec.kv_len)]
        view.flags.writeable = False
        return view

    def __len__(self) -> int:
        return self._rec.kv_len

    def __repr__(self) -> str:
        r = self._rec
        return (f"Sequence(row={r.row}, {'closed' if r.closed else 'open'}, tokens={r.num_tokens}, "
                f"cached={r.cached_len}, committed={r.committed_len}, kv={r.kv_len})")


class SequenceTable(Generic[H]):
    def __init__(self, max_requests: int, max_context_len: int, page_size: int, device: str | torch.device) -> None:
        self.pool = ReqToTokenPool(max_requests, max_context_len, device)
        self.max_context_len = max_context_len
        self.page_size = page_size
        self._open: dict[int, _Record[H]] = {}  # row -> record of the open Sequence holding it

    def __len__(self) -> int:
        return len(self._open)

    def get(self, seq: object) -> _Record[H]:
        """The record of an open Sequence of this cache; SequenceError for anything else."""
        rec: _Record[H] | None = getattr(seq, "_rec", None) if type(seq) is Sequence else None
        if rec is None or rec.handle is not seq or self._open.get(rec.row) is not rec:
            state = "closed" if rec is not None and rec.closed else "not an open Sequence of this cache"
            raise SequenceError(f"{seq!r} is {state}")
        return rec

    def check_length(self, n: int, what: str) -> None:
        if n > self.max_context_len:
            raise ContextLengthError(f"{what}: {n} positions exceed max_context_len {self.max_context_len}; "
                                     "raise CacheConfig.max_context_len")

    def check_row_free(self) -> None:
        if not self.pool.num_free_rows:
            self.pool.alloc_row()  # raises OutOfRowsError, changing nothing

    # ------------------------------------------------------------------ changes

    def open(self, tokens: np.ndarray, namespace: Any, priority: int, node: H,
             prefix_slots: np.ndarray, extra_keys: ExtraKeys | None = None) -> Sequence:
        rec = _Record(self.pool.alloc_row(), namespace, priority, tokens, node, prefix_slots, self.max_context_len)
        rec.extra_keys = extra_keys
        rec.handle = seq = Sequence(rec)
        self._open[rec.row] = rec
        self.pool.write(rec.row, 0, prefix_slots)
        return seq

    def extend(self, rec: _Record[H], slots: np.ndarray) -> None:
        """Slots for positions [kv_len, kv_len + len(slots)) (reserve)."""
        rec.slots[rec.kv_len:rec.kv_len + len(slots)] = slots
        self.pool.write(rec.row, rec.kv_len, slots)
        rec.kv_len += len(slots)

    def check_commit(self, rec: _Record[H], tokens: np.ndarray) -> None:
        c, m = rec.committed_len, len(tokens)
        if c + m > rec.kv_len:
            raise SequenceError(f"commit of positions [{c}, {c + m}) but only {rec.kv_len} have slots; reserve() first")
        overlap = min(c + m, rec.num_tokens) - c
        if overlap > 0 and not np.array_equal(tokens[:overlap], rec.tokens[c:c + overlap]):
            raise SequenceError(f"commit: tokens differ from the Sequence's known tokens at [{c}, {c + overlap})")

    def commit(self, rec: _Record[H], tokens: np.ndarray) -> tuple[int, int]:
        """Record checked tokens as committed; returns the positions [start, end) of full pages that
        must move into the tree now (start == end when none)."""
        c, m = rec.committed_len, len(tokens)
        rec.tokens[c:c + m] = tokens
        rec.num_tokens = max(rec.num_tokens, c + m)
        rec.committed_len = c + m
        return rec.node.end, max(rec.node.end, (c + m) // self.page_size * self.page_size)

    def repoint(self, rec: _Record[H], start: int, slots: np.ndarray) -> None:
        """Positions [start, start + len(slots)) now read the tree's slots (another request cached them first)."""
        rec.slots[start:start + len(slots)] = slots
        self.pool.write(rec.row, start, slots.copy())

    def move_lock(self, rec: _Record[H], node: H) -> None:
        rec.node = node

    def close(self, rec: _Record[H]) -> np.ndarray:
        """Release the row; returns the Sequence's private slots [tree_len, kv_len) to free."""
        private = rec.slots[rec.node.end:rec.kv_len].copy()
        del self._open[rec.row]
        self.pool.free_row(rec.row)
        rec.closed = True
        return private

    # ------------------------------------------------------------------ reads

    def records(self) -> list[_Record[H]]:
        return [self._open[r] for r in sorted(self._open)]

    def check(self) -> None:
        """Rows in use == open records; each record's handle, lengths, and row mirror agree."""
        if sorted(self._open) != self.pool.rows_in_use():
            raise AssertionError("open Sequences and rows in use disagree")
        table = self.pool.req_to_token.cpu().numpy()
        for row, rec in self._open.items():
            if rec.row != row or rec.closed or rec.handle is None or rec.handle._rec is not rec:
                raise AssertionError(f"row {row}: the record, its row and its Sequence handle disagree")
            if not (rec.cached_len <= rec.committed_len <= rec.kv_len <= self.max_context_len
                    and rec.committed_len <= rec.num_tokens):
                raise AssertionError(f"{rec.handle}: lengths out of order")
            if not np.array_equal(table[row, :rec.kv_len], rec.slots[:rec.kv_len]):
                raise AssertionError(f"{rec.handle}: req_to_token row differs from the Sequence's slots")

    def batch(self, seqs: object, cascade: object = False, min_saved: int = 0) -> BatchInputs:
        """Inputs of one forward over positions [committed_len, kv_len) of each Sequence. Checks each
        Sequence once; everything returned is valid by construction (the per-layer path trusts it).
        `cascade`: also plan cascade decode over the leading Sequences with one extend position, when it
        saves at least `min_saved` KV reads (radixkv.cascade.plan_cascade)."""
        if not isinstance(seqs, (list, tuple)):
            raise InvalidArgumentError(f"batch() takes a list of Sequences, got {type(seqs).__name__}")
        if not isinstance(cascade, bool):
            raise InvalidArgumentError(f"batch(cascade=...) takes a bool, got {type(cascade).__name__}")
        recs = [self.get(s) for s in seqs]
        if len({r.row for r in recs}) != len(recs):
            raise SequenceError("batch: the same Sequence appears twice")
        table = self.pool.req_to_token  # applies queued row writes
        device = table.device
        rows = np.array([r.row for r in recs], dtype=np.int32)
        prefix = np.array([r.committed_len for r in recs], dtype=np.int32)
        seq_lens = np.array([r.kv_len for r in recs], dtype=np.int32)
        indptr = np.zeros(len(recs) + 1, dtype=np.int32)
        np.cumsum(seq_lens, out=indptr[1:])
        out_slots = _cat([r.slots[r.committed_len:r.kv_len] for r in recs])
        if device.type == "cpu":
            kv_indices = torch.from_numpy(_cat([r.slots[:r.kv_len] for r in recs]))
        else:  # read the table on the device instead of copying every slot over
            _, kv_indices = build_kv_indices_unchecked(table, torch.from_numpy(rows).to(device),
                                                       torch.from_numpy(seq_lens).to(device), num_tokens=int(indptr[-1]))
        t = [torch.from_numpy(a).to(device) for a in (rows, prefix, seq_lens - prefix, seq_lens, out_slots, indptr)]
        plan = self._cascade(recs, device, min_saved) if cascade else None
        return BatchInputs(t[0], t[1], t[2], t[3], t[4], t[5], kv_indices, plan)

    def _cascade(self, recs: list[_Record[H]], device: torch.device, min_saved: int) -> CascadePlan | None:
        decode = next((i for i, r in enumerate(recs) if r.kv_len - r.committed_len != 1), len(recs))
        if decode < 2:
            return None
        recs = recs[:decode]
        return plan_cascade([r.node for r in recs], [r.slots for r in recs], [r.kv_len for r in recs],
                            device, kv_chunk_for(device), min_saved)


def _cat(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
