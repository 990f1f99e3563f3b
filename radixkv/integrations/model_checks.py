"""What the Engine checks about a model at construction, beyond its layer kinds (layer_groups.py), so that
it never serves a model whose attention differs from what radixkv's kernels compute.

The Engine replaces each layer's attention with one function (attention.py): causal softmax attention
of the layer's own post-RoPE Q over its own K/V, with the layer group's window or chunk, and the
soft-cap and sinks the model passes. A model is refused (UnsupportedModelError, naming why) when:

- its attention is code of its own, not dispatched through transformers' AttentionInterface (ALiBi
  biases, relative positions, encoder-style attention: BLOOM, MPT, Falcon, GPT-Neo, XGLM, ...);
- its config does not give the KV layout in the fields the Engine reads (`num_key_value_heads`,
  `hidden_size`, `num_attention_heads`, `num_hidden_layers`: GPT-2, OPT, BERT-style decoders, and
  multimodal wrappers whose top-level config holds sub-configs); or it has cross-attention or an
  encoder. (K/V shared across layers, Gemma 3n's `num_kv_shared_layers`, is served exactly: a sharing
  layer receives the earlier layer's K/V of the step's tokens and keeps a copy in its own pool slots.)
- `probe_attention`: one forward over a few tokens with a recording attention function shows a layer
  that calls attention twice (DiffLlama's differential attention: two value halves over one K), a
  layer without `layer_idx` or not in its group, K/V of another head count or size than the pool's
  (per-layer shapes, MoA heads), keys that are not the step's own tokens, `is_causal=False`, a mask or
  bias of the model's own, a `sliding_window` that disagrees with the layer's group, a keyword the
  attention function does not apply, or the forward's keywords not reaching the attention function
  (so the Engine's step would never reach it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from transformers import AttentionInterface

from radixkv.errors import UnsupportedModelError
from radixkv.integrations.layer_groups import LayerGroup, layer_masks

PROBE_IMPLEMENTATION = "radixkv_probe"
PROBE_TOKENS = 3
# attention keywords the radixkv function applies (sliding_window, softcap, s_aux) or that do not change
# what it computes (the forward's own keywords, which every layer passes along)
KNOWN_KEYWORDS = frozenset({"dropout", "scaling", "sliding_window", "softcap", "s_aux", "radixkv_batch",
                            "position_ids", "is_causal", "use_cache", "output_attentions", "cache_position",
                            "logits_to_keep", "output_router_logits", "output_hidden_states", "return_dict"})
_LAYOUT_FIELDS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size")


def check_model(model: Any) -> None:
    """UnsupportedModelError unless `model` dispatches attention through AttentionInterface and its
    config gives the KV layout the way the Engine reads it (see the module docstring)."""
    name = type(model).__name__
    if not model._can_set_attn_implementation():
        raise UnsupportedModelError(f"{name} does not dispatch attention through transformers' AttentionInterface: "
                                    "its attention is code of its own (ALiBi, relative positions, ...) that radixkv "
                                    "would not reproduce")
    cfg = model.config
    missing = [f for f in _LAYOUT_FIELDS if not _has(cfg, f)]
    if missing:
        text = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        hint = (f"; serve its text model (a *ForCausalLM on config.{_sub_name(cfg, text)})" if text is not cfg
                else "")
        raise UnsupportedModelError(f"{name}: its config ({type(cfg).__name__}) has no {missing}: the Engine reads "
                                    f"the KV layout from Llama-style config fields{hint}")
    for field, what in (("is_encoder_decoder", "an encoder-decoder"), ("add_cross_attention", "cross-attention")):
        if _get(cfg, field) is True:
            raise UnsupportedModelError(f"{name} is {what} model; the Engine serves decoder-only self-attention")


class _Probe:
    """What the probe forward passes as `radixkv_batch`: the attention calls it saw."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


class _NotReached(Exception):
    """A layer called the attention function without the forward's keywords."""


def _record(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The probe's attention function: records the call, returns plain causal attention."""
    probe = kwargs.get("radixkv_batch")
    if not isinstance(probe, _Probe):
        raise _NotReached
    probe.calls.append(dict(layer=getattr(module, "layer_idx", None), q=tuple(query.shape), k=tuple(key.shape),
                            v=tuple(value.shape), mask=attention_mask is not None,
                            kwargs={"is_causal": getattr(module, "is_causal", None), **kwargs}))
    return _causal_attention(query, key, value, kwargs.get("scaling")), None


AttentionInterface.register(PROBE_IMPLEMENTATION, _record)


def probe_attention(model: Any, layout: dict[str, int], groups: Sequence[LayerGroup]) -> None:
    """One forward over PROBE_TOKENS tokens with a recording attention function (nothing stored; the
    model's outputs are discarded); UnsupportedModelError for anything the radixkv function would not
    compute the same way (the module docstring lists what)."""
    name = type(model).__name__
    attention_layers = sorted({i for g in groups if g.kind != "recurrent" for i in g.layers})
    probe = _Probe()
    previous = model.config._attn_implementation
    device = model.device
    try:
        model.set_attn_implementation(PROBE_IMPLEMENTATION)
        ids = torch.arange(1, PROBE_TOKENS + 1, device=device)[None] % model.config.get_text_config().vocab_size
        with torch.inference_mode():
            model(input_ids=ids, position_ids=torch.arange(PROBE_TOKENS, device=device)[None], use_cache=False,
                  radixkv_batch=probe)
    except _NotReached:
        raise UnsupportedModelError(f"{name}: its layers do not pass the forward's keywords to the attention function "
                                    f"(radixkv_batch never arrives); radixkv would not compute the same attention"
                                    ) from None
    except Exception as e:
        raise UnsupportedModelError(f"{name}: a {PROBE_TOKENS}-token probe forward with the radixkv attention "
                                    f"keywords failed ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from e
    finally:
        model.set_attn_implementation(previous)
    _judge(name, probe.calls, attention_layers, layer_masks(groups, layout["num_layers"]), layout)


def _judge(name: str, calls: list[dict[str, Any]], attention_layers: list[int],
           masks: Sequence[tuple[int, int]], layout: dict[str, int]) -> None:
    def refuse(why: str) -> None:
        raise UnsupportedModelError(f"{name}: {why}; radixkv would not compute the same attention")

    if any(c["layer"] is None for c in calls):
        refuse("an attention module without layer_idx calls the attention function")
    twice = sorted(i for i, k in Counter(c["layer"] for c in calls).items() if k > 1)
    if twice:
        refuse(f"layers {twice} call the attention function more than once per forward (differential "
               f"attention or K/V shared between calls)")
    called = {c["layer"] for c in calls}
    if called != set(attention_layers):
        refuse(f"the layers that call attention {sorted(called)} are not the config's attention layers "
               f"{attention_layers}")
    heads, dim = layout["num_kv_heads"], layout["head_dim"]
    for c in calls:
        i, (_, h, tq, dq), (_, hk, tk, dk), (_, hv, tv, dv) = c["layer"], c["q"], c["k"], c["v"]
        if (hk, hv, dk, dv, dq) != (heads, heads, dim, dim, dim) or h % hk:
            refuse(f"layer {i} attends with Q/K/V heads {h}/{hk}/{hv} of sizes {dq}/{dk}/{dv}, but the pool holds "
                   f"{heads} KV heads of size {dim} for every layer")
        if not tq == tk == tv == PROBE_TOKENS:
            refuse(f"layer {i} attends {tq} queries over {tk} keys for a {PROBE_TOKENS}-token input (keys that are "
                   f"not the step's own tokens: memory tokens, cross-attention)")
        if c["mask"]:
            refuse(f"layer {i} passes an attention mask or bias of its own")
        kwargs = c["kwargs"]
        if kwargs.get("is_causal") is False:  # passed, or the module's own flag (what sdpa and flash read)
            refuse(f"layer {i} attends bidirectionally (is_causal=False)")
        if (kwargs.get("sliding_window") or 0) != masks[i][0]:
            refuse(f"layer {i} passes sliding_window={kwargs.get('sliding_window')} but its layer group says "
                   f"{masks[i][0] or None}")
        unknown = sorted(k for k, v in kwargs.items() if k not in KNOWN_KEYWORDS and v is not None)
        if unknown:
            refuse(f"layer {i} passes attention keywords {unknown} that the radixkv attention function does not "
                   f"apply")


def _causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      scaling: float | None) -> torch.Tensor:
    """Plain causal attention, `[B, T, H, Dv]`, so the rest of the probe forward sees sensible values
    (zeros where the shapes do not line up: the probe refuses such a model anyway)."""
    b, h, t, _ = query.shape
    if key.shape[1] == 0 or h % key.shape[1] or key.shape[2] != t or value.shape[2] != t:
        return query.new_zeros(b, t, h, value.shape[-1])
    k = key.repeat_interleave(h // key.shape[1], dim=1)
    v = value.repeat_interleave(h // value.shape[1], dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query, k.to(query.dtype), v.to(query.dtype),
                                                           is_causal=True, scale=scaling)
    return out.transpose(1, 2)


def _has(cfg: Any, field: str) -> bool:
    try:
        return getattr(cfg, field, None) is not None
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError
        return False


def _get(cfg: Any, field: str) -> Any:
    try:
        return getattr(cfg, field, None)
    except Exception:
        return None


def _sub_name(cfg: Any, sub: Any) -> str:
    return next((k for k in (getattr(cfg, "sub_configs", None) or {}) if _get(cfg, k) is sub), "text_config")
