"""decode_attention: one query token per request against its whole cached context, read through
`req_to_token`, with grouped-query attention (flash-decoding: split the sequence, then reduce).

    out[b, h] = softmax(sm_scale * q[b, h] . K_b^T) V_b,  K_b = k_buf[req_to_token[rows[b], :seq_lens[b]],
                                                               h // (num_heads // num_kv_heads)]

Stage 1 (`_decode_split_kernel`, grid `[batch, num_kv_heads * head_blocks, num_splits]`): a program
takes one kv head, a block of BLOCK_H of the `group` query heads that share it (padded to 16 rows,
tl.dot's minimum, as SGLang's grouped decode kernel does; head_blocks = ceil(group / BLOCK_H), 1 for
group <= 16), and one contiguous split of the sequence. Both products are tensor-core dots
(`[BLOCK_H, D] x [D, BLOCK_N]`, then `[BLOCK_H, BLOCK_N] x [BLOCK_N, D]`, fp32 accumulate), under an
fp32 online softmax; it writes the split's normalized output and log-sum-exp. Stage 2
(`_decode_reduce_kernel`, grid `[batch, num_heads]`) weights the splits by `exp(lse - max lse)`.

An AttentionVariant (variant.py) narrows the keys to `[first_key(seq_len - 1), seq_len)`: the splits
cover only those, so a sliding layer reads at most `window` positions per request; soft-capping
applies to each score in stage 1, and a sink joins the denominator in stage 2.

Bytes moved, for S = sum(seq_lens) tokens, kv heads h, dim d, element size e:
    read  2 * S * h * d * e (K and V, each cached token once per kv head) + 4 * S (req_to_token)
    plus  batch * num_heads * d * (e + 8 * num_splits) for q, the fp32 partials and out.
The first term dominates (S counts only the positions a variant lets each query see); it is the
bound `bench/kernels.py` reports GB/s against.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from radixkv.kernels._common import (KernelInputError, Target, check_attention, check_lens,
                                     check_same_device, check_table_slots, dot_dtype, target_of, tl,
                                     triton, use_triton)
from radixkv.kernels.variant import (CAUSAL, AttentionVariant, cap_scores, cap_scores_ref, check_variant,
                                     first_key, first_key_ref, launch_args, softmax_ref)

_MIN_SPLIT_LEN = 256  # a split shorter than this does not pay for its partial write
_MAX_SPLITS = 16
_TARGET_PROGRAMS = 512  # enough stage-1 programs to fill a GPU (~4 per SM on an H100)


class DecodeConfig(NamedTuple):
    block_h: int  # query-head rows per program: 16, tl.dot's minimum M (a group of 1-16 is padded)
    block_n: int  # positions per inner step
    num_warps: int
    num_stages: int


def decode_config(head_dim: int, group: int, dtype: torch.dtype, target: Target) -> DecodeConfig:
    """Launch configuration of `_decode_split_kernel`; `bench/compile_check.py` compiles exactly
    these for sm_80/sm_90 and requires 0 spilled bytes. SGLang's grouped decode choice (16 head
    rows, 32 positions, 4 warps, 2 stages) measures there at 56-113 registers for fp16/bf16 and
    head_dim 64-256 (64 positions: up to 207 at head_dim 256). fp32 operands ("ieee" products,
    no tensor cores) need 16 positions (48-80 registers; 8 warps above head_dim 64)."""
    if dtype in (torch.float32, torch.float64):
        return DecodeConfig(16, 16, 4 if head_dim <= 64 else 8, 2)
    return DecodeConfig(block_h=16, block_n=32, num_warps=4, num_stages=2)


@triton.jit(do_not_specialize=["num_splits"])  # one compiled variant for any split count
def _decode_split_kernel(
    q_ptr, q_stride_b, q_stride_h,  # [batch, num_heads, head_dim]
    k_buf_ptr, v_buf_ptr, buf_stride_s, buf_stride_h,  # [num_slots, num_kv_heads, head_dim]
    req_to_token_ptr, r2t_stride,  # int32 [max_requests, max_context_len]
    rows_ptr, seq_lens_ptr,  # [batch]
    mid_o_ptr,  # fp32 [batch, num_heads, num_splits, head_dim]
    mid_lse_ptr,  # fp32 [batch, num_heads, num_splits]
    sm_scale, num_heads, head_dim, group, num_splits,
    window, chunk, softcap,  # the AttentionVariant (variant.py); sinks are the reduce's
    BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr, MASKED: tl.constexpr, SOFTCAP: tl.constexpr,
):
    tl.static_assert(BLOCK_H >= 16 and BLOCK_N >= 16 and BLOCK_D >= 16)  # tl.dot's minimum
    b = tl.program_id(0).to(tl.int64)
    head_blocks = tl.cdiv(group, BLOCK_H)
    kvh = tl.program_id(1).to(tl.int64) // head_blocks
    split = tl.program_id(2).to(tl.int64)
    row = tl.load(rows_ptr + b).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int64)
    lo = first_key(seq_len - 1, window, chunk, MASKED)  # keys [lo, seq_len): at most a window's worth
    split_len = tl.cdiv(tl.cdiv(seq_len - lo, num_splits), BLOCK_N) * BLOCK_N  # whole steps per split
    start = lo + split * split_len
    end = tl.minimum(start + split_len, seq_len)  # start >= end: an empty split

    offs_g = (tl.program_id(1) % head_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    heads = kvh * group + offs_g  # the query heads that read this kv head
    mask_h = offs_g < group
    mask_d = offs_d < head_dim
    q = tl.load(q_ptr + b * q_stride_b + heads[:, None] * q_stride_h + offs_d[None, :],
                mask=mask_h[:, None] & mask_d[None, :], other=0.0).to(DOT_DTYPE)  # [BLOCK_H, BLOCK_D]

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < end
        # read 4 bytes of table and 2 * d * e bytes of K, V per position
        slot = tl.load(req_to_token_ptr + row * r2t_stride + offs_n, mask=mask_n, other=0).to(tl.int64)
        kv_base = slot * buf_stride_s + kvh * buf_stride_h
        k = tl.load(k_buf_ptr + kv_base[None, :] + offs_d[:, None],  # K^T: [BLOCK_D, BLOCK_N]
                    mask=mask_d[:, None] & mask_n[None, :], other=0.0)
        s = tl.dot(q, k.to(DOT_DTYPE), input_precision=PRECISION) * sm_scale  # [BLOCK_H, BLOCK_N]
        s = tl.where(mask_n[None, :], cap_scores(s, softcap, SOFTCAP), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        v = tl.load(v_buf_ptr + kv_base[:, None] + offs_d[None, :],  # [BLOCK_N, BLOCK_D]
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)
        pv = tl.dot(p.to(v.dtype).to(DOT_DTYPE), v.to(DOT_DTYPE), input_precision=PRECISION)
        acc = acc * alpha[:, None] + pv
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new

    has = l_i > 0.0
    lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    mid = (b * num_heads + heads) * num_splits + split  # [BLOCK_H]
    tl.store(mid_lse_ptr + mid, lse, mask=mask_h)
    tl.store(mid_o_ptr + mid[:, None] * head_dim + offs_d[None, :], out,
             mask=mask_h[:, None] & mask_d[None, :])


@triton.jit
def _decode_reduce_kernel(
    mid_o_ptr,  # fp32 [batch, num_heads, num_splits, head_dim]
    mid_lse_ptr,  # fp32 [batch, num_heads, num_splits]
    out_ptr, out_stride_b, out_stride_h,  # [batch, num_heads, head_dim]
    sinks_ptr,  # fp32 [num_heads] (read only when SINKS)
    head_dim, num_splits,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, SINKS: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    mask_s = offs_s < num_splits
    mask_d = offs_d < head_dim
    base = (b * tl.num_programs(1) + h) * num_splits
    lse = tl.load(mid_lse_ptr + base + offs_s, mask=mask_s, other=float("-inf"))
    top = tl.max(lse, axis=0)  # split 0 is never empty (seq_len >= 1): finite
    if SINKS:  # the sink joins the denominator, weighing no value
        sink = tl.load(sinks_ptr + h)
        top = tl.maximum(top, sink)
    w = tl.exp(lse - top)
    o = tl.load(mid_o_ptr + (base + offs_s[:, None]) * head_dim + offs_d[None, :],
                mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    total = tl.sum(w, axis=0)
    if SINKS:
        total += tl.exp(sink - top)
    out = tl.sum(w[:, None] * o, axis=0) / total
    tl.store(out_ptr + b * out_stride_b + h * out_stride_h + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=mask_d)


def num_splits_for(batch: int, num_kv_heads: int, max_seq_len: int) -> int:
    """Splits per sequence: enough programs to fill the GPU, none shorter than _MIN_SPLIT_LEN."""
    by_len = triton.cdiv(max_seq_len, _MIN_SPLIT_LEN)
    by_occupancy = triton.cdiv(_TARGET_PROGRAMS, max(1, batch * num_kv_heads))
    return max(1, min(_MAX_SPLITS, by_len, by_occupancy))


def decode_launch(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                  req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor,
                  sm_scale: float, num_splits: int, config: DecodeConfig, target: Target,
                  variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """The two launches, no checks, no host sync. Tests call it to force a number of splits or a
    configuration; `bench/compile_check.py` to capture what it launches for a target."""
    batch, heads, dim = q.shape
    kv_heads = k_buf.shape[1]
    group = heads // kv_heads
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if batch == 0:
        return out
    mid_o = torch.empty((batch, heads, num_splits, dim), dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((batch, heads, num_splits), dtype=torch.float32, device=q.device)
    block_d = max(16, triton.next_power_of_2(dim))
    dot = dot_dtype(q.dtype, target)
    grid = (batch, kv_heads * triton.cdiv(group, config.block_h), num_splits)
    var = launch_args(variant, q)
    _decode_split_kernel[grid](
        q, q.stride(0), q.stride(1), k_buf, v_buf, k_buf.stride(0), k_buf.stride(1),
        req_to_token, req_to_token.stride(0), rows, seq_lens, mid_o, mid_lse,
        float(sm_scale), heads, dim, group, num_splits, var["window"], var["chunk"], var["softcap"],
        BLOCK_N=config.block_n, BLOCK_H=config.block_h, BLOCK_D=block_d, DOT_DTYPE=dot,
        PRECISION="ieee" if dot == tl.float32 else "tf32", MASKED=var["MASKED"], SOFTCAP=var["SOFTCAP"],
        num_warps=config.num_warps, num_stages=config.num_stages)
    _decode_reduce_kernel[(batch, heads)](
        mid_o, mid_lse, out, out.stride(0), out.stride(1), var["sinks_ptr"], dim, num_splits,
        BLOCK_S=triton.next_power_of_2(num_splits), BLOCK_D=block_d, SINKS=var["SINKS"])
    return out


def decode_attention(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                     req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor,
                     sm_scale: float, variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """Attention of each request's one new query token over its cached KV. Modifies nothing.

    Args:
        q: `[batch, num_heads, head_dim]`, the buffers' dtype (fp32/fp16/bf16/fp64).
        k_buf, v_buf: one layer's `[num_slots, num_kv_heads, head_dim]`; num_heads % num_kv_heads == 0.
        req_to_token: int32 `[max_requests, max_context_len]`.
        rows: int32 (or int64) `[batch]`: each request's row.
        seq_lens: int32 (or int64) `[batch]`, each in `[1, max_context_len]`: positions attended,
            including the new token (whose K/V must already be stored).
        sm_scale: multiplies q . k before the softmax (usually head_dim ** -0.5).
        variant: window, chunks, soft-capping, sinks (variant.py); the query is at position
            `seq_lens[b] - 1`. Default: plain causal attention.

    Returns:
        `[batch, num_heads, head_dim]` in q's dtype; softmax and sums in fp32.

    Raises KernelInputError / ContextLengthError / InvalidSlotsError (a table entry outside the
    pool) before launching. The checks sync with the host; per layer, call
    `decode_attention_unchecked` on a batch validated once.
    """
    batch, _ = check_attention(q, k_buf, v_buf, req_to_token, rows, sm_scale)
    if q.shape[0] != batch:
        raise KernelInputError(f"q has {q.shape[0]} query rows for a batch of {batch} rows: "
                               "decode takes exactly one query token per request")
    check_same_device(q=q, seq_lens=seq_lens)
    check_variant(variant, q.shape[1], q.device)
    max_len = check_lens("seq_lens", seq_lens, batch, 1, req_to_token.shape[1])
    check_table_slots(req_to_token, rows, seq_lens, k_buf.shape[0])
    if not use_triton(q):
        return decode_attention_ref(q, k_buf, v_buf, req_to_token, rows, seq_lens, sm_scale, variant)
    return decode_attention_unchecked(q, k_buf, v_buf, req_to_token, rows, seq_lens, sm_scale, max_len, variant)


def decode_attention_unchecked(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                               req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor,
                               sm_scale: float, max_seq_len: int,
                               variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """`decode_attention` without checks and without any device->host sync, for the per-layer
    path: the arguments must satisfy `decode_attention`'s contract (as `RadixCache.batch()`
    guarantees). `max_seq_len` (host int, >= max(seq_lens)) sizes the splits and the reference's
    padding; read it once per step."""
    if not use_triton(q):
        return decode_attention_ref(q, k_buf, v_buf, req_to_token, rows, seq_lens, sm_scale, variant,
                                    max_seq_len=max_seq_len)
    target = target_of(q)
    config = decode_config(q.shape[2], q.shape[1] // k_buf.shape[1], q.dtype, target)
    splits = num_splits_for(q.shape[0], k_buf.shape[1], variant.span(max_seq_len))
    return decode_launch(q, k_buf, v_buf, req_to_token, rows, seq_lens, sm_scale, splits, config, target, variant)


def decode_attention_ref(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                         req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor,
                         sm_scale: float, variant: AttentionVariant = CAUSAL, *,
                         max_seq_len: int | None = None) -> torch.Tensor:
    """Torch reference of `decode_attention` (same arguments, same result; no checks): pads the
    batch to its longest sequence, masks, and computes in fp32. `max_seq_len` (>= max(seq_lens))
    spares the one host sync that reads the longest length."""
    batch, heads, dim = q.shape
    kv_heads = k_buf.shape[1]
    if batch == 0:
        return torch.empty_like(q)
    width = int(seq_lens.max()) if max_seq_len is None else max_seq_len
    pos = torch.arange(width, device=q.device)[None, :]
    valid = (pos < seq_lens[:, None]) & (pos >= first_key_ref(variant, seq_lens.long() - 1)[:, None])  # [batch, width]
    slots = req_to_token[rows.long(), :width].long().masked_fill(~valid, 0)  # stale entries unread
    # Gather straight into a heads-major layout, so both products are plain batched matmuls
    # (einsum on the NHD gather is ~20x slower on CPU, and permuting after the gather costs a copy).
    rows_hm = (slots[None] * kv_heads + torch.arange(kv_heads, device=q.device)[:, None, None]).flatten()

    def heads_major(buf: torch.Tensor) -> torch.Tensor:  # [kv_heads, batch, width, dim], fp32
        return buf.reshape(-1, dim).index_select(0, rows_hm).view(kv_heads, batch, width, dim).float()

    k, v = heads_major(k_buf), heads_major(v_buf)
    qg = q.float().reshape(batch, kv_heads, heads // kv_heads, dim).transpose(0, 1)
    s = cap_scores_ref((qg @ k.transpose(-1, -2)) * sm_scale, variant)  # [kv_heads, batch, group, width]
    s = s.masked_fill(~valid[None, :, None, :], float("-inf"))
    sinks = None if variant.sinks is None else variant.sinks.view(kv_heads, 1, heads // kv_heads, 1)
    out = softmax_ref(s, sinks) @ v  # [kv_heads, batch, group, dim]
    return out.transpose(0, 1).reshape(batch, heads, dim).to(q.dtype)
