"""Model shapes for KV sizing: presets, a HuggingFace `config.json` (file or folder), nothing downloaded.

Parameters come from a preset's published count or are estimated from the shapes: embeddings,
attention (GQA: q, k, v, o; MLA: DeepSeek's low-rank q and kv projections), and a dense or MoE
MLP (routed + shared experts, the first `first_dense_layers` layers dense); norms, biases and
routers are ignored (well under 1%).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from radixkv.errors import InvalidArgumentError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int  # dense MLP width
    vocab: int
    num_experts: int = 1  # MoE: routed experts per layer (all resident in memory); 1 = dense
    moe_intermediate: int = 0  # MoE expert width (0: same as `intermediate`)
    num_shared_experts: int = 0  # MoE: always-on experts beside the routed ones (DeepSeek)
    first_dense_layers: int = 0  # MoE: leading layers with a dense MLP (DeepSeek's first_k_dense_replace)
    tied_embeddings: bool = False
    kv_lora_rank: int = 0  # MLA: width of the compressed KV latent (0 = ordinary attention)
    qk_rope_head_dim: int = 0  # MLA: decoupled RoPE key width, cached beside the latent
    qk_nope_head_dim: int = 0  # MLA: per-head query/key width without RoPE
    v_head_dim: int = 0  # MLA: per-head value width
    q_lora_rank: int = 0  # MLA: low-rank query projection (0 = a full projection)
    max_position: int = 4096
    dtype: str = "bfloat16"  # the checkpoint's compute dtype (config.json `torch_dtype`): KV's `auto`
    weight_dtype: str = ""  # quantized weights ("fp8", "int4"); "" = `dtype`
    params: float = 0.0  # published parameter count; 0 = estimate from the shapes

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_params(self) -> float:
        if self.params:
            return self.params
        emb = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return float(self.num_layers * self._attention_params() + self._mlp_params() + emb)

    def _attention_params(self) -> int:
        h, heads = self.hidden, self.num_heads
        if not self.is_mla:
            return h * heads * self.head_dim * 2 + 2 * h * self.num_kv_heads * self.head_dim  # q, o, k, v
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = h * self.q_lora_rank + self.q_lora_rank * heads * qk if self.q_lora_rank else h * heads * qk
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_a + kv_b + heads * self.v_head_dim * h

    def _mlp_params(self) -> int:
        dense = 3 * self.hidden * self.intermediate  # gate, up, down
        if self.num_experts == 1:
            return self.num_layers * dense
        expert = 3 * self.hidden * (self.moe_intermediate or self.intermediate)
        moe_layers = self.num_layers - self.first_dense_layers
        return self.first_dense_layers * dense + moe_layers * (self.num_experts + self.num_shared_experts) * expert


PRESETS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("llama-2-7b", 32, 32, 32, 128, 4096, 11008, 32000),
    ModelSpec("llama-2-70b", 80, 64, 8, 128, 8192, 28672, 32000),
    ModelSpec("llama-3-8b", 32, 32, 8, 128, 4096, 14336, 128256, max_position=8192),
    ModelSpec("llama-3-70b", 80, 64, 8, 128, 8192, 28672, 128256, max_position=8192),
    ModelSpec("mistral-7b", 32, 32, 8, 128, 4096, 14336, 32000, max_position=32768),
    ModelSpec("qwen2.5-7b", 28, 28, 4, 128, 3584, 18944, 152064, max_position=32768),
    ModelSpec("qwen2.5-72b", 80, 64, 8, 128, 8192, 29568, 152064, max_position=32768),
    ModelSpec("mixtral-8x7b", 32, 32, 8, 128, 4096, 14336, 32000, num_experts=8, max_position=32768),
    # DeepSeek-V3: 61 layers, MLA with a 512-wide latent + 64-wide RoPE key; 671B parameters (MoE),
    # the published count (the shape estimate gives 671.0B too).
    ModelSpec("deepseek-v3", 61, 128, 128, 192, 7168, 18432, 129280, num_experts=256, moe_intermediate=2048,
              num_shared_experts=1, first_dense_layers=3, kv_lora_rank=512, qk_rope_head_dim=64,
              qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=1536, max_position=163840, params=671e9,
              weight_dtype="fp8"),  # published as fp8 weights (bf16 compute)
)}


def from_hf_config(path: str) -> ModelSpec:
    """A ModelSpec from a HuggingFace config.json, or a folder holding one (Llama, Mistral, Qwen,
    Mixtral, DeepSeek fields)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as f:
        c: dict[str, Any] = json.load(f)
    c = c.get("text_config", c)
    heads, hidden = int(c["num_attention_heads"]), int(c["hidden_size"])
    get = lambda *keys, default=0: next((int(c[k]) for k in keys if c.get(k)), default)  # noqa: E731
    nope, rope = get("qk_nope_head_dim"), get("qk_rope_head_dim")
    return ModelSpec(
        name=_name(c, path),
        num_layers=int(c["num_hidden_layers"]), num_heads=heads,
        num_kv_heads=get("num_key_value_heads", default=heads),
        head_dim=get("head_dim", default=(nope + rope) or hidden // heads), hidden=hidden,
        intermediate=get("intermediate_size", default=4 * hidden), vocab=get("vocab_size", default=32000),
        num_experts=get("num_local_experts", "n_routed_experts", "num_experts", default=1),
        moe_intermediate=get("moe_intermediate_size"), num_shared_experts=get("n_shared_experts"),
        first_dense_layers=get("first_k_dense_replace"),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        kv_lora_rank=get("kv_lora_rank"), qk_rope_head_dim=rope, qk_nope_head_dim=nope,
        v_head_dim=get("v_head_dim"), q_lora_rank=get("q_lora_rank"),
        max_position=get("max_position_embeddings", default=4096),
        dtype=str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"), weight_dtype=_quantized(c))


def _quantized(c: dict[str, Any]) -> str:
    """The weights' dtype of a quantized checkpoint ("fp8", "int4"), "" when not quantized."""
    q = c.get("quantization_config") or {}
    if q.get("quant_method") == "fp8":
        return "fp8"
    return "int4" if q.get("bits") == 4 else ""


def _name(c: dict[str, Any], path: str) -> str:
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return str(c.get("_name_or_path") or folder or c.get("model_type") or path)


_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name (case-insensitive), a config.json path, or a folder with a config.json.

    Raises InvalidArgumentError for anything else; nothing is downloaded (a hub id is refused)."""
    if name_or_path.lower() in PRESETS:
        return PRESETS[name_or_path.lower()]
    config = os.path.join(name_or_path, "config.json") if os.path.isdir(name_or_path) else name_or_path
    if os.path.isfile(config):
        try:
            return from_hf_config(config)
        except (KeyError, ValueError, TypeError, AttributeError, OSError, RecursionError) as e:  # not a JSON object of the fields
            raise InvalidArgumentError(f"{config} is not a usable config.json: {type(e).__name__} {e}") from e
    if os.path.isdir(name_or_path):
        raise InvalidArgumentError(f"folder {name_or_path!r} has no config.json")
    if _HUB_ID.match(name_or_path):
        raise InvalidArgumentError(
            f"{name_or_path!r} is not a local folder; radixkv reads no network. Download its config.json "
            f"(e.g. `hf download {name_or_path} config.json --local-dir {name_or_path.split('/')[1]}`) "
            f"and pass that folder")
    raise InvalidArgumentError(f"unknown model {name_or_path!r}: pass a preset ({', '.join(PRESETS)}), "
                               f"a config.json, or a folder holding one")
