"""A step's planned positions cut into the forwards a hybrid model runs, and their BatchInputs.

The Engine packs a step into one sequence (`input_ids [1, total]`); recurrent layers cannot take that
(they would run over several requests as one). A step is cut instead into `Unit`s, each one model
forward of `B` requests by `T` tokens (`input_ids [B, T]`): all the step's decode tokens together
(`T = 1`), then each request's prefill chunk alone, split where a state snapshot is due. A unit's
`BatchInputs` is sliced from the step's, which `cache.batch()` checked once: same rows and slots,
positions `[a, b)` of each request.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixkv import BatchInputs


@dataclass(frozen=True)
class Span:
    """Positions `[a, b)` of plan request `index`, whose chunk started at `start` (its committed_len)
    and sits at `packed` in the step's packed positions."""
    index: int
    a: int
    b: int
    start: int
    packed: int

    def packed_range(self) -> range:
        """The step's packed positions this span covers."""
        lo = self.packed + self.a - self.start
        return range(lo, lo + self.b - self.a)


@dataclass(frozen=True)
class Unit:
    """One forward: spans of equal length (several only when that length is 1)."""
    spans: tuple[Span, ...]

    @property
    def tokens(self) -> int:
        return self.spans[0].b - self.spans[0].a


def split_span(span: Span, points: list[int]) -> list[Span]:
    """`span` cut at every point strictly inside it."""
    cuts = [span.a] + [p for p in sorted(set(points)) if span.a < p < span.b] + [span.b]
    return [Span(span.index, lo, hi, span.start, span.packed) for lo, hi in zip(cuts, cuts[1:])]


def one_token_spans(span: Span) -> list[Span]:
    return [Span(span.index, p, p + 1, span.start, span.packed) for p in range(span.a, span.b)]


def unit_inputs(inputs: BatchInputs, kv_starts: list[int], unit: Unit) -> BatchInputs:
    """The BatchInputs of `unit`, sliced from the step's `inputs` (no cascade plan).

    Args:
        inputs: the step's `cache.batch()`, in plan order.
        kv_starts: host copy of `inputs.kv_indptr[:-1]`.
        unit: the spans to run.
    """
    dev = inputs.rows.device
    idx = [s.index for s in unit.spans]
    rows = inputs.rows[idx]
    prefix = torch.tensor([s.a for s in unit.spans], dtype=torch.int32, device=dev)
    ext = torch.tensor([s.b - s.a for s in unit.spans], dtype=torch.int32, device=dev)
    out_slots = torch.cat([inputs.out_slots[r.start:r.stop] for r in (s.packed_range() for s in unit.spans)])
    kv_indices = torch.cat([inputs.kv_indices[kv_starts[s.index]:kv_starts[s.index] + s.b] for s in unit.spans])
    seq_lens = prefix + ext
    kv_indptr = torch.zeros(len(idx) + 1, dtype=torch.int32, device=dev)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    return BatchInputs(rows, prefix, ext, seq_lens, out_slots, kv_indptr, kv_indices, None)
