"""A tiny config of any transformers model type, for bench/family_sweep.py and the refusal tests:
the family's own config class with small sizes (hidden 64, 4 heads / 2 KV heads, intermediate 128,
vocab 256, windows and chunks 8), 2-6 decoder layers chosen so that every kind of layer the default
config has (its `layer_types`, per-layer lists, layer index lists, pattern strings) keeps one layer.
Only fields the config class has are set, under whatever name it gives them (`attribute_map`).
Nothing downloads (needs transformers)."""

from __future__ import annotations

import dataclasses
from typing import Any

import transformers

VOCAB = 256
WINDOW = 8  # sliding_window / attention_chunk_size and the like, where the default config has one
MAX_LAYERS = 6

# field -> tiny value, set where the config class has the field (or an attribute_map alias of it)
SIZES: dict[str, Any] = {
    "vocab_size": VOCAB, "hidden_size": 64, "d_model": 64, "dim": 64, "embed_dim": 64,
    "intermediate_size": 128, "n_inner": 128, "ffn_dim": 128, "ffn_hidden_size": 128, "d_ff": 128,
    "decoder_ffn_dim": 128, "encoder_ffn_dim": 128, "intermediate_size_mlp": 128, "mlp_hidden_size": 128,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "shared_intermediate_size": 64,
    "expert_intermediate_size": 32, "moe_ffn_hidden_size": 32, "moe_hidden_size": 32,
    "num_attention_heads": 4, "num_heads": 4, "decoder_attention_heads": 4, "encoder_attention_heads": 4,
    "num_key_value_heads": 2, "num_kv_heads": 2, "multi_query_group_num": 2, "head_dim": 16, "kv_channels": 16,
    "encoder_layers": 2, "decoder_layers": 2,
    "max_position_embeddings": 512, "n_positions": 512,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4, "num_experts_per_tok": 2,
    "moe_topk": 2, "moe_k": 2, "top_k": 2, "n_shared_experts": 1, "num_shared_experts": 1, "n_group": 1,
    "topk_group": 1, "first_k_dense_replace": 1,
    "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "rotary_dim": 8, "index_n_heads": 2, "index_head_dim": 16, "index_topk": 8,
    "state_size": 8, "ssm_state_size": 8, "mamba_d_state": 8, "mamba_n_heads": 4, "mamba_d_head": 16,
    "mamba_n_groups": 1, "n_groups": 1, "mamba_chunk_size": 8, "chunk_size": 8, "mamba_d_ssm": 64,
    "mamba_dt_rank": 8, "time_step_rank": 8, "mamba_head_dim": 16, "mamba_num_heads": 4,
    "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
    "initializer_range": 0.2, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
}
WINDOW_FIELDS = ("sliding_window", "attention_window_size", "attention_chunk_size", "window_size", "local_window_size",
                 "attention_window")
PERIOD_FIELDS = ("attn_layer_period", "expert_layer_period", "interleave_moe_layer_step", "sliding_window_pattern",
                 "decoder_sparse_step", "moe_layer_freq")


# model_type -> fields the generic sizes get wrong (head shapes a validator ties together, a default
# config that has no layer of a kind the family is known for)
FIXES: dict[str, dict[str, Any]] = {
    "lfm2": dict(num_hidden_layers=4, conv_L_cache=3, full_attn_idxs=[1, 3],
                 layer_types=["conv", "full_attention", "conv", "full_attention"]),
    "lfm2_moe": dict(num_hidden_layers=4, conv_L_cache=3,
                     layer_types=["conv", "full_attention", "conv", "full_attention"]),
    "gemma3n_text": dict(num_hidden_layers=4, num_kv_shared_layers=2,
                         layer_types=["sliding_attention", "full_attention"] * 2),
    "mamba2": dict(expand=1), "bamba": dict(mamba_expand=1, num_hidden_layers=2, attn_layer_indices=[1]),
    "granitemoehybrid": dict(mamba_expand=1, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"]),
    "recurrent_gemma": dict(num_hidden_layers=3, block_types=["recurrent", "recurrent", "attention"]),
    "reformer": dict(is_decoder=True),
    "zaya": dict(num_experts_per_tok=1), "gpt_neo": dict(num_layers=2, attention_types=[[["global", "local"], 1]]),
    "hrm_text": dict(num_layers_per_stack=2), "longcat_flash": dict(num_layers=2),
}
_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def tiny_config(model_type: str, **overrides: Any) -> Any:
    """A tiny instance of `model_type`'s config class (`overrides` win over FIXES and the sizes).
    Special-token ids are None where the class allows it (random prompts hit no special token)."""
    cls = transformers.CONFIG_MAPPING[model_type]
    overrides = {**FIXES.get(model_type, {}), **overrides}
    try:
        return _tiny(cls, cls(), overrides)
    except Exception:  # a strict config that types its token ids as int: 0, else its defaults
        try:
            return _tiny(cls, cls(), {**dict.fromkeys(_TOKEN_FIELDS, 0), **overrides})
        except Exception:
            return _tiny(cls, cls(), overrides, keep=_TOKEN_FIELDS)


def _tiny(cls: type, default: Any, overrides: dict[str, Any], keep: tuple[str, ...] = ()) -> Any:
    names = _field_names(cls, default)
    alias = {k: v for k, v in getattr(cls, "attribute_map", {}).items()}
    kwargs: dict[str, Any] = {}
    for name, value in SIZES.items():
        real = name if name in names else alias.get(name, "")
        if real in names and real not in keep:
            if name in ("q_lora_rank",) and _get(default, real, None) is None:
                continue  # keep a family's "no LoRA" choice
            kwargs[real] = value
    for name in WINDOW_FIELDS:
        real = name if name in names else alias.get(name, "")
        current = _get(default, real, None) if real in names else None
        if isinstance(current, int) and not isinstance(current, bool) and current > 0:
            kwargs[real] = WINDOW
    for name in PERIOD_FIELDS:
        if name in names and isinstance(_get(default, name, None), int) and _get(default, name) > 1:
            kwargs[name] = 2
    for name in names:  # an offset within a period now 2 long (Jamba's attn_layer_offset)
        if name.endswith("_offset") and isinstance(_get(default, name, None), int) and _get(default, name) > 1:
            kwargs[name] = 1
    if "qk_rope_head_dim" in kwargs and "head_dim" in kwargs:
        kwargs["head_dim"] = kwargs["qk_rope_head_dim"]  # MLA: head_dim names the rotary part
    if "kv_lora_rank" in kwargs and "num_key_value_heads" in kwargs:
        kwargs["num_key_value_heads"] = kwargs["num_attention_heads"]  # MLA: one K and V per query head
    kwargs.update(_layer_fields(cls, default, names, alias))
    for key in getattr(cls, "sub_configs", {}) or {}:
        sub = _get(default, key, None)
        if isinstance(sub, transformers.PretrainedConfig) and key not in overrides:
            kwargs[key] = _tiny(type(sub), sub, {}, keep)
    kwargs.update(overrides)
    return cls(**kwargs)


def _get(cfg: Any, name: str, fallback: Any = None) -> Any:
    try:
        return getattr(cfg, name, fallback)
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError: a per-layer field
        return fallback


def _field_names(cls: type, default: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(vars(default))


def _layer_fields(cls: type, default: Any, names: set[str], alias: dict[str, str]) -> dict[str, Any]:
    """num_hidden_layers and every per-layer field, cut to layers that keep each kind of layer."""
    key = "num_hidden_layers" if "num_hidden_layers" in names else alias.get("num_hidden_layers", "")
    n0 = _get(default, key, None) if key in names else None
    if not isinstance(n0, int) or n0 < 1:
        return {}
    per_layer, patterns, indices = {}, {}, {}
    for name in names:
        value = _get(default, name, None)
        if isinstance(value, (list, tuple)) and len(value) == n0 and name not in SIZES:
            per_layer[name] = list(value)
        elif isinstance(value, str) and len(value) == n0 and n0 > 1 and "pattern" in name:
            patterns[name] = value
        elif (isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and 0 <= v < n0 for v in value)
              and any(w in name for w in ("ind", "idx", "layers"))):
            indices[name] = set(value)
    sigs = [tuple([str(v[i]) for v in per_layer.values()] + [p[i] for p in patterns.values()]
                  + [i in s for s in indices.values()]) for i in range(n0)]
    chosen = sorted({sigs.index(s) for s in sigs})[:MAX_LAYERS]  # the first layer of each kind
    extra = [i for i in range(n0) if i not in chosen]
    chosen = sorted(chosen + extra[:max(0, 2 - len(chosen))])  # at least 2 layers where there are 2
    out: dict[str, Any] = {key: len(chosen)}
    out.update({name: [v[i] for i in chosen] for name, v in per_layer.items()})
    out.update({name: "".join(p[i] for i in chosen) for name, p in patterns.items()})
    out.update({name: [j for j, i in enumerate(chosen) if i in s] for name, s in indices.items()})
    if "max_window_layers" in names and isinstance(_get(default, "max_window_layers", None), int):
        out["max_window_layers"] = sum(1 for i in chosen if i < default.max_window_layers)
    return out


def tiny_model(model_type: str, seed: int = 0) -> Any:
    """`model_type`'s causal-LM class (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) on its tiny config, random
    weights from `seed`, in eval mode. A text-only class of a multimodal model type gets the text config."""
    import torch
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    config = tiny_config(model_type)
    cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
    if not isinstance(config, cls.config_class) and hasattr(config, "get_text_config"):
        config = config.get_text_config(decoder=True)
    torch.manual_seed(seed)
    return cls(config).eval()
