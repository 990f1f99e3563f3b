"""KV-cache sizing: bytes per token and per request, and how many requests fit in GPU memory.

    bytes/token (MHA, GQA) = 2 (K and V) * layers * kv_heads_per_rank * head_dim * dtype bytes
    bytes/token (MLA)      = layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes
                             (DeepSeek's compressed latent plus the decoupled RoPE key; no V)

Tensor parallelism follows vLLM: the degree tp must divide the attention heads; each rank holds
kv_heads / tp KV heads, and when tp exceeds the KV heads (tp must then be a multiple of them)
each rank holds one, so every KV head is replicated tp / kv_heads times. The MLA latent is
replicated on every rank. Weights per rank = parameters * weight dtype bytes / tp. Memory for KV
= GPU memory * utilization - weights; when the weights alone exceed it nothing fits, and
`min_tensor_parallel` says which degree would leave room. Paging allocates ceil(context / page)
pages per request; max-length pre-allocation reserves `max_len` tokens per request whatever its
length. Model shapes and presets are in radixkv.model_spec.

Windowed layers (sliding window or chunked attention, `ModelSpec.window_layers` of `window` tokens):
a running request needs only the last `window` tokens of their KV, which spans at most
`ceil((window - 1) / page) + 1` pages (vLLM's hybrid allocator keeps exactly these), so paged
sizing counts `min(ceil(context / page), that)` pages for them; full layers keep every page.
radixkv's Engine reaches this column for sliding-window layers: they keep their KV in a pool of
their own and a running request holds only the pages its window spans (radixkv/cache_windows.py;
measured in bench/RESULTS.md), and for chunked layers (Llama 4) as a window of W = chunk, up to
chunk - 1 tokens where a chunk's own KV averages half that. `Sizing.window_ratio`
says how far below full storage it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from radixkv.errors import InvalidArgumentError
from radixkv.model_spec import PRESETS, ModelSpec, from_hf_config, get_model

# Bytes per element, under our short names and vLLM's (`--dtype`, `--kv-cache-dtype`). fp8 and
# int4 weights stand for quantized checkpoints (bytes per parameter).
DTYPE_BYTES = {"float32": 4.0, "fp32": 4.0, "float": 4.0, "float16": 2.0, "fp16": 2.0, "half": 2.0,
               "bfloat16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "int4": 0.5}
GIB = 1 << 30


def tp_error(model: ModelSpec, tp: int) -> str | None:
    """Why vLLM would refuse tensor parallelism of degree `tp` for `model`; None when it is fine."""
    if tp < 1:
        return f"tensor parallel size must be >= 1, got {tp}"
    if model.num_heads % tp:
        return f"tp {tp} does not divide the {model.num_heads} attention heads of {model.name}"
    kv = model.num_kv_heads
    if not model.is_mla and (kv % tp if tp < kv else tp % kv):
        return f"tp {tp} and the {kv} KV heads of {model.name}: one must be a multiple of the other"
    return None


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads each rank stores (0 for MLA, whose latent has no heads); raises if vLLM would refuse `tp`."""
    if (err := tp_error(model, tp)) is not None:
        raise InvalidArgumentError(err)
    return 0 if model.is_mla else max(1, model.num_kv_heads // tp)


def bytes_per_token(model: ModelSpec, dtype: str = "bf16", tp: int = 1) -> float:
    """KV bytes one token occupies on one tensor-parallel rank."""
    b = dtype_bytes(dtype)
    if model.is_mla:
        kv_heads_per_rank(model, tp)  # validates tp
        return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * b
    return 2 * model.num_layers * kv_heads_per_rank(model, tp) * model.head_dim * b


def dtype_bytes(dtype: str) -> float:
    if dtype not in DTYPE_BYTES:
        raise InvalidArgumentError(f"unknown dtype {dtype!r}: one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Sizing:
    bytes_per_token: float  # per rank, every layer
    bytes_per_request: float  # paged: ceil(context / page) pages (window-capped for windowed layers)
    bytes_per_request_prealloc: float  # max_len tokens reserved
    weight_bytes: float  # per rank
    usable_bytes: float  # per rank: GPU memory * utilization
    fit_paged: int  # concurrent requests of `context` tokens with paging
    fit_prealloc: int  # with max-length pre-allocation
    bytes_per_request_full: float = 0.0  # paged, every layer keeping every page (= bytes_per_request without windows)

    @property
    def window_ratio(self) -> float:
        """KV per request with windowed layers capped, over keeping all of it (1.0 without windows)."""
        return self.bytes_per_request / self.bytes_per_request_full if self.bytes_per_request_full else 1.0

    @property
    def kv_budget_bytes(self) -> float:
        """Per rank, for KV: usable memory minus weights; 0 when the weights do not fit."""
        return max(0.0, self.usable_bytes - self.weight_bytes)

    @property
    def weights_fit(self) -> bool:
        return self.weight_bytes < self.usable_bytes


def size(model: ModelSpec, *, context: int, gpu_gib: float, dtype: str = "bf16",
         weight_dtype: str = "bf16", tp: int = 1, page_size: int = 16, max_len: int | None = None,
         util: float = 0.9) -> Sizing:
    """Sizing of `model` serving requests of `context` tokens on GPUs of `gpu_gib` GiB each.

    Raises InvalidArgumentError for a tensor-parallel degree vLLM would refuse, an unknown dtype,
    or a non-positive size."""
    for name, value in (("context", context), ("gpu_gib", gpu_gib), ("page_size", page_size)):
        if not value > 0:
            raise InvalidArgumentError(f"{name} must be > 0, got {value}")
    if not 0 < util <= 1:
        raise InvalidArgumentError(f"util (GPU memory utilization) must lie in (0, 1], got {util}")
    bpt = bytes_per_token(model, dtype, tp)
    max_len = max_len or model.max_position
    full_per_req = math.ceil(context / page_size) * page_size * bpt
    per_req = full_per_req * window_ratio(model, context, page_size)
    per_req_max = max_len * bpt
    weights = model.num_params * dtype_bytes(weight_dtype) / tp
    usable = gpu_gib * GIB * util
    budget = max(0.0, usable - weights)
    return Sizing(bpt, per_req, per_req_max, weights, usable, int(budget // per_req), int(budget // per_req_max),
                  full_per_req)


def window_ratio(model: ModelSpec, context: int, page_size: int) -> float:
    """Paged KV of one request of `context` tokens with windowed layers capped at their window's
    pages, over every layer keeping all `ceil(context / page_size)` pages."""
    pages = math.ceil(context / page_size)
    if not model.window_layers:
        return 1.0
    window_pages = min(pages, math.ceil((model.window - 1) / page_size) + 1)
    full_layers = model.num_layers - model.window_layers
    return (full_layers * pages + model.window_layers * window_pages) / (model.num_layers * pages)


def min_tensor_parallel(model: ModelSpec, *, gpu_gib: float, weight_dtype: str = "bf16", util: float = 0.9,
                        limit: int = 1024) -> int | None:
    """The smallest tp vLLM accepts at which the weights leave room for KV on each rank (None: none up to `limit`)."""
    usable = gpu_gib * GIB * util
    weights = model.num_params * dtype_bytes(weight_dtype)
    return next((tp for tp in range(1, limit + 1) if tp_error(model, tp) is None and weights / tp < usable), None)


def with_tp_note(model: ModelSpec, tp: int) -> str:
    """The KV layout per rank in words, e.g. "8 KV heads / tp 16: 1 per rank (each replicated 2x)"."""
    if model.is_mla:
        return "MLA latent" + (f" (replicated on all {tp} ranks)" if tp > 1 else "")
    kv = model.num_kv_heads
    if tp == 1:
        return f"{kv} KV heads"
    per = kv_heads_per_rank(model, tp)
    return f"{kv} KV heads / tp {tp}: {per} per rank" + (f" (each replicated {tp // kv}x)" if tp > kv else "")


__all__ = ["ModelSpec", "PRESETS", "DTYPE_BYTES", "Sizing", "bytes_per_token", "size", "window_ratio", "get_model",
           "from_hf_config", "with_tp_note", "tp_error", "kv_heads_per_rank", "min_tensor_parallel"]
