"""The "radixkv" attention function for transformers' `AttentionInterface` (see packed_forward.py for
why this mechanism): stores each layer's new K/V through their slots and attends over
`req_to_token` with `radixkv.kernels`. Registered on import.

Validate once per step, nothing per layer: `cache.batch()` checked the step's inputs (rows in
range, out_slots distinct and in the pool, req_to_token written for `[0, seq_len)`), and
`ForwardBatch` reads the host-side lengths the kernels size their grids with once, in one
device->host copy. Each layer then runs only the `*_unchecked` launchers, which neither validate
nor synchronise (tests/test_sync_free.py counts: the same syncs for 2 and 8 layers).

Layer variants: a sliding or chunked layer's window / chunk comes from the model's layer groups
(layer_groups.py, `ForwardBatch.layer_masks`); soft-capping and sinks from what the model passes
(`softcap=`, Gemma 2; `s_aux=`, gpt-oss's per-head sink logits). A `sliding_window=` the model
passes must agree with the layer's group, else UnsupportedModelError (never a silent wrong mask).
In a cascade step every layer decodes with `cascade_decode`, masked ones included: ForwardBatch
derives each layer's plan once per step (`radixkv.cascade.for_layer`: a sliding or chunked layer's
runs cut to the keys its rows see off CUDA, a window group's layers reading their own pool's slots),
and the kernel masks each row's keys to its window or chunk from the plan's positions.

Window groups (CacheConfig.groups, cache_windows.py): the layers of a sliding-window group keep
their K/V in the group's own, smaller pool. ForwardBatch asks the group once per step for the
step's rows of req_to_token translated to window slots (`window_inputs`) and the window out_slots;
those layers run the same kernels over their own buffers with that table (rows 0..batch-1), and
read the cascade plan's slots through the group's `full_to_window` (flushed by `window_inputs`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from transformers import AttentionInterface

from radixkv import RadixCache, UnsupportedModelError, kernels
from radixkv.cascade import for_layer
from radixkv.config import KV_GROUP_KINDS
from radixkv.kernels import AttentionVariant, CascadePlan

if TYPE_CHECKING:
    from radixkv import BatchInputs

ATTN_IMPLEMENTATION = "radixkv"


class LayerInputs(NamedTuple):
    """What one layer's kernels read: full KV (the step's BatchInputs) or a window group's translation."""

    req_to_token: torch.Tensor  # int32 [rows, positions] -> slot of this layer's pool
    out_slots: torch.Tensor  # int64 [T]: where the new K/V go in this layer's pool
    decode_inputs: tuple[torch.Tensor, torch.Tensor]  # rows, seq_lens [num_decode]
    extend_inputs: tuple[torch.Tensor, ...]  # rows, prefix_lens, extend_lens of the rest
    extend_host: kernels.ExtendLens  # the same three on the host


@dataclass
class ForwardBatch:
    """What the attention function needs for one forward; passed as `model(..., radixkv_batch=...)`.
    Construction reads the batch's lengths to the host: the step's one sync for attention."""
    cache: RadixCache
    inputs: BatchInputs  # from cache.batch(): rows, prefix_lens, extend_lens, seq_lens, out_slots, cascade
    num_decode: int  # the first num_decode requests extend by exactly one token: decode_attention
    layer_masks: tuple[tuple[int, int], ...] = ()  # (window, chunk) per layer (layer_groups.layer_masks); () all full
    attention_s: float = 0.0  # seconds inside radixkv_attention, all layers (the two below included)
    decode_s: float = 0.0  # of which in decode_attention (or cascade decode, when inputs.cascade is set)
    extend_s: float = 0.0  # of which in extend_attention
    cascade_calls: int = 0  # layer calls that decoded with cascade_decode
    masked_cascade_calls: int = 0  # of which sliding or chunked layers
    # Per-step views and host lengths, derived once in __post_init__ and reused by every layer.
    decode_inputs: tuple[torch.Tensor, torch.Tensor] = field(init=False)  # rows, seq_lens [num_decode]
    max_decode_len: int = field(init=False)  # longest seq_len among the decode requests (0: none)
    extend_inputs: tuple[torch.Tensor, ...] = field(init=False)  # rows, prefix_lens, extend_lens of the rest
    extend_host: kernels.ExtendLens = field(init=False)  # the same three on the host
    full: LayerInputs = field(init=False)  # full-KV layers' inputs
    windowed: dict[int, LayerInputs] = field(init=False)  # layer -> its window group's inputs
    cascades: dict[int, CascadePlan] = field(init=False)  # layer -> its cascade plan (none: flat decode)

    def __post_init__(self) -> None:
        b, d = self.inputs, self.num_decode
        host = kernels.ExtendLens.read(b.rows, b.prefix_lens, b.extend_lens)  # one device->host copy
        self.decode_inputs = (b.rows[:d], b.seq_lens[:d])
        self.max_decode_len = max((p + e for p, e in zip(host.prefix_lens[:d], host.extend_lens[:d])), default=0)
        self.extend_inputs = (b.rows[d:], b.prefix_lens[d:], b.extend_lens[d:])
        ext = host.extend_lens[d:]
        self.extend_host = kernels.ExtendLens(host.rows[d:], host.prefix_lens[d:], ext, max(ext, default=0))
        table = self.cache.req_pool.req_to_token
        self.full = LayerInputs(table, b.out_slots, self.decode_inputs, self.extend_inputs, self.extend_host)
        self.windowed, slot_maps = {}, {}
        longest = max((p + e for p, e in zip(host.prefix_lens, host.extend_lens)), default=0)
        for group in self.cache.groups:
            if group.spec.kind in KV_GROUP_KINDS:
                view = self._window_view(group.window_inputs(b, table, longest))  # flushes full_to_window
                self.windowed.update(dict.fromkeys(group.spec.layers, view))
                slot_maps.update(dict.fromkeys(group.spec.layers, group.full_to_window))
        self.cascades = self._layer_plans(slot_maps) if b.cascade is not None and d else {}

    def _layer_plans(self, slot_maps: dict[int, torch.Tensor]) -> dict[int, CascadePlan]:
        """Each layer's view of the step's cascade plan (one per distinct mask and pool)."""
        plans: dict[tuple[int, int, int], CascadePlan] = {}
        out = {}
        for layer in range(self.cache.config.num_layers):
            window, chunk = self.layer_masks[layer] if self.layer_masks else (0, 0)
            slot_map = slot_maps.get(layer)
            key = (window, chunk, -1 if slot_map is None else id(slot_map))
            if key not in plans:
                assert self.inputs.cascade is not None
                plans[key] = for_layer(self.inputs.cascade, AttentionVariant(window, chunk), slot_map)
            out[layer] = plans[key]
        return out

    def _window_view(self, w: Any) -> LayerInputs:
        b, d, host = self.inputs, self.num_decode, self.extend_host
        lens = kernels.ExtendLens(list(range(d, d + len(host.rows))), host.prefix_lens, host.extend_lens,
                                  host.max_extend_len)
        return LayerInputs(w.req_to_token, w.out_slots, (w.rows[:d], b.seq_lens[:d]),
                           (w.rows[d:], b.prefix_lens[d:], b.extend_lens[d:]), lens)


def radixkv_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                      radixkv_batch: ForwardBatch | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function over the radixkv pool. Writes this layer's new K/V to the pool.
    Runs only unchecked launchers: no validation and no device->host sync (see the module docstring).

    Args:
        module: the model's attention module (`module.layer_idx` picks the layer's KV buffers).
        query: `[1, num_heads, T, head_dim]`, T = sum(extend_lens), post-RoPE, in batch order; or
            `[B, num_heads, 1, head_dim]`, one token of each of B requests (recurrent models' decode).
        key, value: `[1 or B, num_kv_heads, T or 1, head_dim]`, post-RoPE K and V of the same tokens.
        attention_mask: ignored (None: no mask is built for this implementation).
        scaling: softmax scale. dropout: must be 0 (inference only).
        radixkv_batch: the step's ForwardBatch.
    Returns:
        (`[1, T, num_heads, head_dim]` (or `[B, 1, ...]`) attention output, None).
    """
    fb = radixkv_batch
    if fb is None:
        raise RuntimeError("the radixkv attention runs only inside radixkv Engine.generate()")
    if dropout:
        raise ValueError("radixkv attention is inference only: put the model in eval() mode")
    start = time.perf_counter()
    variant = _variant(fb, module.layer_idx, kwargs)
    pool, li = fb.cache.kv_pool, fb.windowed.get(module.layer_idx, fb.full)
    buf = pool.buffer_index[module.layer_idx]  # recurrent-only layers have no buffer (kv_pool.py)
    k_buf, v_buf = pool.k_buffer[buf], pool.v_buffer[buf]
    batch, heads, t, dim = query.shape  # batch > 1 only with t == 1 (one token of each request)
    q = query.transpose(1, 2).reshape(batch * t, heads, dim).contiguous()  # [T, H, D], batch order
    k = key.transpose(1, 2).reshape(batch * t, -1, dim).contiguous().to(k_buf.dtype)  # [T, Hkv, D]
    v = value.transpose(1, 2).reshape(batch * t, -1, dim).contiguous().to(v_buf.dtype)
    kernels.store_kv_unchecked(k_buf, v_buf, li.out_slots, k, v)  # before decode reads it back
    d = fb.num_decode  # packed layout: [d decode tokens | prefill chunks]
    parts = []
    t0 = time.perf_counter()
    plan = fb.cascades.get(module.layer_idx)  # covers the d leading rows
    if d and plan is not None:
        parts.append(kernels.cascade_decode_launch(q[:d], k_buf, v_buf, plan, scaling, variant))
        fb.cascade_calls += 1
        fb.masked_cascade_calls += variant.masked
    elif d:
        parts.append(kernels.decode_attention_unchecked(q[:d], k_buf, v_buf, li.req_to_token, *li.decode_inputs,
                                                        scaling, fb.max_decode_len, variant))
    t1 = time.perf_counter()
    if fb.extend_host.rows:
        parts.append(kernels.extend_attention_unchecked(q[d:], k[d:], v[d:], k_buf, v_buf, li.req_to_token,
                                                        *li.extend_inputs, scaling, li.extend_host, variant))
    t2 = time.perf_counter()
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    fb.decode_s += t1 - t0
    fb.extend_s += t2 - t1
    fb.attention_s += time.perf_counter() - start
    return out.to(query.dtype).view(batch, t, heads, dim), None


def _variant(fb: ForwardBatch, layer: int, kwargs: dict[str, Any]) -> AttentionVariant:
    """The layer's AttentionVariant: window / chunk from its group, softcap and sinks as the model passes them."""
    window, chunk = fb.layer_masks[layer] if fb.layer_masks else (0, 0)
    passed = kwargs.get("sliding_window") or 0
    if passed != window:
        raise UnsupportedModelError(f"layer {layer} passes sliding_window={passed} but its config says "
                                    f"{window or None}; radixkv will not guess which mask the model means")
    sinks = kwargs.get("s_aux")
    return AttentionVariant(window, chunk, float(kwargs.get("softcap") or 0.0),
                            None if sinks is None else sinks.detach().float())


AttentionInterface.register(ATTN_IMPLEMENTATION, radixkv_attention)
