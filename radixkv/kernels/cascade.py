"""cascade_decode: decode attention that reads KV shared by a group of requests once per group.

One query row per request (`q[r]`, all heads). A `CascadePlan` (cascade_plan.py) cuts each row's
keys into runs shared by groups of rows: a system prompt read by every row, a document read by some,
each row's own tail. For each level, `cascade_attention` computes every group's attention as one
matrix-matrix product per kv head, all its rows and their query heads against the group's KV:

    S[(row, head), n] = sm_scale * q[row, head] . k_buf[kv_indices[n], kvh],   head // group == kvh
    o = softmax(S) V, lse = logsumexp(S): one partial state per (entry, head)

then `merge_states` (merge.py) combines each row's partial states by their log-sum-exp.

Kernel (`_cascade_kernel`, grid `[groups, num_kv_heads, row blocks]`): a program takes BLOCK_R rows
of one group and the `group` query heads of one kv head (BLOCK_M = BLOCK_R * BLOCK_H query vectors),
streams the group's KV in blocks of BLOCK_N slots with an fp32 online softmax (tl.dot), and writes
normalized outputs and log-sum-exps. A window or chunks (the plan's positions, cascade_plan.py) mask
each vector's keys to `[first_key(q_pos), q_pos]`, and the program streams only the part of the run
that some of its vectors see: a run wholly before every window of its rows is not read at all.

Bytes moved per level, h kv heads, d head_dim, e element size, S_g slots of group g, B_g row blocks:
    read  sum_g B_g * (2 * S_g * h * d * e + 8 * S_g)   (KV once per group and row block; slots;
                                                          masked: S_g counts only the seen part)
    plus  entries * heads * d * (e + 4) (q, fp32 partials), and the merge (merge.py).
Flat decode reads 2 * h * d * e per position per request: a prefix shared by n rows costs n times that.
"""

from __future__ import annotations

import torch

from radixkv.kernels._common import KernelInputError, tl, triton, use_triton
from radixkv.kernels.cascade_plan import CascadeLevel, CascadePlan, check_cascade, check_level, check_qkv
from radixkv.kernels.cascade_ref import cascade_attention_ref, cascade_decode_ref, partial_states
from radixkv.kernels.merge import merge_states_kernel_launch
from radixkv.kernels.variant import CAUSAL, AttentionVariant, cap_scores, check_variant, first_key, online_step


@triton.jit
def _cascade_kernel(
    q_ptr, q_stride_r, q_stride_h,  # [rows, num_heads, head_dim]
    k_buf_ptr, v_buf_ptr, buf_stride_s, buf_stride_h,  # [num_slots, num_kv_heads, head_dim]
    qo_indptr_ptr, qo_indices_ptr,  # [groups + 1], [entries of the level]
    kv_indptr_ptr, kv_indices_ptr,  # [groups + 1], int64 [slots of the level]
    o_ptr,  # fp32 [entries of the plan, num_heads, head_dim], contiguous
    lse_ptr,  # fp32 [entries of the plan, num_heads], contiguous
    q_pos_ptr, kv_pos_ptr,  # int32 [rows], int32 [groups]: positions (read only when MASKED)
    entry_start, sm_scale, num_heads, head_dim, group, window, chunk, softcap,
    BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, MASKED: tl.constexpr, SOFTCAP: tl.constexpr,
):
    BLOCK_M: tl.constexpr = BLOCK_R * BLOCK_H
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16 and BLOCK_D >= 16)  # tl.dot's minimum
    tl.static_assert(BLOCK_M <= 128)  # the [BLOCK_M, BLOCK_D] q and accumulator tiles stay in registers
    g = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    first = tl.load(qo_indptr_ptr + g).to(tl.int64) + tl.program_id(2).to(tl.int64) * BLOCK_R
    e_end = tl.load(qo_indptr_ptr + g + 1).to(tl.int64)
    kv_lo = tl.load(kv_indptr_ptr + g).to(tl.int64)
    kv_hi = tl.load(kv_indptr_ptr + g + 1).to(tl.int64)

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    entry = first + offs_m // BLOCK_H  # query vector m: row (entry) m // BLOCK_H, head m % BLOCK_H
    head = kvh * group + offs_m % BLOCK_H
    mask_m = (entry < e_end) & (offs_m % BLOCK_H < group)
    mask_d = offs_d < head_dim
    row = tl.load(qo_indices_ptr + entry, mask=mask_m, other=0).to(tl.int64)
    q = tl.load(q_ptr + row[:, None] * q_stride_r + head[:, None] * q_stride_h + offs_d[None, :],
                mask=mask_m[:, None] & mask_d[None, :], other=0.0).to(tl.float32)  # [BLOCK_M, BLOCK_D]

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    kv_start, kv_bound = kv_lo, kv_hi
    kv_end = tl.where(first < e_end, kv_hi, kv_lo)  # a row block past the group's rows reads nothing
    if MASKED:  # vector m sees run offsets [seen_lo[m], seen_hi[m]]; stream only their union (int32: fewer registers)
        q_pos = tl.load(q_pos_ptr + row, mask=mask_m, other=0)  # int32 [BLOCK_M]
        pos0 = tl.load(kv_pos_ptr + g) - kv_lo.to(tl.int32)  # slot n holds position pos0 + n
        seen_lo = first_key(q_pos, window, chunk, MASKED) - pos0
        seen_hi = q_pos - pos0
        kv_start = tl.maximum(kv_lo, tl.min(tl.where(mask_m, seen_lo, kv_hi.to(tl.int32)), axis=0).to(tl.int64))
        kv_end = tl.minimum(kv_end, tl.max(tl.where(mask_m, seen_hi + 1, kv_lo.to(tl.int32)), axis=0).to(tl.int64))
        kv_bound = kv_end
    for n0 in range(kv_start, kv_end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < kv_bound
        # read 8 bytes of slot and 2 * d * e bytes of K, V per position, once for all BLOCK_M vectors
        slot = tl.load(kv_indices_ptr + offs_n, mask=mask_n, other=0).to(tl.int64)
        off = slot[:, None] * buf_stride_s + kvh * buf_stride_h + offs_d[None, :]
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(k_buf_ptr + off, mask=kv_mask, other=0.0).to(tl.float32)  # [BLOCK_N, BLOCK_D]
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # [BLOCK_M, BLOCK_N]
        if MASKED:
            n = offs_n.to(tl.int32)[None, :]
            seen = mask_n[None, :] & (n >= seen_lo[:, None]) & (n <= seen_hi[:, None])
            s = tl.where(seen, cap_scores(s, softcap, SOFTCAP), float("-inf"))
            m_new, alpha, p = online_step(s, m_i, l_i)  # a vector may see no key of a block
        else:
            s = tl.where(mask_n[None, :], cap_scores(s, softcap, SOFTCAP), float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
        v = tl.load(v_buf_ptr + off, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new

    has = l_i > 0.0  # false for a group without KV, or a vector that sees none of it
    lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    state = (entry_start + entry) * num_heads + head  # [BLOCK_M]
    tl.store(lse_ptr + state, lse, mask=mask_m)
    tl.store(o_ptr + state[:, None] * head_dim + offs_d[None, :], out, mask=mask_m[:, None] & mask_d[None, :])


# (BLOCK_D, BLOCK_M) -> (num_warps, BLOCK_N), found by compiling every combination for sm_80 and
# sm_90 (ptxas -v, bench/compile_check.py): the smallest spill-free choice. fp16/bf16 operands (tensor
# cores; 74-178 registers): a larger BLOCK_N or fewer warps spilled or sat at 255 registers. fp32
# operands ("ieee" products, no tensor cores): 64 rows at head_dim 64 or 32 rows at 128 spilled 4
# bytes on sm_80 whatever the warps; at 256, 8 warps spilled 8-12 bytes (ptxas kept 64 registers)
# and 4 warps with BLOCK_N 32 spilled hundreds. The largest BLOCK_M listed for a BLOCK_D is the
# most one program takes.
_CONFIGS = {(64, 16): (4, 32), (64, 32): (4, 16), (64, 64): (8, 32), (128, 16): (4, 16), (128, 32): (8, 32),
            (128, 64): (8, 32), (256, 16): (8, 16), (256, 32): (8, 16)}
_CONFIGS_FP32 = {(64, 16): (8, 32), (64, 32): (8, 32), (128, 16): (8, 32), (256, 16): (4, 16)}
# A window or chunks (MASKED) keep per-vector bounds and a [BLOCK_M, BLOCK_N] mask live: with the
# tables above, 32 x 256 (fp16) and 16 x 128 (fp32, 8 warps) spilled 4 bytes on sm_80, 32 x 128 4-12
# bytes, 32 x 64 fp32 4 bytes and 16 x 256 (8 warps) 8 bytes on sm_90. Masked launches take half
# the positions per step there, at most 16 rows at head_dim 256, with 4 warps.
_MASKED = {torch.float16: {**{k: v for k, v in _CONFIGS.items() if k != (256, 32)}, (128, 32): (8, 16),
                           (128, 64): (8, 16), (256, 16): (4, 16)},
           torch.float32: {**_CONFIGS_FP32, (64, 32): (8, 16), (128, 16): (8, 16)}}


def launch_config(max_rows: int, group: int, head_dim: int, dtype: torch.dtype,
                  masked: bool = False) -> dict[str, int]:
    """Block sizes, num_warps and num_stages `_cascade_kernel` runs with for a level whose groups
    have at most `max_rows` rows, on q and buffers of `dtype`, under a window or chunks when
    `masked` (bench/compile_check.py compiles them for sm_80/sm_90 and requires 0 spilled bytes).
    Same choice on every target."""
    half = dtype in (torch.float16, torch.bfloat16)
    table = _MASKED[torch.float16 if half else torch.float32] if masked else _CONFIGS if half else _CONFIGS_FP32
    block_h = triton.next_power_of_2(group)
    block_d = max(16, triton.next_power_of_2(head_dim))
    max_m = max(m for d, m in table if d == max(64, block_d))  # q and accumulator: BLOCK_M x BLOCK_D fp32
    block_r = max(16 // block_h, min(triton.next_power_of_2(max(1, max_rows)), max(1, max_m // block_h)))
    num_warps, block_n = table.get((max(64, block_d), block_r * block_h), (8, 16))
    return dict(BLOCK_R=block_r, BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_D=block_d,
                num_warps=num_warps, num_stages=2)


def _attend_launch(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, lvl: CascadeLevel,
                   sm_scale: float, o: torch.Tensor, lse: torch.Tensor, entry_start: int,
                   variant: AttentionVariant, q_pos: torch.Tensor | None) -> None:
    """One level's partial states into o, lse at `entry_start`; no checks, no host sync. A masked
    variant reads the positions (`q_pos`, `lvl.kv_pos`)."""
    groups, (heads, dim), kv_heads = lvl.qo_indptr.numel() - 1, q.shape[1:], k_buf.shape[1]
    if groups == 0 or lvl.qo_indices.numel() == 0:
        return
    cfg = launch_config(lvl.max_rows, heads // kv_heads, dim, q.dtype, variant.masked)
    grid = (groups, kv_heads, triton.cdiv(max(1, lvl.max_rows), cfg["BLOCK_R"]))
    masked = variant.masked
    _cascade_kernel[grid](
        q, q.stride(0), q.stride(1), k_buf, v_buf, k_buf.stride(0), k_buf.stride(1),
        lvl.qo_indptr, lvl.qo_indices, lvl.kv_indptr, lvl.kv_indices, o, lse,
        q_pos if masked else lvl.qo_indptr, lvl.kv_pos if masked else lvl.qo_indptr,
        entry_start, float(sm_scale), heads, dim, heads // kv_heads, variant.window, variant.chunk,
        float(variant.softcap),
        # fp16/bf16 values are exact in tf32; fp32 inputs need full-precision products
        PRECISION="tf32" if q.dtype in (torch.float16, torch.bfloat16) else "ieee", MASKED=masked,
        SOFTCAP=variant.softcap > 0, **cfg)


def cascade_attention(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, level: CascadeLevel,
                      sm_scale: float, softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial attention states of one level: each entry's row against its group's KV. Modifies nothing.

    Args:
        q: `[rows, num_heads, head_dim]`, the buffers' dtype (fp32/fp16/bf16/fp64).
        k_buf, v_buf: one layer's `[num_slots, num_kv_heads, head_dim]`; num_heads % num_kv_heads == 0.
        level: a CascadeLevel whose qo_indices lie in `[0, rows)` and kv_indices in `[0, num_slots)`.
        sm_scale: multiplies q . k before the softmax.
        softcap: logit soft-capping c > 0 (scores become c * tanh(s / c)); 0: none.

    Returns:
        `(o, lse)`: fp32 `[entries, num_heads, head_dim]` (normalized over the group's KV) and fp32
        `[entries, num_heads]` log-sum-exp of the scaled scores (-inf for a group without KV).
    """
    check_qkv(q, k_buf, v_buf)
    check_level("level", level, q.shape[0], k_buf.shape[0], q.device)
    check_variant(AttentionVariant(softcap=softcap), q.shape[1], q.device)
    if not use_triton(q):
        return cascade_attention_ref(q, k_buf, v_buf, level, sm_scale, softcap)
    o, lse = partial_states(level.qo_indices.numel(), q)
    _attend_launch(q, k_buf, v_buf, level, sm_scale, o, lse, 0, AttentionVariant(softcap=softcap), None)
    return o, lse


def cascade_decode_launch(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, plan: CascadePlan,
                          sm_scale: float, variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """`cascade_decode` without checks or host syncs, for the per-layer path of a plan that
    `cache.batch(..., cascade=True)` built (valid by construction, with positions)."""
    if not use_triton(q):
        return cascade_decode_ref(q, k_buf, v_buf, plan, sm_scale, variant)
    return cascade_launch(q, k_buf, v_buf, plan, sm_scale, variant)


def cascade_launch(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, plan: CascadePlan,
                   sm_scale: float, variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """Every level's `_cascade_kernel`, then `_merge_states_kernel` (what bench/compile_check.py compiles)."""
    o, lse = partial_states(plan.num_entries, q)
    start = 0
    for lvl in plan.levels:
        _attend_launch(q, k_buf, v_buf, lvl, sm_scale, o, lse, start, variant, plan.q_pos)
        start += lvl.qo_indices.numel()
    return merge_states_kernel_launch(o, lse, plan.merge_indptr, plan.merge_indices, plan.max_entries, q.dtype,
                                      variant.sinks)


def cascade_decode(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, plan: CascadePlan,
                   sm_scale: float, variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """Attention of each row's one query token over the KV runs its plan gives it (shared runs read
    once per group). Same result as `decode_attention` over each row's concatenated runs. Modifies nothing.

    Args:
        q: `[rows, num_heads, head_dim]`, the buffers' dtype (fp32/fp16/bf16/fp64).
        k_buf, v_buf: one layer's `[num_slots, num_kv_heads, head_dim]`; num_heads % num_kv_heads == 0.
        plan: a CascadePlan over `rows` query rows (from `cache.batch(seqs, cascade=True)` or built
            by hand); checked here (host syncs), never inside the kernels.
        sm_scale: multiplies q . k before the softmax.
        variant: window, chunks, soft-capping, sinks (variant.py). A window or chunks need the
            plan's positions (`plan.has_positions`): each row then sees the keys of its runs in
            `[first_key(q_pos), q_pos]`, and a program whose rows see none of its run reads nothing.

    Returns:
        `[rows, num_heads, head_dim]` in q's dtype (softmax and sums in fp32).
    """
    check_cascade(q, k_buf, v_buf, plan)
    check_variant(variant, q.shape[1], q.device)
    if variant.masked and not plan.has_positions:
        raise KernelInputError("a window or chunks need key and query positions: give the plan q_pos and "
                               "every level kv_pos (cache.batch(..., cascade=True) plans have them)")
    return cascade_decode_launch(q, k_buf, v_buf, plan, sm_scale, variant)
