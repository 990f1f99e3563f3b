"""gather_kv: read the rows of some slots into a contiguous tensor, `out[i] = buf[slots[i]]`.

Bytes moved for n tokens, h kv heads, dim d, element size e:
    read  n * h * d * e (buf rows) + 8 * n (slots);  write n * h * d * e (out).
Slots may repeat (reads do not race).
"""

from __future__ import annotations

import torch

from radixkv.kernels._common import (FLOAT_DTYPES, check_same_device, check_slots, check_tensor,
                                     tl, triton, use_triton)


@triton.jit
def _gather_kv_kernel(
    buf_ptr,  # [num_slots, num_kv_heads, head_dim]
    buf_stride_s, buf_stride_h,
    slots_ptr,  # int64 [n]
    out_ptr,  # [n, num_kv_heads, head_dim], contiguous
    num_heads, head_dim,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64)  # one token per program
    slot = tl.load(slots_ptr + i).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h[:, None] < num_heads) & (offs_d[None, :] < head_dim)
    src = slot * buf_stride_s + offs_h[:, None] * buf_stride_h + offs_d[None, :]
    dst = i * num_heads * head_dim + offs_h[:, None] * head_dim + offs_d[None, :]
    # read h * d elements of one slot; write h * d elements of out
    tl.store(out_ptr + dst, tl.load(buf_ptr + src, mask=mask), mask=mask)


def gather_kv(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Copy the rows of `slots` out of one layer's K (or V) buffer. Does not modify `buf`.

    Args:
        buf: `[num_slots, num_kv_heads, head_dim]`, fp32/fp16/bf16/fp64, unit stride on the last dim.
        slots: int64 `[n]`, each in `[0, num_slots)`; repeats allowed.

    Returns:
        `[n, num_kv_heads, head_dim]`, contiguous, `buf`'s dtype.
    """
    check_tensor("buf", buf, 3, FLOAT_DTYPES)
    check_same_device(buf=buf, slots=slots)
    check_slots("slots", slots, buf.shape[0])
    return gather_kv_unchecked(buf, slots)


def gather_kv_unchecked(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """`gather_kv` without checks or host sync: the arguments must satisfy its contract."""
    if not use_triton(buf):
        return gather_kv_ref(buf, slots)
    return gather_kv_launch(buf, slots)


def gather_kv_launch(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The launch alone, no checks (bench/kernels.py times it)."""
    n, (_, heads, dim) = slots.numel(), buf.shape
    out = torch.empty((n, heads, dim), dtype=buf.dtype, device=buf.device)
    if n:
        _gather_kv_kernel[(n,)](
            buf, buf.stride(0), buf.stride(1), slots, out, heads, dim,
            BLOCK_H=triton.next_power_of_2(heads), BLOCK_D=triton.next_power_of_2(dim))
    return out


def gather_kv_ref(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Torch reference of `gather_kv` (same arguments, same result; no checks)."""
    return buf.index_select(0, slots).contiguous()
