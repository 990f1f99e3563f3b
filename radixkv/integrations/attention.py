"""The "radixkv" attention function for transformers' `AttentionInterface` (see transformers.py for
why this mechanism): stores each layer's new K/V through their slots and attends over
`req_to_token` with `radixkv.kernels`. Registered on import.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers import AttentionInterface

from radixkv import RadixCache, kernels

if TYPE_CHECKING:
    from radixkv import BatchInputs

ATTN_IMPLEMENTATION = "radixkv"


@dataclass
class ForwardBatch:
    """What the attention function needs for one forward; passed as `model(..., radixkv_batch=...)`."""
    cache: RadixCache
    inputs: BatchInputs  # from cache.batch(): rows, prefix_lens, extend_lens, seq_lens, out_slots, cascade
    num_decode: int  # the first num_decode requests extend by exactly one token: decode_attention
    attention_s: float = 0.0  # seconds inside radixkv_attention, all layers (the two below included)
    decode_s: float = 0.0  # of which in decode_attention (or cascade decode, when inputs.cascade is set)
    extend_s: float = 0.0  # of which in extend_attention


def radixkv_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                      radixkv_batch: ForwardBatch | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function over the radixkv pool. Writes this layer's new K/V to the pool.

    Args:
        module: the model's attention module (`module.layer_idx` picks the layer's KV buffers).
        query: `[1, num_heads, T, head_dim]`, T = sum(extend_lens), post-RoPE, in batch order.
        key, value: `[1, num_kv_heads, T, head_dim]`, post-RoPE K and V of the same T tokens.
        attention_mask: ignored (None: no mask is built for this implementation).
        scaling: softmax scale. dropout: must be 0 (inference only).
        radixkv_batch: the step's ForwardBatch.
    Returns:
        (`[1, T, num_heads, head_dim]` attention output, None).
    """
    if radixkv_batch is None:
        raise RuntimeError("the radixkv attention runs only inside radixkv Engine.generate()")
    if dropout:
        raise ValueError("radixkv attention is inference only: put the model in eval() mode")
    start = time.perf_counter()
    b, pool = radixkv_batch.inputs, radixkv_batch.cache.kv_pool
    layer = module.layer_idx
    k_buf, v_buf = pool.k_buffer[layer], pool.v_buffer[layer]
    q = query[0].transpose(0, 1).contiguous()  # [T, H, D]
    k = key[0].transpose(0, 1).contiguous().to(k_buf.dtype)  # [T, Hkv, D]
    v = value[0].transpose(0, 1).contiguous().to(v_buf.dtype)
    kernels.store_kv(k_buf, v_buf, b.out_slots, k, v)  # before decode_attention, which reads it back
    req_to_token = radixkv_batch.cache.req_pool.req_to_token
    d = radixkv_batch.num_decode  # packed layout: [d decode tokens | prefill chunks]
    parts = []
    t0 = time.perf_counter()
    if d and b.cascade is not None:  # the plan covers exactly the d leading decode rows; built valid
        parts.append(kernels.cascade_decode_launch(q[:d], k_buf, v_buf, b.cascade, scaling))
    elif d:
        parts.append(kernels.decode_attention(q[:d], k_buf, v_buf, req_to_token, b.rows[:d], b.seq_lens[:d],
                                              scaling))
    t1 = time.perf_counter()
    if d < len(b.rows):
        parts.append(kernels.extend_attention(q[d:], k[d:], v[d:], k_buf, v_buf, req_to_token, b.rows[d:],
                                              b.prefix_lens[d:], b.extend_lens[d:], scaling))
    t2 = time.perf_counter()
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    radixkv_batch.decode_s += t1 - t0
    radixkv_batch.extend_s += t2 - t1
    radixkv_batch.attention_s += time.perf_counter() - start
    return out.to(query.dtype).unsqueeze(0), None


AttentionInterface.register(ATTN_IMPLEMENTATION, radixkv_attention)
