"""merge_states: combine partial attention states of one query row into its output (the
log-sum-exp merge flash-decoding's reduce and FlashInfer's `merge_states` use).

A partial state `(o_e, lse_e)` is attention over one part of a row's keys: `o_e` normalized over that
part, `lse_e = log(sum(exp(scores of the part)))`. Over the union of disjoint parts:

    out[r, h] = sum_e w_e * o_e[h],  w_e = exp(lse_e[h] - max_e lse_e[h]) / sum_e exp(...),
    e over merge_indices[merge_indptr[r]:merge_indptr[r + 1]]

A part with no keys has lse = -inf and weight 0. The kernel reads a row's entries BLOCK_E at a time,
rescaling its running sums by the running maximum (flash attention's online softmax, over parts).
Grid `[rows, num_heads]`; bytes moved per row and
head: entries * (d + 1) * 4 (fp32 partials) + d * e (out), small next to the KV the partials came from.
"""

from __future__ import annotations

import torch

from radixkv.kernels._common import KernelInputError, check_same_device, check_tensor, tl, triton, use_triton
from radixkv.kernels.cascade_plan import check_csr, csr_to_padded


@triton.jit
def _merge_states_kernel(
    o_ptr,  # fp32 [entries, num_heads, head_dim], contiguous
    lse_ptr,  # fp32 [entries, num_heads], contiguous
    merge_indptr_ptr,  # [rows + 1]
    merge_indices_ptr,  # [entries]
    out_ptr, out_stride_r, out_stride_h,  # [rows, num_heads, head_dim]
    sinks_ptr,  # fp32 [num_heads] (read only when SINKS)
    num_heads, head_dim,
    BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr, SINKS: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    lo = tl.load(merge_indptr_ptr + r).to(tl.int64)
    hi = tl.load(merge_indptr_ptr + r + 1).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_E)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < head_dim
    top = tl.full([], float("-inf"), tl.float32)  # the largest lse so far
    total = tl.zeros([], tl.float32)  # sum of exp(lse - top) so far
    if SINKS:  # the head's sink: a part with lse = sink and no value (o = 0)
        top = tl.load(sinks_ptr + h)
        total = tl.full([], 1.0, tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)  # sum of exp(lse - top) * o so far
    for e0 in range(lo, hi, BLOCK_E):  # BLOCK_E entries at a time: the o tile stays in registers
        mask_e = e0 + offs_e < hi
        ent = tl.load(merge_indices_ptr + e0 + offs_e, mask=mask_e, other=0).to(tl.int64)
        lse = tl.load(lse_ptr + ent * num_heads + h, mask=mask_e, other=float("-inf"))
        new_top = tl.maximum(top, tl.max(lse, axis=0))
        shift = tl.where(new_top == float("-inf"), 0.0, new_top)  # no keys yet: weights 0
        w = tl.where(lse == float("-inf"), 0.0, tl.exp(lse - shift))
        alpha = tl.exp(top - shift)  # rescales what came before (0 while top is -inf)
        o = tl.load(o_ptr + (ent * num_heads + h)[:, None] * head_dim + offs_d[None, :],
                    mask=mask_e[:, None] & mask_d[None, :], other=0.0)
        acc = acc * alpha + tl.sum(w[:, None] * o, axis=0)
        total = total * alpha + tl.sum(w, axis=0)
        top = new_top
    out = acc / tl.where(total > 0.0, total, 1.0)  # a row with no keys at all: 0
    tl.store(out_ptr + r * out_stride_r + h * out_stride_h + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=mask_d)


_MERGE_TILE = 2048  # fp32 elements of the [BLOCK_E, BLOCK_D] o tile: at most 16 per thread at 4 warps


def merge_launch_config(max_entries: int, head_dim: int) -> dict[str, int]:
    """Block sizes and num_warps `_merge_states_kernel` runs with (bench/compile_check.py compiles
    them): rows of more than BLOCK_E entries loop, so the tile is bounded whatever `max_entries` is
    (a GPU plan cuts every shared run into 256-slot chunks: a 32k-token row merges 128+ entries)."""
    block_d = triton.next_power_of_2(head_dim)
    block_e = min(triton.next_power_of_2(max(1, max_entries)), max(1, _MERGE_TILE // block_d))
    return dict(BLOCK_E=block_e, BLOCK_D=block_d, num_warps=min(4, max(1, block_e * block_d // 512)), num_stages=1)


def merge_states_launch(o: torch.Tensor, lse: torch.Tensor, merge_indptr: torch.Tensor, merge_indices: torch.Tensor,
                        max_entries: int, dtype: torch.dtype, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """`merge_states` without checks or host syncs (the per-layer path of a validated plan)."""
    if not use_triton(o):
        return merge_states_ref(o, lse, merge_indptr, merge_indices, max_entries, dtype, sinks)
    return merge_states_kernel_launch(o, lse, merge_indptr, merge_indices, max_entries, dtype, sinks)


def merge_states_kernel_launch(o: torch.Tensor, lse: torch.Tensor, merge_indptr: torch.Tensor,
                               merge_indices: torch.Tensor, max_entries: int, dtype: torch.dtype,
                               sinks: torch.Tensor | None = None) -> torch.Tensor:
    """The Triton kernel itself, whatever the device (the cascade launcher's Triton path and the
    compile check, which compiles it for a GPU from CPU tensors)."""
    rows = merge_indptr.numel() - 1
    heads, dim = o.shape[1:]
    out = torch.empty((rows, heads, dim), dtype=dtype, device=o.device)
    if rows and heads:
        _merge_states_kernel[(rows, heads)](
            o, lse, merge_indptr, merge_indices, out, out.stride(0), out.stride(1),
            sinks if sinks is not None else lse, heads, dim, SINKS=sinks is not None,
            **merge_launch_config(max_entries, dim))
    return out


def merge_states(o: torch.Tensor, lse: torch.Tensor, merge_indptr: torch.Tensor, merge_indices: torch.Tensor,
                 max_entries: int, dtype: torch.dtype, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Merge each row's partial attention states. Modifies nothing.

    Args:
        o: fp32 `[entries, num_heads, head_dim]`, contiguous: each part's normalized output.
        lse: fp32 `[entries, num_heads]`, contiguous: each part's log-sum-exp (-inf: no keys).
        merge_indptr: int32/int64 `[rows + 1]`, non-decreasing from 0 to `merge_indices.numel()`.
        merge_indices: int32/int64 `[n]`, each in `[0, entries)`: row r merges entries
            `merge_indices[merge_indptr[r]:merge_indptr[r + 1]]`.
        max_entries: the most entries of one row (sizes the kernel's block; read on the host).
        dtype: the output's dtype.
        sinks: None, or fp32 `[num_heads]`: a sink logit per head that joins every row's
            denominator and weighs no value (gpt-oss's attention sinks).

    Returns:
        `[rows, num_heads, head_dim]` in `dtype` (a row with no keys gives zeros).
    """
    check_tensor("o", o, 3, (torch.float32,))
    check_tensor("lse", lse, 2, (torch.float32,))
    check_same_device(o=o, lse=lse)
    if not (o.is_contiguous() and lse.is_contiguous()) or lse.shape != o.shape[:2]:
        raise KernelInputError(f"o {tuple(o.shape)} and lse {tuple(lse.shape)} must be contiguous, "
                               "lse of shape o.shape[:2]")
    check_csr("merge", merge_indptr, merge_indices, o.device, max_entries, o.shape[0])
    if sinks is not None:
        check_tensor("sinks", sinks, 1, (torch.float32,))
        check_same_device(o=o, sinks=sinks)
        if sinks.numel() != o.shape[1]:
            raise KernelInputError(f"sinks has {sinks.numel()} logits for {o.shape[1]} heads")
    return merge_states_launch(o, lse, merge_indptr, merge_indices, max_entries, dtype, sinks)


def merge_states_ref(o: torch.Tensor, lse: torch.Tensor, merge_indptr: torch.Tensor, merge_indices: torch.Tensor,
                     max_entries: int, dtype: torch.dtype, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Torch reference of `merge_states` (same arguments, same result; no checks, no host syncs):
    pads each row to `max_entries` entries and weights them with a softmax over their lse."""
    rows = merge_indptr.numel() - 1
    if rows == 0 or max_entries == 0 or merge_indices.numel() == 0:
        return torch.zeros((rows, *o.shape[1:]), dtype=dtype, device=o.device)
    return merge_padded_ref(o, lse, *csr_to_padded(merge_indptr, merge_indices, max_entries), dtype, sinks)


def merge_padded_ref(o: torch.Tensor, lse: torch.Tensor, idx: torch.Tensor, valid: torch.Tensor,
                     dtype: torch.dtype, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """merge_states_ref on the padded layout: idx int64 and valid bool, both `[rows, max_entries]`.
    A sink is one more part per row: lse = sinks[h], o = 0."""
    lse_p = lse[idx].masked_fill_(~valid[:, :, None], float("-inf"))  # [rows, max_entries, heads]
    if sinks is not None:
        lse_p = torch.cat([lse_p, sinks.float().expand(lse_p.shape[0], 1, -1)], dim=1)
        o = torch.cat([o, o.new_zeros(1, *o.shape[1:])])
        idx = torch.cat([idx, idx.new_full((idx.shape[0], 1), o.shape[0] - 1)], dim=1)
    top = lse_p.amax(1, keepdim=True)
    w = lse_p.sub_(top.masked_fill_(top == float("-inf"), 0.0)).exp_()  # 0 where lse is -inf
    total = w.sum(1)  # [rows, heads]
    out = (w[..., None] * o[idx]).sum(1) / total.masked_fill_(total == 0, 1.0)[..., None]
    return out.to(dtype)
