"""Dispatch and input checks shared by every kernel launcher.

`use_triton(*tensors)` decides, at call time, between an op's Triton kernel and its torch
reference: Triton when a tensor is on CUDA or `TRITON_INTERPRET=1` is set *now* (tests unset it
to force the reference). The interpreter itself is chosen when a kernel is *defined*, so
`TRITON_INTERPRET=1` must be set before `radixkv.kernels` is imported (tests/conftest.py does).

Triton is optional (Linux only): without it, `triton.jit` below is a no-op stand-in, kernels are
never launched, and every op runs its reference.

The checks run before any launch because an out-of-bounds load inside a kernel is not an
exception but a crash (or silent garbage on a GPU). Range checks cost host syncs, so only the
checked launchers (`store_kv`, `decode_attention`, ...) run them; the per-layer path calls the
`*_unchecked` launchers on a batch that `RadixCache.batch()` validated once.

`Target` names what a launch compiles for: a CUDA compute capability `(major, minor)`, or None for
the interpreter. Each attention op picks its block sizes, warps and stages from
`(head_dim, group, dtype, target)` in one function (`decode_config`, `extend_config`), which
`bench/compile_check.py` calls too, so the configuration it compiles is the one that runs.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
from typing import Callable

import torch

from radixkv.errors import ContextLengthError, InvalidSlotsError, KernelInputError

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    HAS_TRITON = False

    class _NoTriton:
        """Stands in for `triton` so kernel modules import; their kernels are never called."""

        @staticmethod
        def jit(fn: Callable | None = None, **options: object) -> Callable:
            """`@triton.jit` and `@triton.jit(...)` alike: the function itself, never compiled."""
            return fn if fn is not None else (lambda f: f)

    triton = _NoTriton()  # type: ignore[assignment]
    tl = None  # type: ignore[assignment]

__all__ = ["KernelInputError", "use_triton", "triton", "tl", "HAS_TRITON"]

Target = tuple[int, int] | None  # CUDA compute capability; None: the Triton interpreter
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)  # attention math: fp32
INDEX_DTYPES = (torch.int32, torch.int64)


def use_triton(*tensors: torch.Tensor) -> bool:
    """True: launch the Triton kernel. False: run the torch reference. Reads the env var per call."""
    if not HAS_TRITON:
        return False
    return os.environ.get("TRITON_INTERPRET") == "1" or any(t.is_cuda for t in tensors)


def target_of(t: torch.Tensor) -> Target:
    """The compute capability a launch on `t`'s device compiles for (None: interpreter). No sync."""
    return _capability(t.device.index) if t.is_cuda else None


@functools.lru_cache(maxsize=None)
def _capability(index: int | None) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def dot_dtype(dtype: torch.dtype, target: Target):  # -> tl.dtype
    """Operand type of `tl.dot`: fp16/bf16 as stored (products accumulate in fp32); fp32 and fp64
    as fp32 with "ieee" precision. The interpreter multiplies bf16 as its raw uint16 bits, so there
    bf16 operands go through fp32 (kernels round p to bf16 first, as the GPU path does)."""
    if dtype == torch.float16:
        return tl.float16
    if dtype == torch.bfloat16 and target is not None:
        return tl.bfloat16
    return tl.float32


def check_same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise KernelInputError(f"tensors on different devices: {devices}")


def check_tensor(name: str, t: torch.Tensor, ndim: int, dtypes: tuple[torch.dtype, ...]) -> None:
    """Rank and dtype of one argument; the last dim must be unit-stride (kernels assume it)."""
    if not isinstance(t, torch.Tensor):
        raise KernelInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise KernelInputError(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise KernelInputError(f"{name} has dtype {t.dtype}; expected one of {list(dtypes)}")
    if ndim > 1 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise KernelInputError(f"{name} needs a unit stride on its last dim, got strides {t.stride()}")


def check_kv_buffers(k_buf: torch.Tensor, v_buf: torch.Tensor) -> None:
    """k_buf, v_buf: `[num_slots, num_kv_heads, head_dim]`, same shape and float dtype."""
    check_tensor("k_buf", k_buf, 3, FLOAT_DTYPES)
    check_tensor("v_buf", v_buf, 3, FLOAT_DTYPES)
    if k_buf.shape != v_buf.shape or k_buf.dtype != v_buf.dtype:
        raise KernelInputError(f"k_buf {tuple(k_buf.shape)} {k_buf.dtype} and v_buf "
                               f"{tuple(v_buf.shape)} {v_buf.dtype} differ")


def check_like(name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        raise KernelInputError(f"{name} is {tuple(t.shape)} {t.dtype}; expected {tuple(shape)} {dtype}")


def _min_max(t: torch.Tensor) -> tuple[int, int]:
    lo, hi = torch.stack([t.min(), t.max()]).tolist()  # one host sync
    return int(lo), int(hi)


def check_slots(name: str, slots: torch.Tensor, num_slots: int, distinct: bool = False) -> None:
    """slots: int64 `[n]`, every value in `[0, num_slots)`; `distinct` for writes (stores)."""
    check_tensor(name, slots, 1, (torch.int64,))
    if slots.numel() == 0:
        return
    lo, hi = _min_max(slots)
    if lo < 0 or hi >= num_slots:
        raise InvalidSlotsError(f"{name} holds values in [{lo}, {hi}]; the pool has slots "
                                f"[0, {num_slots}). Pass slots from the cache's allocator")
    if distinct and torch.unique(slots).numel() != slots.numel():
        raise InvalidSlotsError(f"{name} holds duplicate slots; a store to one slot twice is a race")


def check_rows(rows: torch.Tensor, max_requests: int) -> int:
    """rows: int32/int64 `[batch]`, each in `[0, max_requests)`. Returns batch."""
    check_tensor("rows", rows, 1, INDEX_DTYPES)
    if rows.numel():
        lo, hi = _min_max(rows)
        if lo < 0 or hi >= max_requests:
            raise KernelInputError(f"rows hold values in [{lo}, {hi}], outside req_to_token's "
                                   f"[0, {max_requests})")
    return rows.numel()


def check_lens(name: str, lens: torch.Tensor, batch: int, lo: int, hi: int) -> int:
    """lens: int32/int64 `[batch]`, each in `[lo, hi]`. Returns the largest (0 if empty)."""
    check_tensor(name, lens, 1, INDEX_DTYPES)
    if lens.numel() != batch:
        raise KernelInputError(f"{name} has {lens.numel()} entries for a batch of {batch}")
    if batch == 0:
        return 0
    lmin, lmax = _min_max(lens)
    if lmin < lo:
        raise KernelInputError(f"{name} has a value {lmin} below {lo}")
    if lmax > hi:
        raise ContextLengthError(f"{name} has a value {lmax} above the limit {hi} "
                                 "(req_to_token's max_context_len or the pool)")
    return lmax


def check_table_slots(req_to_token: torch.Tensor, rows: torch.Tensor, lens: torch.Tensor,
                      num_slots: int) -> None:
    """Every slot a kernel will read, `req_to_token[rows[b], :lens[b]]`, lies in `[0, num_slots)`.
    Reads 4 bytes per token, against the kernel's 2 * heads * dim * element size."""
    width = int(lens.max().item()) if rows.numel() else 0
    if width == 0:
        return
    table = req_to_token[rows.long(), :width]  # [batch, width]
    used = torch.arange(width, device=rows.device)[None, :] < lens[:, None]
    bad = used & ((table < 0) | (table >= num_slots))
    if bool(bad.any()):
        b, p = (int(x) for x in bad.nonzero()[0].tolist())
        raise InvalidSlotsError(
            f"req_to_token[{int(rows[b])}, {p}] = {int(table[b, p])} is outside the pool's "
            f"[0, {num_slots}); the row was not written for these lengths")


def exclusive_cumsum(lens: torch.Tensor) -> torch.Tensor:
    """int64 `[batch + 1]`: `[0, lens[0], lens[0] + lens[1], ...]` (CSR indptr)."""
    out = torch.zeros(lens.numel() + 1, dtype=torch.int64, device=lens.device)
    torch.cumsum(lens, 0, out=out[1:])
    return out


def check_scale(sm_scale: float) -> None:
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real) or not math.isfinite(sm_scale):
        raise KernelInputError(f"sm_scale must be a finite number, got {sm_scale!r}")


def check_attention(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                    req_to_token: torch.Tensor, rows: torch.Tensor, sm_scale: float) -> tuple[int, int]:
    """q `[tokens, num_heads, head_dim]` against one layer's buffers and the table. Returns
    (batch, group) where group = num_heads // num_kv_heads query heads share a kv head."""
    check_kv_buffers(k_buf, v_buf)
    check_tensor("q", q, 3, (k_buf.dtype,))
    check_tensor("req_to_token", req_to_token, 2, (torch.int32,))
    check_same_device(q=q, k_buf=k_buf, v_buf=v_buf, req_to_token=req_to_token, rows=rows)
    check_scale(sm_scale)
    heads, dim = q.shape[1:]
    kv_heads = k_buf.shape[1]
    if min(heads, dim, kv_heads) < 1 or dim != k_buf.shape[2] or heads % kv_heads != 0:
        raise KernelInputError(f"q has {heads} heads of dim {dim}; the buffers {kv_heads} heads of dim "
                               f"{k_buf.shape[2]}: need equal dims >= 1 and num_heads % num_kv_heads == 0")
    return check_rows(rows, req_to_token.shape[0]), heads // kv_heads
