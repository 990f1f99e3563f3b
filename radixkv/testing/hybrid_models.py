"""Tiny seeded random hybrid models (attention + recurrent layers) for the tests and bench/recurrent_reuse.py:
built from configs, nothing downloads (needs transformers)."""

from __future__ import annotations

import torch
import transformers

FAMILIES = ("jamba", "falcon_h1", "qwen3_next", "lfm3", "bamba", "granitemoehybrid")  # lfm2 (conv + full):
# lfm3 without sliding layers
VOCAB = 256
# initializer_range 0.2 (HF default 0.02) spreads the logits of a random model, so greedy argmax has
# clear winners (as in tests/hf_helpers.py).
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=1024, initializer_range=0.2, bos_token_id=None, eos_token_id=None,
               pad_token_id=None)


def build_hybrid(kind: str) -> torch.nn.Module:
    """A tiny seeded random model of family `kind` (FAMILIES or "lfm2"): 2-4 layers, hidden 64, 4 experts
    where it has MoE."""
    torch.manual_seed(7)
    if kind == "jamba":  # layers: mamba, attention(+MoE), mamba, attention(+MoE)
        config = transformers.JambaConfig(**_COMMON, num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1,
                                          expert_layer_period=2, expert_layer_offset=1, num_experts=4,
                                          num_experts_per_tok=2, mamba_d_state=8, mamba_dt_rank=8, mamba_expand=2)
    elif kind == "falcon_h1":  # every layer: Mamba2 mixer and attention side by side
        config = transformers.FalconH1Config(**_COMMON, num_hidden_layers=2, mamba_d_ssm=64, mamba_n_heads=4,
                                             mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=8)
    elif kind == "qwen3_next":  # layers: 3 gated delta net, 1 attention; MoE everywhere
        config = transformers.Qwen3NextConfig(**_COMMON, moe_intermediate_size=32, num_hidden_layers=4, head_dim=16,
                                              linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                                              linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2)
    elif kind == "lfm2":  # layers: short conv, attention, short conv, attention
        config = transformers.Lfm2Config(**_COMMON, num_hidden_layers=4, conv_L_cache=3,
                                         layer_types=["conv", "full_attention", "conv", "full_attention"])
    elif kind == "lfm3":  # short conv, sliding (window 8), full attention, short conv
        config = transformers.Lfm3Config(**_COMMON, num_hidden_layers=4, head_dim=16, conv_L_cache=3, sliding_window=8,
                                         layer_types=["conv", "sliding_attention", "full_attention", "conv"])
    elif kind == "bamba":  # layers: Mamba2, attention (2 layers: the reference Mamba2 scan is slow on CPU)
        config = transformers.BambaConfig(**_COMMON, num_hidden_layers=2, attn_layer_indices=[1], mamba_n_heads=4,
                                          mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=8)
    elif kind == "granitemoehybrid":  # Granite 4 hybrid: Mamba2, attention; MoE in both
        config = transformers.GraniteMoeHybridConfig(
            **_COMMON, num_hidden_layers=2, mamba_n_heads=4, mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=8,
            num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=64,
            layer_types=["linear_attention", "full_attention"])
    else:
        raise ValueError(f"unknown hybrid family {kind!r}; one of {FAMILIES}")
    return transformers.AutoModelForCausalLM.from_config(config).eval()
