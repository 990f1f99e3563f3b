"""The cascade plan a cascade decode reads: levels of groups of query rows, each group sharing one run
of KV slots, and how each row's partial states merge. The kernels know nothing of where a plan comes
from; `radixkv.cascade` builds one from the radix tree, and `cascade_decode` checks any other.

A plan over R query rows (entries numbered across levels in order, level 0 first):

    level l, group g:  entries  [entry_start_l + qo_indptr[g], entry_start_l + qo_indptr[g + 1])
                       rows     qo_indices[qo_indptr[g]:qo_indptr[g + 1]]      (indices into q)
                       KV       kv_indices[kv_indptr[g]:kv_indptr[g + 1]]      (slots)
    row r:             out[r] = merge of entries merge_indices[merge_indptr[r]:merge_indptr[r + 1]]

    e.g. 4 rows, rows 0-2 under one system prompt, rows 1-2 under one document:
      level 0: g0 rows [0 1 2] KV [system prompt]
      level 1: g0 rows [1 2]   KV [document]
      level 2: g0 [0] KV [tail of 0], g1 [1] [tail of 1], g2 [2] [tail of 2], g3 [3] [all of 3]

Attention of row r over the concatenation of its groups' KV equals the merge of its partial states,
so a plan is exact whatever its grouping; sharing only saves reads. The host ints (`max_rows`,
`max_kv`, `max_entries`) size grids and padding without reading the device.

Positions (optional; a window or chunks need them): the slots of a group are consecutive positions
of each of its rows' sequences, starting at `kv_pos[g]` (slot i of group g holds position
`kv_pos[g] + i`), and row r's query sits at position `q_pos[r]`. A masked variant then keeps only
keys in `[first_key(q_pos[r]), q_pos[r]]` (variant.py) and a group none of whose rows sees a key
of its run reads nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from radixkv.kernels._common import (INDEX_DTYPES, KernelInputError, check_kv_buffers,
                                     check_same_device, check_tensor)


class CascadeLevel(NamedTuple):
    """Groups of query rows, each group attending to one run of KV slots."""

    qo_indptr: torch.Tensor  # int32 [groups + 1]: group g's entries, 0-based within the level
    qo_indices: torch.Tensor  # int32 [entries]: the query row (index into q) of each entry
    kv_indptr: torch.Tensor  # int32 [groups + 1]: group g's slots are kv_indices[kv_indptr[g]:kv_indptr[g + 1]]
    kv_indices: torch.Tensor  # int64 [kv_indptr[-1]]: KV slots, in position order within a group
    max_rows: int  # host: the most entries of one group (>= the true maximum)
    max_kv: int  # host: the most slots of one group (>= the true maximum)
    padded: PaddedLevel | None = None  # pad_level(self), built once per plan for the torch reference
    kv_pos: torch.Tensor | None = None  # int32 [groups]: position of each group's first slot (None: unknown)


class PaddedLevel(NamedTuple):
    """A level laid out for batched matmuls (the torch reference's layout); derived from the CSR."""

    slots: torch.Tensor  # int64 [groups, max_kv]: each group's slots; padding repeats a real slot
    bias: torch.Tensor  # fp32 [groups, max_kv]: 0 at a group's slots, -inf at its padding
    rows: torch.Tensor  # int64 [groups, max_rows]: each group's query rows; padding repeats a real row
    at: torch.Tensor  # int64 [entries]: each entry's padded row, group * max_rows + its index in the group


class CascadePlan(NamedTuple):
    """Levels of shared KV and the merge of each query row's partial states (module docstring)."""

    levels: tuple[CascadeLevel, ...]
    merge_indptr: torch.Tensor  # int32 [rows + 1]
    merge_indices: torch.Tensor  # int32 [entries]: row r's entries, ids across all levels
    max_entries: int  # host: the most entries of one row (>= the true maximum)
    # csr_to_padded(merge_indptr, merge_indices, max_entries), built once per plan for the torch reference
    merge_padded: tuple[torch.Tensor, torch.Tensor] | None = None
    q_pos: torch.Tensor | None = None  # int32 [rows]: each row's query position (None: unknown)
    # host: KV positions a flat decode of these rows would read again (a run shared by n rows: n - 1
    # times its length), the reads the cascade saves before its row blocks; 0 when unknown
    saved_positions: int = 0

    @property
    def num_rows(self) -> int:
        return self.merge_indptr.numel() - 1

    @property
    def num_entries(self) -> int:
        return sum(lvl.qo_indices.numel() for lvl in self.levels)

    @property
    def has_positions(self) -> bool:
        """True when the plan knows every key's and query's position (what a window or chunks need)."""
        return self.q_pos is not None and all(lvl.kv_pos is not None for lvl in self.levels)


def pad_level(level: CascadeLevel) -> PaddedLevel:
    """The padded layout of a level (no host sync; the level must have an entry and a slot)."""
    slots, valid = csr_to_padded(level.kv_indptr, level.kv_indices, level.max_kv)
    bias = torch.zeros(valid.shape, device=valid.device).masked_fill_(~valid, float("-inf"))
    rows, _ = csr_to_padded(level.qo_indptr, level.qo_indices, level.max_rows)
    e = torch.arange(level.qo_indices.numel(), device=rows.device)
    g = torch.searchsorted(level.qo_indptr[1:].long(), e, right=True)
    return PaddedLevel(slots, bias, rows, g * level.max_rows + e - level.qo_indptr[g].long())


def with_padding(plan: CascadePlan) -> CascadePlan:
    """`plan` with every padded layout built (once per plan; the torch reference then pads nothing)."""
    levels = tuple(lvl._replace(padded=pad_level(lvl)) if lvl.qo_indices.numel() and lvl.kv_indices.numel()
                   else lvl for lvl in plan.levels)
    merge = (csr_to_padded(plan.merge_indptr, plan.merge_indices, plan.max_entries)
             if plan.merge_indices.numel() and plan.max_entries else None)
    return plan._replace(levels=levels, merge_padded=merge)


def csr_to_padded(indptr: torch.Tensor, indices: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`([n, width] int64 values, [n, width] bool valid)` of a CSR with n = indptr.numel() - 1 rows of at
    most `width` entries; padding repeats the row's first entry, or `indices[0]` for an empty row
    (`indices` must be non-empty). No host sync."""
    start = indptr[:-1].long()
    pos = torch.arange(width, device=indptr.device)
    valid = pos[None, :] < (indptr[1:].long() - start)[:, None]
    at = torch.where(valid, start[:, None] + pos[None, :], start.clamp_max(indices.numel() - 1)[:, None])
    return indices[at].long(), valid


def check_cascade(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, plan: object) -> None:
    """Everything `cascade_decode` reads: shapes, dtypes, devices, and every index in range
    (a few host syncs per level; the per-layer path skips this for plans valid by construction)."""
    check_qkv(q, k_buf, v_buf)
    if not isinstance(plan, CascadePlan) or not all(isinstance(lvl, CascadeLevel) for lvl in plan.levels):
        raise KernelInputError(f"plan must be a CascadePlan of CascadeLevels, got {type(plan).__name__}")
    for i, lvl in enumerate(plan.levels):
        check_level(f"levels[{i}]", lvl, q.shape[0], k_buf.shape[0], q.device)
    entries = plan.num_entries
    check_csr("merge", plan.merge_indptr, plan.merge_indices, q.device, plan.max_entries, entries)
    if plan.merge_padded is not None and not _same(plan.merge_padded, with_padding(plan).merge_padded):
        raise KernelInputError("plan.merge_padded is not the padded layout of merge_indptr/merge_indices")
    if plan.num_rows != q.shape[0]:
        raise KernelInputError(f"the plan merges {plan.num_rows} rows; q has {q.shape[0]}")
    if plan.q_pos is not None:
        check_positions("q_pos", plan.q_pos, q.shape[0], q.device)


def check_positions(name: str, pos: torch.Tensor, n: int, device: torch.device) -> None:
    """int32 `[n]` positions >= 0 on `device` (one host sync)."""
    check_tensor(name, pos, 1, (torch.int32,))
    check_same_device(q=torch.empty(0, device=device), **{name: pos})
    if pos.numel() != n or not pos.is_contiguous() or (n and int(pos.min()) < 0):
        raise KernelInputError(f"{name} must hold {n} positions >= 0, got {pos.numel()}")


def check_qkv(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor) -> None:
    """q `[rows, num_heads, head_dim]` of the buffers' dtype and head_dim, num_heads % num_kv_heads == 0."""
    check_kv_buffers(k_buf, v_buf)
    check_tensor("q", q, 3, (k_buf.dtype,))
    check_same_device(q=q, k_buf=k_buf, v_buf=v_buf)
    if q.shape[2] != k_buf.shape[2] or q.shape[1] % k_buf.shape[1]:
        raise KernelInputError(f"q {tuple(q.shape)} against buffers {tuple(k_buf.shape)}: need equal head "
                               "dims and num_heads % num_kv_heads == 0")


def check_level(name: str, lvl: CascadeLevel, rows: int, num_slots: int, device: torch.device) -> None:
    if not isinstance(lvl, CascadeLevel):
        raise KernelInputError(f"{name} must be a CascadeLevel, got {type(lvl).__name__}")
    groups = lvl.qo_indptr.numel() - 1
    if lvl.kv_indptr.numel() - 1 != groups:
        raise KernelInputError(f"{name}: qo_indptr has {groups + 1} entries, kv_indptr {lvl.kv_indptr.numel()}")
    check_csr(f"{name}.qo", lvl.qo_indptr, lvl.qo_indices, device, lvl.max_rows, rows)
    check_csr(f"{name}.kv", lvl.kv_indptr, lvl.kv_indices, device, lvl.max_kv, num_slots)
    check_tensor(f"{name}.kv_indices", lvl.kv_indices, 1, (torch.int64,))
    if lvl.kv_pos is not None:
        check_positions(f"{name}.kv_pos", lvl.kv_pos, groups, device)
    if lvl.padded is not None and not _same(lvl.padded, pad_level(lvl)):
        raise KernelInputError(f"{name}.padded is not the padded layout of the level's CSR")


def _same(got: object, want: object) -> bool:
    return (isinstance(got, tuple) and isinstance(want, tuple) and len(got) == len(want)
            and all(isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                    and a.device == b.device and torch.equal(a, b) for a, b in zip(got, want)))


def check_csr(name: str, indptr: torch.Tensor, indices: torch.Tensor, device: torch.device,
               max_count: object, bound: int) -> None:
    """indptr rises from 0 to len(indices), no run longer than `max_count`; indices in [0, bound)."""
    check_tensor(f"{name}_indptr", indptr, 1, INDEX_DTYPES)
    check_tensor(f"{name}_indices", indices, 1, INDEX_DTYPES)
    check_same_device(q=torch.empty(0, device=device), indptr=indptr, indices=indices)
    if not isinstance(max_count, int) or isinstance(max_count, bool) or indptr.numel() == 0:
        raise KernelInputError(f"{name}: needs an int bound on run lengths and a non-empty indptr")
    counts = indptr[1:].long() - indptr[:-1].long()
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0 or last != indices.numel() or (counts.numel() and int(counts.min()) < 0):
        raise KernelInputError(f"{name}_indptr must rise from 0 to {indices.numel()}")
    if counts.numel() and int(counts.max()) > max_count:
        raise KernelInputError(f"{name}: a run of {int(counts.max())} exceeds its stated maximum {max_count}")
    if indices.numel() and not (0 <= int(indices.min()) and int(indices.max()) < bound):
        raise KernelInputError(f"{name}_indices must lie in [0, {bound})")
