"""Engine vs transformers for models with recurrent layers (Jamba: Mamba; Falcon-H1: Mamba2 beside
attention in every layer; Qwen3-Next: gated delta net; LFM3: short convolutions, sliding and full
attention; LFM2: short convolutions; Bamba and Granite 4 hybrid: Mamba2 and attention layers):
greedy output equals `model.generate` token for
token, with chunked prefill, decode batched across requests, preemption, eviction, and prefix reuse
through state snapshots. Before radixkv carried each request's state, every one of these failed at the
second new token (the recurrent layers restarted from zero state each step and ran over packed requests
as one sequence).
"""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
from hf_helpers import (assert_cache_idle, assert_same_tokens, cached_reference, no_interpreter,  # noqa: E402, F401
                        one_thread, reference, shared_prefix_prompts)

from radixkv import CacheConfig, ConfigError, GroupSpec, UnsupportedModelError  # noqa: E402
from radixkv.integrations.layer_groups import SERVED_RECURRENT, LayerGroup, layer_groups  # noqa: E402
from radixkv.integrations.transformers import Engine, cache_config_for  # noqa: E402
from radixkv.testing.hybrid_models import FAMILIES, build_hybrid  # noqa: E402

@pytest.fixture(scope="module", params=FAMILIES)
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    return build_hybrid(request.param)


@pytest.mark.parametrize("page_size", [1, 16])
def test_exact_then_reuses_shared_prefix(model: torch.nn.Module, page_size: int, no_interpreter: None) -> None:
    """Round 1: 6 prompts sharing two 40-token system prompts, chunked (24-token budget), 10 new tokens
    each. Round 2: new prompts on those system prompts and next turns of round 1's conversations."""
    first = shared_prefix_prompts(seed=1, groups=2, per_group=3)  # both page sizes: one reference
    engine = Engine(model, num_slots=4096, page_size=page_size, dtype=torch.float32, max_context_len=256,
                    max_batch_tokens=24)
    answers = engine.generate(first, max_new_tokens=10)
    assert_same_tokens(answers, cached_reference(model, first, 10))
    stats = engine.last_stats
    assert stats.prefill_computed + stats.prefill_reused == stats.prompt_tokens
    second = [p[:40] + [5, 6, 7] for p in first[::3]] + [p + a + [9, 9] for p, a in zip(first, answers)]
    got = engine.generate(second, max_new_tokens=10)
    assert_same_tokens(got, cached_reference(model, second, 10))
    # Each next turn resumes at least at the last page boundary of its first turn's prompt.
    assert engine.last_stats.prefill_reused >= sum(len(p) // page_size * page_size - page_size for p in first)
    assert engine.recurrent.store.hits > 0
    engine.recurrent.store.check()
    assert_cache_idle(engine)


@pytest.mark.parametrize("page_size, num_slots", [(1, 128), (16, 160)])
def test_small_pool_preempts_and_evicts(model: torch.nn.Module, page_size: int, num_slots: int,
                                        no_interpreter: None) -> None:
    """Too few slots for every request at once: requests are preempted (their state dropped; they
    resume from a snapshot or from zero) and cached KV is evicted (its snapshots go with it)."""
    prompts = shared_prefix_prompts(seed=21, groups=3, per_group=2, own=(8, 30))  # both page sizes: one reference
    engine = Engine(model, num_slots=num_slots, page_size=page_size, dtype=torch.float32, max_context_len=128,
                    max_requests=8, max_batch_tokens=48)
    got = engine.generate(prompts, max_new_tokens=24)
    assert_same_tokens(got, cached_reference(model, prompts, 24))
    stats = engine.last_stats
    assert stats.preemptions > 0, "the pool was meant to be too small for every request at once"
    assert stats.prefill_computed + stats.output_tokens > num_slots
    engine.recurrent.store.check()
    assert_cache_idle(engine)


def test_tiny_state_budget_stays_exact(no_interpreter: None) -> None:
    """A state group of one slot: snapshots are given up all the time and reuse shrinks, output stays exact."""
    model = build_hybrid("qwen3_next")
    engine = Engine(model, num_slots=1024, page_size=4, dtype=torch.float32, max_context_len=256,
                    groups=(GroupSpec("state", 1),))
    prompts = shared_prefix_prompts(seed=5, groups=2, per_group=3)
    for _ in range(2):
        got = engine.generate(prompts, max_new_tokens=6)
        assert_same_tokens(got, reference(model, prompts, 6))
        engine.recurrent.store.check()
        engine.cache.check_invariants()
        assert len(engine.recurrent.store) <= 1
    assert engine.recurrent.store.dropped > 0


def test_cache_config_without_a_state_group_is_refused() -> None:
    model = build_hybrid("falcon_h1")
    with pytest.raises(ConfigError, match="GroupSpec\\('state'"):
        Engine(model, num_slots=64, groups=())


def test_score_resumes_from_a_snapshot(no_interpreter: None) -> None:
    """`score` opens through the same reuse limit: its logits equal a plain forward's."""
    model = build_hybrid("falcon_h1")
    engine = Engine(model, num_slots=1024, page_size=4, dtype=torch.float32, max_context_len=256)
    prompt = list(range(10, 40))
    engine.generate([prompt], max_new_tokens=3)
    reused, logits = engine.score(prompt + [1, 2, 3])
    assert reused > 0
    with torch.no_grad():
        full = model(torch.tensor([prompt + [1, 2, 3]])).logits[0, reused:]
    torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-4)


def test_layer_groups_of_hybrid_models() -> None:
    jamba, falcon, qwen, lfm3, bamba, granite = (build_hybrid(k).config for k in FAMILIES)
    assert layer_groups(jamba) == (LayerGroup("recurrent", (0, 2), mixer="linear_attention"),
                                   LayerGroup("full", (1, 3)))
    assert layer_groups(falcon) == (LayerGroup("full", (0, 1)), LayerGroup("recurrent", (0, 1), mixer="hybrid"))
    assert layer_groups(qwen) == (LayerGroup("recurrent", (0, 1, 2), mixer="linear_attention"),
                                  LayerGroup("full", (3,)))
    assert layer_groups(lfm3) == (LayerGroup("recurrent", (0, 3), mixer="conv"), LayerGroup("sliding", (1,), window=8),
                                  LayerGroup("full", (2,)))
    mamba2_and_attention = (LayerGroup("recurrent", (0,), mixer="linear_attention"), LayerGroup("full", (1,)))
    assert layer_groups(bamba) == layer_groups(granite) == mamba2_and_attention
    assert {"linear_attention", "hybrid", "conv"} <= SERVED_RECURRENT


def test_interpreted_triton_kernels() -> None:
    """The Triton kernels under TRITON_INTERPRET=1 (set by conftest): decode of several requests in one
    `[B, 1]` forward through decode_attention, chunks through extend_attention, a reused prefix."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    model = build_hybrid("jamba")
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 10, 11], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    engine = Engine(model, num_slots=64, page_size=4, dtype=torch.float32, max_context_len=32, max_batch_tokens=6)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=3), reference(model, prompts, 3))
    again = [p + [12] for p in prompts]
    assert_same_tokens(engine.generate(again, max_new_tokens=2), reference(model, again, 2))
    assert engine.last_stats.prefill_reused > 0


# family -> the decoder layers with attention (the rest are recurrent-only: no KV)
ATTENTION_LAYERS = {"jamba": (1, 3), "falcon_h1": (0, 1), "qwen3_next": (3,), "lfm3": (1, 2), "bamba": (1,),
                    "granitemoehybrid": (1,)}


@pytest.mark.parametrize("kind", FAMILIES)
def test_pool_holds_kv_of_attention_layers_only(kind: str) -> None:
    """A recurrent-only layer gets no K/V buffer: the pool is smaller by exactly those layers' share."""
    model = build_hybrid(kind)
    engine = Engine(model, num_slots=64, page_size=4, dtype=torch.float32, max_context_len=64)
    pool, cfg = engine.cache.kv_pool, engine.cache.config
    attention = ATTENTION_LAYERS[kind]
    assert pool.kv_layers == attention and len(pool.k_buffer) == len(pool.v_buffer) == len(attention)
    assert cfg.kv_layers == (None if len(attention) == cfg.num_layers else attention)
    per_layer = 2 * cfg.num_kv_heads * cfg.head_dim * 4  # K and V, fp32
    assert pool.bytes_per_token == len(attention) * per_layer
    held = sum(b.numel() * b.element_size() for b in pool.k_buffer + pool.v_buffer)
    assert held == cfg.num_slots * len(attention) * per_layer


def test_kv_layers_checked() -> None:
    """A cache_config that leaves out an attention layer, or malformed kv_layers, raises ConfigError."""
    model = build_hybrid("jamba")
    with pytest.raises(ConfigError, match="leaves out attention layers \\[3\\]"):
        Engine(model, cache_config_for(model, num_slots=64, kv_layers=(1,)))
    for bad in ((3, 1), (1, 1), (4,), [1, 3], (True,)):
        with pytest.raises(ConfigError, match="kv_layers"):
            CacheConfig(num_layers=4, num_kv_heads=1, head_dim=4, num_slots=8, kv_layers=bad)
    assert CacheConfig(num_layers=4, num_kv_heads=1, head_dim=4, num_slots=8, kv_layers=()).kv_layers == ()


def test_lfm2_short_convolutions(no_interpreter: None) -> None:
    """LFM2's short convolutions (`conv` layers: a state of the last kernel - 1 inputs) beside full attention:
    exact, and a next turn reuses the cached prefix."""
    model = build_hybrid("lfm2")
    engine = Engine(model, num_slots=512, page_size=4, dtype=torch.float32, max_context_len=128, max_batch_tokens=16)
    prompts = shared_prefix_prompts(seed=3, groups=1, per_group=2)
    answers = engine.generate(prompts, max_new_tokens=6)
    assert_same_tokens(answers, reference(model, prompts, 6))
    again = [p + a + [4, 5] for p, a in zip(prompts, answers)]
    assert_same_tokens(engine.generate(again, max_new_tokens=6), reference(model, again, 6))
    assert engine.last_stats.prefill_reused > 0
    assert_cache_idle(engine)


def test_hybrid_layers_of_other_families_are_refused() -> None:
    """Inkling declares "hybrid" layers too (attention beside short convolutions), but its attention adds a
    relative-position bias the Engine does not compute: refused by name, not served wrong."""
    config = transformers.InklingTextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                            moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
                                            n_shared_experts=1, local_layer_ids=[])
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(UnsupportedModelError, match=r"'hybrid' layers \[0, 1\].*'inkling_text' is not one"):
        Engine(model, num_slots=64)


@pytest.mark.parametrize("family", ["mamba2", "minimax"])
def test_recurrent_families_not_checked_are_refused(family: str) -> None:
    """Recurrent layers of a family the tests do not check against model.generate are refused by name at
    construction: before, Mamba 2 (no attention layer) failed with an AttributeError and MiniMax (a linear
    attention cache of its own) was accepted and failed mid-generate with a transformers ValueError."""
    if family == "mamba2":
        config = transformers.Mamba2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_heads=2, head_dim=32,
                                           state_size=8, n_groups=1, chunk_size=8)
    else:
        config = transformers.MiniMaxConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                            layer_types=["linear_attention", "full_attention"], num_local_experts=2,
                                            num_experts_per_tok=1)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(UnsupportedModelError, match=rf"recurrent layers \[0.*'{family}' is not one"):
        Engine(model, num_slots=64)
