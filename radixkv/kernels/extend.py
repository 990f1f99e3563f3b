"""extend_attention: prefill of each request's new tokens, ragged over the batch. New token i of
request b attends to the b's cached prefix (read through `req_to_token[rows[b], :prefix_lens[b]]`)
and, causally, to new tokens 0..i (read from `k`, `v`, not from the pool):

    request b, new tokens [qo_indptr[b], qo_indptr[b + 1]) of q, k, v:
      keys:  | prefix: k_buf[req_to_token[rows[b], 0:P]] | new: k[qo_indptr[b] + 0 .. + i] |
      query i sees all P prefix keys and new keys 0..i (positions P + 0 .. P + i)

Grid `[ceil(max(extend_lens) / BLOCK_M), batch, num_heads]`: a program takes BLOCK_M new tokens of
one request and one query head, runs an fp32 online softmax over the prefix, then over the new
tokens up to its last row (the causal diagonal), and writes its rows. Both products are tl.dot on
the stored dtype (fp16/bf16 operands, fp32 accumulate; p is rounded to V's dtype for the second,
as FlashAttention and SGLang do); fp32/fp64 inputs multiply in fp32 ("ieee").

Bytes moved, for request b with P prefix and E new tokens, kv heads h, dim d, element size e:
    at least (P + E) * h * d * 2 * e (each K/V row once) + 4 * P (table), plus q and out;
    as launched, each of the `group` query heads of a kv head and each of the ceil(E / BLOCK_M)
    row blocks re-reads the prefix (the re-reads are what L2 absorbs on a GPU).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch

from radixkv.kernels._common import (KernelInputError, Target, check_attention, check_lens,
                                     check_same_device, check_table_slots, check_tensor, dot_dtype,
                                     exclusive_cumsum, target_of, tl, triton, use_triton)
from radixkv.kernels.variant import (CAUSAL, AttentionVariant, cap_scores, cap_scores_ref, check_variant,
                                     first_key, first_key_ref, launch_args, online_step, softmax_ref)


class ExtendConfig(NamedTuple):
    block_m: int  # new tokens (query rows) per program
    block_n: int  # keys per inner step; tl.dot needs M, N, K >= 16
    num_warps: int
    num_stages: int


def extend_config(head_dim: int, group: int, dtype: torch.dtype, target: Target) -> ExtendConfig:
    """Launch configuration of `_extend_kernel`; `bench/compile_check.py` compiles exactly these
    for sm_80/sm_90 and requires 0 spilled bytes. Measured there (fp16, registers sm_80/sm_90):
    head_dim 64 at 128 x 64, 8 warps: 191/175; 128 at 64 x 64, 8 warps, 1 stage: 168/185 (128 x 64
    reaches 255 on sm_80, 64 x 64 with 4 warps spills); 256 at 64 x 32, 8 warps: 242/216 (64 x 64
    spills on sm_90); fp32 ("ieee" products, no tensor cores) at 16 x 16: 64-98 (8 warps; 4 at
    head_dim 128, where 8 spill on sm_80). The
    interpreter (target None) runs 32 x 32, so the tests' odd lengths span several blocks; tests
    also run the GPU choices in the interpreter."""
    if target is None:
        return ExtendConfig(32, 32, 4, 1)
    if dtype in (torch.float32, torch.float64):
        return ExtendConfig(16, 16, 4 if 64 < head_dim <= 128 else 8, 1)
    if head_dim <= 64:
        return ExtendConfig(128, 64, 8, 2)
    if head_dim <= 128:
        return ExtendConfig(64, 64, 8, 1)
    return ExtendConfig(64, 32, 8, 2)


class ExtendLens(NamedTuple):
    """Host copies of an extend batch's per-request values, read once per step so that the
    per-layer calls (`extend_attention_unchecked`) never sync with the device."""
    rows: list[int]
    prefix_lens: list[int]
    extend_lens: list[int]
    max_extend_len: int

    @classmethod
    def read(cls, rows: torch.Tensor, prefix_lens: torch.Tensor, extend_lens: torch.Tensor) -> ExtendLens:
        """One device->host copy of the three `[batch]` tensors."""
        if rows.numel() == 0:
            return cls([], [], [], 0)
        r, p, e = torch.stack([rows.long(), prefix_lens.long(), extend_lens.long()]).tolist()
        return cls(r, p, e, max(e))


@triton.jit
def _attend_block(q, k_t, v, keep, m_i, l_i, acc, sm_scale, softcap,
                  DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr, SOFTCAP: tl.constexpr):
    """One online-softmax step: q [M, D] and k_t [D, N] in DOT_DTYPE, v [N, D] as stored, keep [M, N]
    (a row may keep no key of a block under a window: its state stays as it was)."""
    s = cap_scores(tl.dot(q, k_t, input_precision=PRECISION) * sm_scale, softcap, SOFTCAP)
    s = tl.where(keep, s, float("-inf"))
    m_new, alpha, p = online_step(s, m_i, l_i)
    pv = tl.dot(p.to(v.dtype).to(DOT_DTYPE), v.to(DOT_DTYPE), input_precision=PRECISION)
    return m_new, l_i * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + pv


@triton.jit
def _extend_kernel(
    q_ptr, q_stride_t, q_stride_h,  # [sum(extend_lens), num_heads, head_dim]
    k_ptr, k_stride_t, k_stride_h, v_ptr, v_stride_t, v_stride_h,  # [sum(extend_lens), kv_heads, dim]
    k_buf_ptr, v_buf_ptr, buf_stride_s, buf_stride_h,  # [num_slots, num_kv_heads, head_dim]
    req_to_token_ptr, r2t_stride,  # int32 [max_requests, max_context_len]
    rows_ptr, prefix_lens_ptr, extend_lens_ptr,  # [batch]
    qo_indptr_ptr,  # int64 [batch + 1]
    out_ptr,  # [sum(extend_lens), num_heads, head_dim], contiguous
    sm_scale, num_heads, head_dim, group,
    window, chunk, softcap, sinks_ptr,  # the AttentionVariant (variant.py); sinks fp32 [num_heads]
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
    MASKED: tl.constexpr, SOFTCAP: tl.constexpr, SINKS: tl.constexpr,
):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16 and BLOCK_D >= 16)  # tl.dot's minimum
    m_start = tl.program_id(0).to(tl.int64) * BLOCK_M
    b = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2).to(tl.int64)
    kvh = h // group
    row = tl.load(rows_ptr + b).to(tl.int64)
    prefix = tl.load(prefix_lens_ptr + b).to(tl.int64)
    ext = tl.load(extend_lens_ptr + b).to(tl.int64)
    q0 = tl.load(qo_indptr_ptr + b)

    offs_m = m_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < ext
    mask_d = offs_d < head_dim
    q = tl.load(q_ptr + (q0 + offs_m)[:, None] * q_stride_t + h * q_stride_h + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0).to(DOT_DTYPE)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # keys of query row m lie in [first[m], prefix + m]; the block's rows start reading at first[0]
    first = first_key(prefix + offs_m, window, chunk, MASKED)  # [BLOCK_M]
    block_first = first_key(prefix + m_start, window, chunk, MASKED)

    # cached prefix, through the table: 4 bytes of table + 2 * d * e bytes of K, V per key
    prefix_end = tl.where(m_start < ext, prefix, 0)  # a block past this request's rows does nothing
    for n0 in range(block_first // BLOCK_N * BLOCK_N, prefix_end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < prefix
        slot = tl.load(req_to_token_ptr + row * r2t_stride + offs_n, mask=mask_n, other=0).to(tl.int64)
        base = slot * buf_stride_s + kvh * buf_stride_h
        k_t = tl.load(k_buf_ptr + base[None, :] + offs_d[:, None],  # K^T: [BLOCK_D, BLOCK_N]
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0).to(DOT_DTYPE)
        v = tl.load(v_buf_ptr + base[:, None] + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)
        keep = mask_n[None, :] & (offs_n[None, :] >= first[:, None])
        m_i, l_i, acc = _attend_block(q, k_t, v, keep, m_i, l_i, acc, sm_scale, softcap,
                                      DOT_DTYPE, PRECISION, SOFTCAP)

    # new tokens, causal: rows of this block see keys up to their own index
    ext_end = tl.where(m_start < ext, tl.minimum(ext, m_start + BLOCK_M), 0)
    for n0 in range(tl.maximum(block_first - prefix, 0) // BLOCK_N * BLOCK_N, ext_end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < ext
        k_t = tl.load(k_ptr + (q0 + offs_n)[None, :] * k_stride_t + kvh * k_stride_h + offs_d[:, None],
                      mask=mask_d[:, None] & mask_n[None, :], other=0.0).to(DOT_DTYPE)
        v = tl.load(v_ptr + (q0 + offs_n)[:, None] * v_stride_t + kvh * v_stride_h + offs_d[None, :],
                    mask=mask_n[:, None] & mask_d[None, :], other=0.0)
        keep = mask_n[None, :] & (offs_n[None, :] <= offs_m[:, None]) & (prefix + offs_n[None, :] >= first[:, None])
        m_i, l_i, acc = _attend_block(q, k_t, v, keep, m_i, l_i, acc, sm_scale, softcap,
                                      DOT_DTYPE, PRECISION, SOFTCAP)

    if SINKS:  # the head's sink logit joins each row's denominator, weighing no value
        sink = tl.load(sinks_ptr + h)
        m_new = tl.maximum(m_i, sink)
        alpha = tl.exp(m_i - m_new)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha + tl.exp(sink - m_new)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # l_i == 0 only on masked rows
    tl.store(out_ptr + ((q0 + offs_m)[:, None] * num_heads + h) * head_dim + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def _check_extend(q, k, v, k_buf, v_buf, req_to_token, rows, prefix_lens, extend_lens, sm_scale, variant) -> None:
    """All checks of `extend_attention` (host syncs: the lengths' ranges and sum, the table)."""
    batch, _ = check_attention(q, k_buf, v_buf, req_to_token, rows, sm_scale)
    check_variant(variant, q.shape[1], q.device)
    check_same_device(q=q, k=k, v=v, prefix_lens=prefix_lens, extend_lens=extend_lens)
    for name, t in (("k", k), ("v", v)):
        check_tensor(name, t, 3, (q.dtype,))
        if t.shape != (q.shape[0], *k_buf.shape[1:]):
            raise KernelInputError(f"{name} is {tuple(t.shape)}; expected {(q.shape[0], *k_buf.shape[1:])}")
    check_lens("prefix_lens", prefix_lens, batch, 0, req_to_token.shape[1])
    check_lens("extend_lens", extend_lens, batch, 0, req_to_token.shape[1])
    total = int(extend_lens.long().sum().item()) if batch else 0
    if total != q.shape[0]:
        raise KernelInputError(f"extend_lens sum to {total}; q has {q.shape[0]} tokens")
    check_table_slots(req_to_token, rows, prefix_lens, k_buf.shape[0])


def extend_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor,
                     v_buf: torch.Tensor, req_to_token: torch.Tensor, rows: torch.Tensor,
                     prefix_lens: torch.Tensor, extend_lens: torch.Tensor,
                     sm_scale: float, variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """Prefill attention of each request's new tokens over its cached prefix and, causally, each
    other. Modifies nothing (store the new K/V with `store_kv` separately).

    Args:
        q: `[sum(extend_lens), num_heads, head_dim]`, requests in batch order; fp32/fp16/bf16/fp64.
        k, v: `[sum(extend_lens), num_kv_heads, head_dim]`, the new tokens' K/V, q's dtype.
        k_buf, v_buf: one layer's `[num_slots, num_kv_heads, head_dim]`, q's dtype.
        req_to_token: int32 `[max_requests, max_context_len]`.
        rows, prefix_lens, extend_lens: int32 (or int64) `[batch]`; lengths may be 0.
        sm_scale: multiplies q . k before the softmax.
        variant: window, chunks, soft-capping, sinks (variant.py); new token i of request b is at
            position `prefix_lens[b] + i`. Default: plain causal attention.

    Returns:
        `[sum(extend_lens), num_heads, head_dim]` in q's dtype (softmax and sums in fp32).

    Raises KernelInputError / ContextLengthError / InvalidSlotsError before launching. The checks
    sync with the host; per layer, call `extend_attention_unchecked` on a batch validated once.
    """
    _check_extend(q, k, v, k_buf, v_buf, req_to_token, rows, prefix_lens, extend_lens, sm_scale, variant)
    if not use_triton(q):
        return extend_attention_ref(q, k, v, k_buf, v_buf, req_to_token, rows, prefix_lens,
                                    extend_lens, sm_scale, variant)
    lens = ExtendLens.read(rows, prefix_lens, extend_lens)
    return extend_attention_unchecked(q, k, v, k_buf, v_buf, req_to_token, rows, prefix_lens,
                                      extend_lens, sm_scale, lens, variant)


def extend_attention_unchecked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor,
                               v_buf: torch.Tensor, req_to_token: torch.Tensor, rows: torch.Tensor,
                               prefix_lens: torch.Tensor, extend_lens: torch.Tensor, sm_scale: float,
                               lens: ExtendLens, variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """`extend_attention` without checks and without any device->host sync, for the per-layer
    path: the arguments must satisfy `extend_attention`'s contract (as `RadixCache.batch()`
    guarantees), and `lens` hold the same values as `rows`, `prefix_lens`, `extend_lens`
    (`ExtendLens.read` once per step)."""
    if not use_triton(q):
        return extend_attention_ref(q, k, v, k_buf, v_buf, req_to_token, rows, prefix_lens,
                                    extend_lens, sm_scale, variant, lens=lens)
    target = target_of(q)
    config = extend_config(q.shape[2], q.shape[1] // k_buf.shape[1], q.dtype, target)
    return extend_launch(q, k, v, k_buf, v_buf, req_to_token, rows, prefix_lens, extend_lens,
                         sm_scale, lens.max_extend_len, config, target, variant)


def extend_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor,
                  v_buf: torch.Tensor, req_to_token: torch.Tensor, rows: torch.Tensor,
                  prefix_lens: torch.Tensor, extend_lens: torch.Tensor, sm_scale: float,
                  max_extend_len: int, config: ExtendConfig, target: Target,
                  variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """The launch alone, no checks, no host sync (tests force a configuration through it;
    `bench/compile_check.py` captures what it launches for a target)."""
    tokens, heads, dim = q.shape
    out = torch.empty((tokens, heads, dim), dtype=q.dtype, device=q.device)
    if tokens == 0:
        return out
    dot = dot_dtype(q.dtype, target)
    grid = (triton.cdiv(max_extend_len, config.block_m), rows.numel(), heads)
    _extend_kernel[grid](
        q, q.stride(0), q.stride(1), k, k.stride(0), k.stride(1), v, v.stride(0), v.stride(1),
        k_buf, v_buf, k_buf.stride(0), k_buf.stride(1), req_to_token, req_to_token.stride(0),
        rows, prefix_lens, extend_lens, exclusive_cumsum(extend_lens), out,
        float(sm_scale), heads, dim, heads // k_buf.shape[1], **launch_args(variant, q),
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_D=max(16, triton.next_power_of_2(dim)),
        DOT_DTYPE=dot, PRECISION="ieee" if dot == tl.float32 else "tf32",
        num_warps=config.num_warps, num_stages=config.num_stages)
    return out


def extend_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor,
                         v_buf: torch.Tensor, req_to_token: torch.Tensor, rows: torch.Tensor,
                         prefix_lens: torch.Tensor, extend_lens: torch.Tensor,
                         sm_scale: float, variant: AttentionVariant = CAUSAL, *,
                         lens: ExtendLens | None = None) -> torch.Tensor:
    """Torch reference of `extend_attention` (same arguments, same result; no checks), one
    request at a time, in fp32. `lens` (the same values on the host) spares the one host sync
    that reads the lengths. Grouped by kv head, as decode is: K/V are gathered heads-major once
    per kv head, and the `group` query heads that share one run as one matmul of `group * e`
    rows, so no kv head is copied or re-read per query head."""
    (_, heads, dim), kv_heads = q.shape, k_buf.shape[1]
    group = heads // kv_heads
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lens = ExtendLens.read(rows, prefix_lens, extend_lens) if lens is None else lens
    starts = itertools.accumulate(lens.extend_lens, initial=0)
    head_ids = torch.arange(kv_heads, device=q.device)[:, None]
    sinks = None if variant.sinks is None else variant.sinks.view(kv_heads, group, 1, 1)
    for row, p, e, start in zip(lens.rows, lens.prefix_lens, lens.extend_lens, starts):
        new = slice(start, start + e)
        at = (req_to_token[row, :p].long()[None] * kv_heads + head_ids).flatten()  # (kv head, slot) rows

        def heads_major(buf: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # [kv_heads, p + e, dim], fp32
            cached = buf.reshape(-1, dim).index_select(0, at).view(kv_heads, p, dim)
            return torch.cat([cached, x[new].transpose(0, 1)], dim=1).float()

        keys, vals = heads_major(k_buf, k), heads_major(v_buf, v)
        qg = (q[new].float() * sm_scale).view(e, kv_heads, group, dim).permute(1, 2, 0, 3)
        s = torch.bmm(qg.reshape(kv_heads, group * e, dim), keys.transpose(1, 2)).view(kv_heads, group, e, p + e)
        s = cap_scores_ref(s, variant)
        q_pos = torch.arange(p, p + e, device=q.device)[:, None]
        k_pos = torch.arange(p + e, device=q.device)[None, :]
        s.masked_fill_((k_pos > q_pos) | (k_pos < first_key_ref(variant, q_pos)), float("-inf"))
        probs = softmax_ref(s, sinks)
        o = torch.bmm(probs.view(kv_heads, group * e, p + e), vals)  # [kv_heads, group*e, dim]
        out[new] = o.view(kv_heads, group, e, dim).permute(2, 0, 1, 3).reshape(e, heads, dim).to(q.dtype)
    return out
