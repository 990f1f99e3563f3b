"""store_kv: scatter new tokens' K and V into their slots, `k_buf[slots[i]] = k[i]` (and V alike).

Bytes moved for n tokens, h kv heads, dim d, element size e:
    read  2 * n * h * d * e (k, v) + 8 * n (slots);  write 2 * n * h * d * e (k_buf, v_buf rows).
Slots must be distinct: two stores to one slot race on a GPU. `store_kv` checks that (a host
sync); `store_kv_unchecked`, for the per-layer path, trusts `RadixCache.batch()`'s out_slots.
"""

from __future__ import annotations

import torch

from radixkv.kernels._common import (KernelInputError, check_kv_buffers, check_same_device,
                                     check_slots, check_tensor, tl, triton, use_triton)


@triton.jit
def _store_kv_kernel(
    k_buf_ptr, v_buf_ptr,  # [num_slots, num_kv_heads, head_dim]
    buf_stride_s, buf_stride_h,
    slots_ptr,  # int64 [n]
    k_ptr, v_ptr,  # [n, num_kv_heads, head_dim]
    src_stride_t, src_stride_h,
    num_heads, head_dim,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64)  # one token per program
    slot = tl.load(slots_ptr + i).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h[:, None] < num_heads) & (offs_d[None, :] < head_dim)
    src = i * src_stride_t + offs_h[:, None] * src_stride_h + offs_d[None, :]
    dst = slot * buf_stride_s + offs_h[:, None] * buf_stride_h + offs_d[None, :]
    # read h * d elements of k and of v; write as many into the two buffers
    tl.store(k_buf_ptr + dst, tl.load(k_ptr + src, mask=mask), mask=mask)
    tl.store(v_buf_ptr + dst, tl.load(v_ptr + src, mask=mask), mask=mask)


def _check_store(k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor) -> None:
    check_kv_buffers(k_buf, v_buf)
    check_same_device(k_buf=k_buf, v_buf=v_buf, slots=slots, k=k, v=v)
    for name, t in (("k", k), ("v", v)):
        check_tensor(name, t, 3, (k_buf.dtype,))
        if t.shape != (slots.numel(), *k_buf.shape[1:]):
            raise KernelInputError(f"{name} is {tuple(t.shape)}; expected "
                                   f"{(slots.numel(), *k_buf.shape[1:])} (one row per slot)")
    check_slots("slots", slots, k_buf.shape[0], distinct=True)


def store_kv(k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> None:
    """Write `k[i]`, `v[i]` into slot `slots[i]` of one layer's buffers, in place.

    Args:
        k_buf, v_buf: `[num_slots, num_kv_heads, head_dim]`, fp32/fp16/bf16/fp64; mutated.
        slots: int64 `[n]`, distinct, each in `[0, num_slots)`.
        k, v: `[n, num_kv_heads, head_dim]`, the buffers' dtype, unit stride on the last dim.

    Raises InvalidSlotsError / KernelInputError before writing anything.
    """
    _check_store(k_buf, v_buf, slots, k, v)
    return store_kv_unchecked(k_buf, v_buf, slots, k, v)


def store_kv_unchecked(k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                       k: torch.Tensor, v: torch.Tensor) -> None:
    """`store_kv` without checks or host sync: the arguments must satisfy its contract."""
    if not use_triton(k_buf):
        return store_kv_ref(k_buf, v_buf, slots, k, v)
    return store_kv_launch(k_buf, v_buf, slots, k, v)


def store_kv_launch(k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                     k: torch.Tensor, v: torch.Tensor) -> None:
    """The launch alone, no checks (bench/kernels.py times it)."""
    n, heads, dim = k.shape
    if n == 0:
        return None
    _store_kv_kernel[(n,)](
        k_buf, v_buf, k_buf.stride(0), k_buf.stride(1), slots, k, v, k.stride(0), k.stride(1),
        heads, dim, BLOCK_H=triton.next_power_of_2(heads), BLOCK_D=triton.next_power_of_2(dim))
    return None


def store_kv_ref(k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor) -> None:
    """Torch reference of `store_kv` (same arguments, same effect; no checks)."""
    k_buf.index_copy_(0, slots, k)
    v_buf.index_copy_(0, slots, v)
