"""The Engine on today's attention families: sliding windows (Mistral, Qwen2, Gemma 2 with logit
soft-capping, Gemma 3, gpt-oss with attention sinks) and chunked attention (Llama 4, with its
no-RoPE layers). Tiny random models from each family's config class (window 8, chunk 8): shared
prefixes longer than the window, prompts plus outputs longer than the window, pages 1 and 16, pools
too small to keep every token. Greedy output equals `model.generate` (eager attention, which
implements soft-capping and sinks) token for token, a second round reuses cached prefixes, and
the logits of positions computed over a cached prefix equal a full forward's."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from hf_helpers import (VOCAB, assert_cache_idle, assert_same_tokens, cached_reference,  # noqa: F401
                        no_interpreter, one_thread, reference, shared_prefix_prompts, transformers)
from radixkv import GroupSpec, UnsupportedModelError
from radixkv.integrations.layer_groups import layer_groups
from radixkv.integrations.transformers import Engine

WINDOW = 8  # sliding window and chunk size: every prompt and every shared prefix is longer
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
               head_dim=16, max_position_embeddings=512, initializer_range=0.2, bos_token_id=None,
               eos_token_id=None, pad_token_id=None)


def _mistral() -> torch.nn.Module:
    return transformers.MistralForCausalLM(transformers.MistralConfig(**_COMMON, num_hidden_layers=2,
                                                                      sliding_window=WINDOW))


def _qwen2() -> torch.nn.Module:  # layer 0 full, layer 1 sliding (layers from max_window_layers on slide)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        **_COMMON, num_hidden_layers=2, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1))


def _gemma2() -> torch.nn.Module:  # softcap 0.5: small enough that serving without it changes the logits
    return transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        **_COMMON, num_hidden_layers=2, sliding_window=WINDOW, query_pre_attn_scalar=24,
        attn_logit_softcapping=0.5, final_logit_softcapping=20.0))


def _gemma3() -> torch.nn.Module:
    return transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
        **_COMMON, num_hidden_layers=3, sliding_window=WINDOW, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"]))


def _gpt_oss() -> torch.nn.Module:
    return transformers.GptOssForCausalLM(transformers.GptOssConfig(
        **_COMMON, num_hidden_layers=2, sliding_window=WINDOW, num_local_experts=4, num_experts_per_tok=2))


def _llama4() -> torch.nn.Module:  # layers 0-2 chunked with RoPE, layer 3 full without RoPE
    return transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(
        **{**_COMMON, "intermediate_size": 64}, intermediate_size_mlp=128, num_hidden_layers=4,
        attention_chunk_size=WINDOW, num_local_experts=2, interleave_moe_layer_step=2))


FAMILIES: dict[str, Callable[[], torch.nn.Module]] = {
    "mistral": _mistral, "qwen2": _qwen2, "gemma2": _gemma2, "gemma3": _gemma3, "gpt_oss": _gpt_oss,
    "llama4": _llama4}


def build(family: str) -> torch.nn.Module:
    torch.manual_seed(7)
    model = FAMILIES[family]()
    model.set_attn_implementation("eager")  # the reference: soft-capping and sinks as the model defines them
    return model.eval()


@pytest.fixture(scope="module", params=list(FAMILIES))
def model(request: pytest.FixtureRequest, one_thread: None) -> torch.nn.Module:  # noqa: F811
    return build(request.param)


def test_every_family_has_masked_layers(model: torch.nn.Module) -> None:
    """The families test what they claim: each has sliding or chunked layers of size WINDOW."""
    groups = Engine(model, num_slots=64).layer_groups
    assert any(g.kind in ("sliding", "chunked") and WINDOW in (g.window, g.chunk) for g in groups), groups


@pytest.mark.parametrize("page_size,num_slots", [(1, 192), (16, 160)])
def test_greedy_equals_generate_and_second_round_reuses(model: torch.nn.Module, page_size: int, num_slots: int,
                                                        no_interpreter: None) -> None:  # noqa: F811
    first = shared_prefix_prompts(3, groups=2, per_group=3, system=20, own=(1, 12))
    second = [p[:20] + [t % VOCAB for t in range(9 + i, 9 + i + 5 + i)] for i, p in enumerate(first[::2])]
    new_tokens = 14
    assert min(map(len, first)) + new_tokens > 2 * WINDOW
    engine = Engine(model, num_slots=num_slots, page_size=page_size, max_batch_tokens=40, max_context_len=128)
    for prompts in (first, second):
        want = cached_reference(model, prompts, new_tokens)
        got = engine.generate(prompts, max_new_tokens=new_tokens, do_sample=False)
        assert_same_tokens(got, want)
        assert_cache_idle(engine)
        assert engine.last_stats.prefill_reused > 0
        assert engine.last_stats.masked_cascade_calls > 0  # masked layers decoded through shared prefixes
    assert engine.cache.stats.evicted_tokens > 0  # the pool was too small to keep everything
    assert model.config._attn_implementation == "eager"  # restored after generate


@pytest.mark.parametrize("page_size,num_slots,window_slots", [(1, 192, 56), (16, 160, 96)])
def test_window_kv_in_small_pools_of_its_own(model: torch.nn.Module, page_size: int, num_slots: int,
                                             window_slots: int, no_interpreter: None) -> None:  # noqa: F811
    """Window layers keep K/V in a pool of their own, far smaller than what the requests read
    (each request's window is held, older window KV is freed for others, the tree keeps what fits
    for reuse): greedy output still equals model.generate, invariants hold (every open Sequence
    kept the window KV it reads), and a second round reuses cached prefixes. Llama 4's chunked
    layers: a chunk group."""
    groups = tuple(GroupSpec("window" if g.window else "chunk", window_slots, size=g.window or g.chunk, layers=g.layers)
                   for g in layer_groups(model.config) if g.kind in ("sliding", "chunked"))
    engine = Engine(model, num_slots=num_slots, page_size=page_size, max_batch_tokens=40, max_context_len=128,
                    groups=groups)
    assert all(engine.cache.kv_pool.k_buffer[i].shape[0] == window_slots for g in groups for i in g.layers)
    first = shared_prefix_prompts(3, groups=2, per_group=3, system=20, own=(1, 12))
    second = [p[:20] + [t % VOCAB for t in range(9 + i, 9 + i + 5 + i)] for i, p in enumerate(first[::2])]
    for prompts in (first, second):
        got = engine.generate(prompts, max_new_tokens=14, do_sample=False)
        assert_same_tokens(got, cached_reference(model, prompts, 14))
        engine.cache.check_invariants()
        assert engine.last_stats.masked_cascade_calls > 0  # cascade plans read through full_to_window
    assert engine.last_stats.prefill_reused > 0
    for g in engine.cache.groups:
        if g.spec.kind == "chunk" and page_size % g.spec.size == 0:
            assert g.sizes().cached == 0  # every page boundary is a chunk boundary: reuse needs no chunk KV, none kept
        else:
            assert g.evicted_pages > 0  # window KV was freed for other tokens
    assert engine.cache.stats.evicted_tokens > 0


def test_logits_over_a_cached_prefix_equal_a_full_forward(model: torch.nn.Module,
                                                          no_interpreter: None) -> None:  # noqa: F811
    """Logits of positions computed over a cached prefix longer than the window, against one
    uncached forward; far tighter than greedy tokens (serving a window layer as full attention,
    or dropping a cap or a sink, moves these logits by 2 to 10)."""
    prompt = torch.randint(0, VOCAB, (50,), generator=torch.Generator().manual_seed(1)).tolist()
    engine = Engine(model, num_slots=256, page_size=1, max_batch_tokens=16, max_context_len=128)
    engine.score(prompt[:30])
    reused, logits = engine.score(prompt)
    assert reused == 30
    with torch.no_grad():
        want = model(torch.tensor([prompt])).logits[0, reused:]
    torch.testing.assert_close(logits, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", ["gemma2", "gpt_oss"])
def test_interpreted_triton_kernels(family: str, one_thread: None) -> None:  # noqa: F811
    """The Triton kernels (interpreter) with a window and soft-capping, a window and sinks, cascade decode
    included (chunks: test_kernels_variants.py, test_kernels_cascade_masked.py)."""
    model = build(family)
    prompts = shared_prefix_prompts(4, groups=1, per_group=3, system=12, own=(1, 6))
    want = reference(model, prompts, 4)
    engine = Engine(model, num_slots=128, page_size=4, max_batch_tokens=24, max_context_len=64)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=4, do_sample=False), want)
    assert engine.last_stats.prefill_reused > 0
    assert engine.last_stats.masked_cascade_calls > 0  # the masked cascade kernel, interpreted


def test_llama4_position_scaling_limit_is_refused(one_thread: None) -> None:  # noqa: F811
    model = build("llama4")
    model.config.floor_scale = 64  # no-RoPE layers scale queries from position 63 on
    with pytest.raises(UnsupportedModelError, match="max_context_len and max_batch_tokens <= 63"):
        Engine(model, num_slots=64, max_context_len=128)
    Engine(model, num_slots=64, max_context_len=63, max_batch_tokens=32)


def test_a_window_the_model_passes_but_the_config_hides_is_refused(no_interpreter: None,
                                                                   one_thread: None) -> None:  # noqa: F811
    model = build("mistral")
    engine = Engine(model, num_slots=128)
    model.config.sliding_window = 4  # Mistral's attention reads this per call: now it disagrees
    try:
        with pytest.raises(UnsupportedModelError, match="sliding_window=4"):
            engine.generate([[1, 2, 3]], max_new_tokens=2)
    finally:
        model.config.sliding_window = WINDOW
    assert_cache_idle(engine)
