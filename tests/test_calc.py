"""radixkv.calc against sizes worked out by hand from the published model shapes."""

from __future__ import annotations

import json

import pytest

from dataclasses import replace

from radixkv.calc import (GIB, PRESETS, bytes_per_token, from_hf_config, get_model, kv_heads_per_rank,
                          min_tensor_parallel, size, tp_error)
from radixkv.errors import InvalidArgumentError


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
    assert bytes_per_token(m, "bfloat16") == bytes_per_token(m, "bf16")  # vLLM's dtype names too


@pytest.mark.parametrize("name, tp, heads_per_rank", [
    ("llama-3-8b", 2, 4), ("llama-3-8b", 8, 1), ("llama-3-8b", 16, 1), ("llama-3-8b", 32, 1),
    ("llama-2-7b", 32, 1), ("qwen2.5-7b", 4, 1), ("qwen2.5-7b", 2, 2), ("deepseek-v3", 16, 0),
])
def test_tp_heads_per_rank_are_whole_as_in_vllm(name: str, tp: int, heads_per_rank: int) -> None:
    # vLLM: max(1, kv_heads // tp) KV heads per rank; above the KV-head count each head is replicated.
    assert kv_heads_per_rank(PRESETS[name], tp) == heads_per_rank
    assert tp_error(PRESETS[name], tp) is None


@pytest.mark.parametrize("name, tp, why", [
    ("llama-3-8b", 3, "does not divide the 32 attention heads"),  # was "2.67 heads per rank"
    ("llama-3-8b", 64, "does not divide the 32 attention heads"),
    ("qwen2.5-7b", 8, "does not divide the 28 attention heads"),  # vLLM refuses Qwen2.5-7B at tp 8
    ("qwen2.5-7b", 14, "multiple of the other"),  # 28 heads split, but 4 KV heads cannot be
])
def test_tp_vllm_refuses(name: str, tp: int, why: str) -> None:
    assert why in tp_error(PRESETS[name], tp)
    with pytest.raises(InvalidArgumentError, match=why):
        bytes_per_token(PRESETS[name], "bf16", tp)


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
    assert not s.weights_fit and s.kv_budget_bytes == 0 and s.fit_paged == 0 and s.fit_prealloc == 0
    assert s.weight_bytes == PRESETS["llama-3-70b"].num_params * 2 > s.usable_bytes == 80 * GIB * 0.9
    s4 = size(PRESETS["llama-3-70b"], context=4096, gpu_gib=80, tp=4)
    assert s4.fit_paged > 0
    assert min_tensor_parallel(PRESETS["llama-3-70b"], gpu_gib=80) == 2  # 131 GiB / 2 < 72 GiB


def test_deepseek_v3_mla_at_tp1_has_no_room_and_says_which_tp_has() -> None:
    m = PRESETS["deepseek-v3"]
    s = size(m, context=4096, gpu_gib=80, weight_dtype="fp8", tp=1)  # was "-1,177.8 GiB of KV room"
    assert s.kv_budget_bytes == 0 and s.fit_paged == 0 and not s.weights_fit
    # 671e9 fp8 bytes = 625 GiB over 72 GiB usable: tp >= 9, and tp must divide the 128 heads: 16.
    assert min_tensor_parallel(m, gpu_gib=80, weight_dtype="fp8") == 16
    s8 = size(m, context=4096, gpu_gib=141, weight_dtype="fp8", tp=8)
    assert s8.kv_budget_bytes == pytest.approx(141 * GIB * 0.9 - 671e9 / 8)
    assert s8.fit_paged == int(s8.kv_budget_bytes // (256 * 16 * 61 * 576 * 2))  # 256 pages of 16 per request


def test_mla_parameter_estimate_from_shapes() -> None:
    # The DeepSeek-V3 shapes (MLA with low-rank q, 256 routed + 1 shared experts, 3 dense layers)
    # give its published 671B parameters (MTP layer excluded, as in the published count).
    assert replace(PRESETS["deepseek-v3"], params=0).num_params == pytest.approx(671e9, rel=0.005)


def test_hf_config_json(tmp_path) -> None:
    cfg = {"model_type": "llama", "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
           "hidden_size": 8192, "intermediate_size": 28672, "vocab_size": 32000, "max_position_embeddings": 4096}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = from_hf_config(str(p))
    assert get_model(str(p)) == m
    assert bytes_per_token(m, "fp16") == 327_680
    assert m.num_params == pytest.approx(PRESETS["llama-2-70b"].num_params)
    assert get_model(str(tmp_path)) == m  # the folder that holds config.json
    mla = dict(cfg, kv_lora_rank=512, qk_rope_head_dim=64, num_hidden_layers=61)
    p.write_text(json.dumps(mla))
    assert bytes_per_token(from_hf_config(str(p)), "bf16") == 61 * 576 * 2


def test_deepseek_config_json_matches_the_preset(tmp_path) -> None:
    """The fields of DeepSeek-V3's published config.json (abridged), fp8-quantized weights."""
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128,
           "num_key_value_heads": 128, "hidden_size": 7168, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
           "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
           "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = get_model(str(tmp_path))
    assert m.num_params == pytest.approx(PRESETS["deepseek-v3"].num_params, rel=0.005)
    assert bytes_per_token(m, m.dtype) == bytes_per_token(PRESETS["deepseek-v3"], "bf16")
    assert m.weight_dtype == "fp8" and m.dtype == "bfloat16"


@pytest.mark.parametrize("name, match", [
    ("meta-llama/Llama-3.1-8B", "reads no network"),  # a hub id: refused, nothing downloaded
    ("no-such-model", "unknown model"),
])
def test_unknown_models_are_refused_clearly(name: str, match: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # so the hub id is surely not a local folder
    with pytest.raises(InvalidArgumentError, match=match):
        get_model(name)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgumentError, match="has no config.json"):
        get_model(str(tmp_path / "empty"))


def test_windowed_layers_cap_kv_per_request_at_their_window() -> None:
    """Gemma 3 27B at 32k: 10 full layers keep 2,048 pages of 16, 52 sliding layers the 65 pages a
    1,024-token window can span (ceil(1023 / 16) + 1); page 1 reaches the issue's floor, 0.1875."""
    gemma = get_model("gemma-3-27b")
    s = size(gemma, context=32768, gpu_gib=80, page_size=16)
    assert s.window_ratio == pytest.approx((10 * 2048 + 52 * 65) / (62 * 2048))
    assert s.bytes_per_request_full == 32768 * s.bytes_per_token
    assert s.bytes_per_request == pytest.approx(s.bytes_per_request_full * s.window_ratio)
    assert size(gemma, context=32768, gpu_gib=80, page_size=1).window_ratio == pytest.approx((10 + 52 / 32) / 62)
    assert size(gemma, context=1000, gpu_gib=80, page_size=16).window_ratio == 1.0  # shorter than the window
    no_windows = get_model("llama-3-8b")
    assert size(no_windows, context=32768, gpu_gib=80).window_ratio == 1.0


def test_windows_from_transformers_configs(tmp_path) -> None:
    """config.json as transformers writes it (layer_types), as older Gemma 3 checkpoints do
    (sliding_window_pattern), Mistral (sliding_window on every layer), Llama 4 (chunks)."""
    transformers = pytest.importorskip("transformers")
    cases = [
        (transformers.Gemma3TextConfig(num_hidden_layers=62, sliding_window=1024).to_dict(), 1024, 52),
        (dict(model_type="gemma3_text", num_hidden_layers=62, sliding_window=1024, sliding_window_pattern=6), 1024, 52),
        (transformers.MistralConfig(num_hidden_layers=4, sliding_window=4096).to_dict(), 4096, 4),
        (transformers.Qwen2Config(num_hidden_layers=4, sliding_window=4096).to_dict(), 0, 0),  # use_sliding_window off
        (transformers.Llama4TextConfig(num_hidden_layers=8, attention_chunk_size=8192).to_dict(), 8192, 6),
        (transformers.LlamaConfig(num_hidden_layers=4).to_dict(), 0, 0),
    ]
    for i, (fields, window, layers) in enumerate(cases):
        fields = {"num_attention_heads": 8, "hidden_size": 512, **fields}
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(fields, default=str))
        spec = from_hf_config(str(path))
        assert (spec.window, spec.window_layers) == (window, layers), fields.get("model_type")
