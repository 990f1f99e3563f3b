"""Index plumbing between the radix tree and attention: `req_to_token[row, pos] -> slot`.

- `write_req_to_token`: batched row writes, one launch for a whole batch (`RadixCache.open/reserve`):

      for b:  req_to_token[rows[b], starts[b] : starts[b] + lens[b]] = slots[indptr[b] : indptr[b + 1]]
      where indptr = [0, lens[0], lens[0] + lens[1], ...]

- `build_kv_indices`: FlashInfer's CSR over a batch's KV (`RadixCache.batch`):

      kv_indptr  int32 [batch + 1]        kv_indptr[b + 1] - kv_indptr[b] == seq_lens[b]
      kv_indices int64 [kv_indptr[-1]]    kv_indices[kv_indptr[b] + i] == req_to_token[rows[b], i]

Both move 4 bytes (int32 table) + 8 bytes (int64 slot) per token and nothing else; they are
launch-bound at decode sizes. The ranges written in one call must be disjoint (two writes to one
entry race); the checked launcher rejects overlaps. `*_unchecked` launchers skip every check and
make no device->host sync (build_kv_indices needs the CSR length: pass `num_tokens` to spare its
one sync); `RadixCache.batch()` calls them on what it validated itself.

The torch references copy a slice per row for small batches and build one flat index beyond
_LOOP_ROWS rows (one index_copy_/index_select: ~50 us plus ~7 ns per token, against ~5-20 us per
row for slices, measured on CPU); writes of rows averaging _LOOP_ROW_LEN tokens or more stay slices.
"""

from __future__ import annotations

import torch

from radixkv.errors import InvalidSlotsError
from radixkv.kernels._common import (KernelInputError, check_lens, check_rows, check_same_device,
                                     check_slots, check_tensor, exclusive_cumsum, tl, triton,
                                     use_triton)

_BLOCK = 128  # positions per loop step; a row is copied in ceil(len / _BLOCK) steps
_LOOP_ROWS = 8  # the references copy row by row up to here, then through one flat index
_LOOP_ROW_LEN = 512  # ... except write_req_to_token_ref with rows this long on average (slices win)
_INT32_MAX = 2**31 - 1


@triton.jit
def _write_req_to_token_kernel(
    req_to_token_ptr,  # int32 [max_requests, max_context_len]
    stride_row,
    rows_ptr,  # int32/int64 [batch]
    starts_ptr,  # int32/int64 [batch]
    lens_ptr,  # int32/int64 [batch]
    indptr_ptr,  # int64 [batch + 1]: where request b's slots begin in slots_ptr
    slots_ptr,  # int64 [sum(lens)]
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    row = tl.load(rows_ptr + b).to(tl.int64)
    start = tl.load(starts_ptr + b).to(tl.int64)
    n = tl.load(lens_ptr + b).to(tl.int64)
    src = tl.load(indptr_ptr + b)
    dst = req_to_token_ptr + row * stride_row + start  # int64: row * stride may pass 2**31
    # read 8 * n bytes of slots; write 4 * n bytes of table
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        mask = offs < n
        slot = tl.load(slots_ptr + src + offs, mask=mask, other=0)
        tl.store(dst + offs, slot.to(tl.int32), mask=mask)


def _check_write(req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor,
                 slots: torch.Tensor, lens: torch.Tensor) -> None:
    check_tensor("req_to_token", req_to_token, 2, (torch.int32,))
    check_same_device(req_to_token=req_to_token, rows=rows, starts=starts, slots=slots, lens=lens)
    batch = check_rows(rows, req_to_token.shape[0])
    check_lens("lens", lens, batch, 0, req_to_token.shape[1])
    check_lens("starts", starts, batch, 0, req_to_token.shape[1])
    check_tensor("slots", slots, 1, (torch.int64,))
    spans = torch.stack([rows.long(), starts.long(), lens.long()]).T.tolist() if batch else []
    if any(start + n > req_to_token.shape[1] for _, start, n in spans):
        raise KernelInputError(f"starts + lens reaches past max_context_len {req_to_token.shape[1]}")
    total = sum(n for _, _, n in spans)
    if slots.numel() != total:
        raise InvalidSlotsError(f"slots has shape {tuple(slots.shape)}; lens sum to {total}")
    check_slots("slots", slots, _INT32_MAX)  # anything that fits the int32 table
    spans = sorted(span for span in spans if span[2] > 0)
    for (row, start, n), (next_row, next_start, _) in zip(spans, spans[1:]):
        if row == next_row and start + n > next_start:
            raise KernelInputError(f"row {row} is written twice, at [{start}, {start + n}) and from "
                                   f"{next_start}: ranges written in one call must be disjoint")


def write_req_to_token(req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor,
                       slots: torch.Tensor, lens: torch.Tensor) -> None:
    """Write each request's new slots into its row of the table, in place, in one launch.

    Args:
        req_to_token: int32 `[max_requests, max_context_len]`; mutated.
        rows: int32 (or int64) `[batch]`, each in `[0, max_requests)`.
        starts: int32 (or int64) `[batch]`: first position written in each row.
        slots: int64 `[sum(lens)]`, request after request; each in `[0, 2**31)`.
        lens: int32 (or int64) `[batch]`; `starts + lens <= max_context_len`; the ranges
            `[starts[b], starts[b] + lens[b])` of one row must not overlap.

    Raises KernelInputError / InvalidSlotsError / ContextLengthError before touching the table.
    """
    _check_write(req_to_token, rows, starts, slots, lens)
    write_req_to_token_unchecked(req_to_token, rows, starts, slots, lens)


def write_req_to_token_unchecked(req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor,
                                 slots: torch.Tensor, lens: torch.Tensor) -> None:
    """`write_req_to_token` without checks or host sync: the arguments must satisfy its contract."""
    if not use_triton(req_to_token):
        return write_req_to_token_ref(req_to_token, rows, starts, slots, lens)
    return write_req_to_token_launch(req_to_token, rows, starts, slots, lens)


def write_req_to_token_launch(req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor,
                               slots: torch.Tensor, lens: torch.Tensor) -> None:
    if rows.numel() == 0:
        return None
    indptr = exclusive_cumsum(lens)
    _write_req_to_token_kernel[(rows.numel(),)](
        req_to_token, req_to_token.stride(0), rows, starts, lens, indptr, slots, BLOCK=_BLOCK)
    return None


def write_req_to_token_ref(req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor,
                           slots: torch.Tensor, lens: torch.Tensor) -> None:
    """Torch reference of `write_req_to_token` (same arguments, same effect; no checks)."""
    if rows.numel() <= _LOOP_ROWS or slots.numel() >= _LOOP_ROW_LEN * rows.numel():
        src = 0
        for row, start, n in zip(rows.tolist(), starts.tolist(), lens.tolist()):
            req_to_token[row, start:start + n] = slots[src:src + n]
            src += n
        return None
    # token j = indptr[b] + i goes to table[rows[b], starts[b] + i]: flat offset j - shift[b]
    total, lens64 = slots.numel(), lens.long()
    shift = torch.cumsum(lens64, 0).sub_(lens64).sub_(starts).sub_(rows.long() * req_to_token.stride(0))
    flat = torch.arange(total, device=slots.device).sub_(
        torch.repeat_interleave(shift, lens64, output_size=total))
    _flat(req_to_token).index_copy_(0, flat, slots.to(torch.int32))
    return None


def _flat(table: torch.Tensor) -> torch.Tensor:
    """1-D view of a `[rows, cols]` table with a unit column stride: [r, c] is at r * stride(0) + c."""
    return table.as_strided(((table.shape[0] - 1) * table.stride(0) + table.shape[1],), (1,))


@triton.jit
def _build_kv_indices_kernel(
    req_to_token_ptr,  # int32 [max_requests, max_context_len]
    stride_row,
    rows_ptr,  # int32/int64 [batch]
    seq_lens_ptr,  # int32/int64 [batch]
    kv_indptr_ptr,  # int32 [batch + 1]
    kv_indices_ptr,  # int64 [kv_indptr[-1]]
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    row = tl.load(rows_ptr + b).to(tl.int64)
    n = tl.load(seq_lens_ptr + b).to(tl.int64)
    dst = tl.load(kv_indptr_ptr + b).to(tl.int64)
    src = req_to_token_ptr + row * stride_row
    # read 4 * n bytes of table; write 8 * n bytes of indices
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        mask = offs < n
        slot = tl.load(src + offs, mask=mask, other=0)
        tl.store(kv_indices_ptr + dst + offs, slot.to(tl.int64), mask=mask)


def _check_build(req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor) -> int:
    check_tensor("req_to_token", req_to_token, 2, (torch.int32,))
    check_same_device(req_to_token=req_to_token, rows=rows, seq_lens=seq_lens)
    batch = check_rows(rows, req_to_token.shape[0])
    check_lens("seq_lens", seq_lens, batch, 0, req_to_token.shape[1])
    return batch


def build_kv_indices(req_to_token: torch.Tensor, rows: torch.Tensor,
                     seq_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of the slots of positions `[0, seq_lens[b])` of each row (FlashInfer's layout).

    Args:
        req_to_token: int32 `[max_requests, max_context_len]`; not modified.
        rows: int32 (or int64) `[batch]`, each in `[0, max_requests)`.
        seq_lens: int32 (or int64) `[batch]`, each in `[0, max_context_len]`.

    Returns:
        kv_indptr: int32 `[batch + 1]`; kv_indices: int64 `[kv_indptr[-1]]` (the slots, row after row).
    """
    _check_build(req_to_token, rows, seq_lens)
    return build_kv_indices_unchecked(req_to_token, rows, seq_lens)


def build_kv_indices_unchecked(req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor,
                               *, num_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`build_kv_indices` without checks. `num_tokens` (host int, == sum(seq_lens)) sizes
    kv_indices without the one device->host sync that reads it otherwise."""
    if not use_triton(req_to_token):
        if num_tokens is None:
            return build_kv_indices_ref(req_to_token, rows, seq_lens)
        return build_kv_indices_ref(req_to_token, rows, seq_lens, num_tokens=num_tokens)
    return build_kv_indices_launch(req_to_token, rows, seq_lens, num_tokens=num_tokens)


def build_kv_indices_launch(req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor,
                             *, num_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The launch alone, no checks (bench/kernels.py times it)."""
    batch = rows.numel()
    kv_indptr = exclusive_cumsum(seq_lens).to(torch.int32)
    total = int(kv_indptr[-1].item()) if num_tokens is None else num_tokens
    kv_indices = torch.empty(total, dtype=torch.int64, device=req_to_token.device)
    if batch and total:
        _build_kv_indices_kernel[(batch,)](req_to_token, req_to_token.stride(0), rows, seq_lens,
                                           kv_indptr, kv_indices, BLOCK=_BLOCK)
    return kv_indptr, kv_indices


def build_kv_indices_ref(req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor,
                         *, num_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference of `build_kv_indices` (same arguments, same result; no checks)."""
    indptr = exclusive_cumsum(seq_lens)
    if rows.numel() <= _LOOP_ROWS:
        parts = [req_to_token[row, :n].long() for row, n in zip(rows.tolist(), seq_lens.tolist())]
        kv_indices = torch.cat(parts) if parts else req_to_token.new_empty(0, dtype=torch.int64)
        return indptr.to(torch.int32), kv_indices
    total = int(indptr[-1]) if num_tokens is None else num_tokens
    # kv_indices[j] = table[rows[b], j - indptr[b]] for j in [indptr[b], indptr[b + 1])
    shift = indptr[:-1] - rows.long() * req_to_token.stride(0)
    flat = torch.arange(total, device=rows.device).sub_(torch.repeat_interleave(shift, seq_lens.long(),
                                                                                output_size=total))
    kv_indices = _flat(req_to_token).index_select(0, flat).long()
    return indptr.to(torch.int32), kv_indices
