"""radixkv.calc against sizes worked out by hand from the published model shapes."""

from __future__ import annotations

import json

import pytest

from radixkv.calc import GIB, PRESETS, bytes_per_token, from_hf_config, get_model, size


def test_llama2_70b_gqa_bytes_per_token() -> None:
    # 2 (K, V) x 80 layers x 8 KV heads x 128 dims x 2 bytes (fp16)
    assert bytes_per_token(PRESETS["llama-2-70b"], "fp16") == 2 * 80 * 8 * 128 * 2 == 327_680


@pytest.mark.parametrize("name, want", [
    ("llama-2-7b", 2 * 32 * 32 * 128 * 2),  # 512 KiB: full multi-head attention
    ("llama-3-8b", 2 * 32 * 8 * 128 * 2),  # 128 KiB
    ("mistral-7b", 2 * 32 * 8 * 128 * 2),
    ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),  # 56 KiB
    ("qwen2.5-72b", 2 * 80 * 8 * 128 * 2),
    ("mixtral-8x7b", 2 * 32 * 8 * 128 * 2),  # experts do not change attention
    ("deepseek-v3", 61 * (512 + 64) * 2),  # MLA: latent + RoPE key, no V
])
def test_bf16_bytes_per_token(name: str, want: int) -> None:
    assert bytes_per_token(PRESETS[name], "bf16") == want


def test_dtypes_and_tensor_parallel() -> None:
    m = PRESETS["llama-3-70b"]
    assert bytes_per_token(m, "fp32") == 2 * 80 * 8 * 128 * 4
    assert bytes_per_token(m, "fp8") == 2 * 80 * 8 * 128
    assert bytes_per_token(m, "int4") == 2 * 80 * 8 * 128 // 2
    assert bytes_per_token(m, "bf16", tp=4) == 2 * 80 * 2 * 128 * 2  # 8 heads over 4 ranks
    assert bytes_per_token(m, "bf16", tp=16) == 2 * 80 * 1 * 128 * 2  # one replicated head each
    assert bytes_per_token(PRESETS["deepseek-v3"], "bf16", tp=8) == 61 * 576 * 2  # latent replicated


def test_parameter_estimates_match_published_counts() -> None:
    published = {"llama-2-7b": 6.74e9, "llama-2-70b": 68.98e9, "llama-3-8b": 8.03e9, "mistral-7b": 7.24e9,
                 "qwen2.5-7b": 7.62e9, "mixtral-8x7b": 46.7e9}
    for name, n in published.items():
        assert PRESETS[name].num_params == pytest.approx(n, rel=0.02), name


def test_fit_on_an_80gib_gpu() -> None:
    # Llama-3-8B bf16 on 80 GiB at util 0.9: 72 GiB - 8.03e9 * 2 bytes of weights left for KV.
    s = size(PRESETS["llama-3-8b"], context=2000, gpu_gib=80, page_size=16, max_len=8192)
    budget = 80 * GIB * 0.9 - PRESETS["llama-3-8b"].num_params * 2
    assert s.kv_budget_bytes == pytest.approx(budget)
    per_req = 2000 // 16 * 16 * 131_072  # 125 pages of 16 tokens, 128 KiB per token
    assert s.bytes_per_request == per_req
    assert s.fit_paged == int(budget // per_req)
    assert s.fit_prealloc == int(budget // (8192 * 131_072))
    assert s.fit_paged > 4 * s.fit_prealloc  # why paging matters


def test_weights_exceeding_memory_fit_nothing() -> None:
    s = size(PRESETS["llama-3-70b"], context=4096, gpu_gib=80)  # 141 GB of bf16 weights
    assert s.kv_budget_bytes < 0 and s.fit_paged == 0 and s.fit_prealloc == 0
    s4 = size(PRESETS["llama-3-70b"], context=4096, gpu_gib=80, tp=4)
    assert s4.fit_paged > 0


def test_hf_config_json(tmp_path) -> None:
    cfg = {"model_type": "llama", "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
           "hidden_size": 8192, "intermediate_size": 28672, "vocab_size": 32000, "max_position_embeddings": 4096}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = from_hf_config(str(p))
    assert get_model(str(p)) == m
    assert bytes_per_token(m, "fp16") == 327_680
    assert m.num_params == pytest.approx(PRESETS["llama-2-70b"].num_params)
    mla = dict(cfg, kv_lora_rank=512, qk_rope_head_dim=64, num_hidden_layers=61)
    p.write_text(json.dumps(mla))
    assert bytes_per_token(from_hf_config(str(p)), "bf16") == 61 * 576 * 2
