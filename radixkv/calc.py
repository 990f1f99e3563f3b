"""KV-cache sizing: bytes per token and per request, and how many requests fit in GPU memory.

    bytes/token (MHA, GQA) = 2 (K and V) * layers * kv_heads_per_rank * head_dim * dtype bytes
    bytes/token (MLA)      = layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes
                             (DeepSeek's compressed latent plus the decoupled RoPE key; no V)

With tensor parallelism of degree tp each rank holds kv_heads / tp heads (one replicated head
when tp > kv_heads); the MLA latent is replicated on every rank (as SGLang and vLLM do).
Weights per rank = parameters * weight dtype bytes / tp. Free memory for KV = GPU memory * `util`
minus weights. Paging allocates ceil(context / page) pages per request; max-length
pre-allocation reserves `max_len` tokens per request whatever its length.
Parameters come from a preset's published count or are estimated from a config.json
(embeddings + attention + dense or MoE MLP; norms and biases ignored, well under 1%).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int4": 0.5}
GIB = 1 << 30


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    num_experts: int = 1  # MoE: experts per layer (all resident in memory)
    tied_embeddings: bool = False
    kv_lora_rank: int = 0  # MLA: width of the compressed KV latent (0 = ordinary attention)
    qk_rope_head_dim: int = 0  # MLA: decoupled RoPE key width, cached beside the latent
    max_position: int = 4096
    params: float = 0.0  # published parameter count; 0 = estimate from the shapes

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_params(self) -> float:
        if self.params:
            return self.params
        h, hd = self.hidden, self.head_dim
        attn = h * self.num_heads * hd * 2 + 2 * h * self.num_kv_heads * hd  # q, o, k, v
        mlp = 3 * h * self.intermediate * self.num_experts  # gate, up, down
        emb = self.vocab * h * (1 if self.tied_embeddings else 2)
        return float(self.num_layers * (attn + mlp) + emb)


PRESETS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("llama-2-7b", 32, 32, 32, 128, 4096, 11008, 32000),
    ModelSpec("llama-2-70b", 80, 64, 8, 128, 8192, 28672, 32000),
    ModelSpec("llama-3-8b", 32, 32, 8, 128, 4096, 14336, 128256, max_position=8192),
    ModelSpec("llama-3-70b", 80, 64, 8, 128, 8192, 28672, 128256, max_position=8192),
    ModelSpec("mistral-7b", 32, 32, 8, 128, 4096, 14336, 32000, max_position=32768),
    ModelSpec("qwen2.5-7b", 28, 28, 4, 128, 3584, 18944, 152064, max_position=32768),
    ModelSpec("qwen2.5-72b", 80, 64, 8, 128, 8192, 29568, 152064, max_position=32768),
    ModelSpec("mixtral-8x7b", 32, 32, 8, 128, 4096, 14336, 32000, num_experts=8, max_position=32768),
    # DeepSeek-V3: 61 layers, MLA with a 512-wide latent + 64-wide RoPE key; 671B parameters (MoE).
    ModelSpec("deepseek-v3", 61, 128, 128, 128, 7168, 18432, 129280, kv_lora_rank=512,
              qk_rope_head_dim=64, max_position=163840, params=671e9),
)}


def from_hf_config(path: str) -> ModelSpec:
    """A ModelSpec from a HuggingFace config.json (Llama/Mistral/Qwen/Mixtral/DeepSeek fields)."""
    with open(path) as f:
        c: dict[str, Any] = json.load(f)
    c = c.get("text_config", c)
    heads = int(c["num_attention_heads"])
    hidden = int(c["hidden_size"])
    return ModelSpec(
        name=str(c.get("_name_or_path") or c.get("model_type") or path),
        num_layers=int(c["num_hidden_layers"]), num_heads=heads,
        num_kv_heads=int(c.get("num_key_value_heads") or heads),
        head_dim=int(c.get("head_dim") or hidden // heads), hidden=hidden,
        intermediate=int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 4 * hidden),
        vocab=int(c.get("vocab_size", 32000)),
        num_experts=int(c.get("num_local_experts") or c.get("n_routed_experts") or c.get("num_experts") or 1),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        kv_lora_rank=int(c.get("kv_lora_rank") or 0), qk_rope_head_dim=int(c.get("qk_rope_head_dim") or 0),
        max_position=int(c.get("max_position_embeddings", 4096)))


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name (case-insensitive) or a config.json path."""
    key = name_or_path.lower()
    if key in PRESETS:
        return PRESETS[key]
    if name_or_path.endswith(".json"):
        return from_hf_config(name_or_path)
    raise KeyError(f"unknown model {name_or_path!r}: a config.json path or one of {sorted(PRESETS)}")


def kv_heads_per_rank(model: ModelSpec, tp: int) -> float:
    return max(1.0, model.num_kv_heads / tp) if not model.is_mla else 0.0


def bytes_per_token(model: ModelSpec, dtype: str = "bf16", tp: int = 1) -> float:
    """KV bytes one token occupies on one tensor-parallel rank."""
    b = DTYPE_BYTES[dtype]
    if model.is_mla:
        return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * b
    return 2 * model.num_layers * kv_heads_per_rank(model, tp) * model.head_dim * b


@dataclass(frozen=True)
class Sizing:
    bytes_per_token: float  # per rank
    bytes_per_request: float  # paged: ceil(context / page) pages
    bytes_per_request_prealloc: float  # max_len tokens reserved
    weight_bytes: float  # per rank
    kv_budget_bytes: float  # per rank: gpu * util - weights (may be negative)
    fit_paged: int  # concurrent requests of `context` tokens with paging
    fit_prealloc: int  # with max-length pre-allocation


def size(model: ModelSpec, *, context: int, gpu_gib: float, dtype: str = "bf16",
         weight_dtype: str = "bf16", tp: int = 1, page_size: int = 16, max_len: int | None = None,
         util: float = 0.9) -> Sizing:
    """Sizing of `model` serving requests of `context` tokens on GPUs of `gpu_gib` GiB each."""
    bpt = bytes_per_token(model, dtype, tp)
    max_len = max_len or model.max_position
    per_req = math.ceil(context / page_size) * page_size * bpt
    per_req_max = max_len * bpt
    weights = model.num_params * DTYPE_BYTES[weight_dtype] / tp
    budget = gpu_gib * GIB * util - weights
    fit = lambda per: max(0, int(budget // per)) if per else 0  # noqa: E731
    return Sizing(bpt, per_req, per_req_max, weights, budget, fit(per_req), fit(per_req_max))


def with_tp_note(model: ModelSpec, tp: int) -> str:
    if model.is_mla:
        return "MLA latent (replicated per rank)"
    kv = kv_heads_per_rank(model, tp)
    note = f"{model.num_kv_heads} KV heads" + (f" / tp {tp} = {kv:g} per rank" if tp > 1 else "")
    return note + (" (replicated)" if tp > model.num_kv_heads else "")


__all__ = ["ModelSpec", "PRESETS", "DTYPE_BYTES", "Sizing", "bytes_per_token", "size", "get_model",
           "from_hf_config", "with_tp_note"]
