"""Engine vs transformers: greedy output must be token-identical to `model.generate(do_sample=False)`
run one prompt at a time, whatever the cache does (prefix reuse, chunked prefill, eviction,
preemption, page size). Tiny models built from configs with seeded random weights, fp32, CPU.

Most tests unset TRITON_INTERPRET (tests/conftest.py sets it) so the kernels run their torch
references; `test_interpreted_triton_kernels` keeps it and goes through the Triton kernels.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("transformers")
from hf_helpers import (VOCAB, Expected, assert_cache_idle, assert_same_tokens, build,  # noqa: E402, F401 (fixtures)
                        cached_reference, no_interpreter, one_thread, reference, shared_prefix_prompts)

from radixkv.integrations.transformers import Engine  # noqa: E402


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    return build(request.param)


@pytest.mark.parametrize("page_size", [1, 16])
def test_shared_prefixes_and_chunked_prefill(model: torch.nn.Module, page_size: int, no_interpreter: None) -> None:
    prompts = shared_prefix_prompts(seed=1)  # one set for both page sizes: one reference
    engine = Engine(model, num_slots=4096, page_size=page_size, dtype=torch.float32,
                    max_context_len=256, max_batch_tokens=24)  # 24 < 40: every prompt is chunked
    got = engine.generate(prompts, max_new_tokens=10)
    assert_same_tokens(got, cached_reference(model, prompts, 10))
    stats = engine.last_stats
    # Every prompt but the first of its group reuses the whole-page part of the 40-token system
    # prompt, even those that arrive in the same step (the in-batch prefix check defers them).
    assert stats.prefill_reused >= 2 * 4 * (40 // page_size * page_size), stats
    assert stats.prefill_computed + stats.prefill_reused == stats.prompt_tokens  # no preemption here
    assert stats.preemptions == 0
    assert stats.output_tokens == 10 * len(prompts) and len(stats.ttft_s) == len(prompts)
    profile = stats.profile()
    assert all(v >= 0 for v in profile.values()), profile
    assert sum(profile.values()) == pytest.approx(stats.wall_s)
    assert_cache_idle(engine)


@pytest.mark.parametrize("page_size, num_slots", [(1, 128), (16, 192)])
def test_small_pool_evicts_and_preempts(model: torch.nn.Module, page_size: int, num_slots: int,
                                        no_interpreter: None) -> None:
    """9 requests of up to 102 tokens in a pool of 128 or 192 slots: requests are preempted (asserted)."""
    prompts = shared_prefix_prompts(seed=11, groups=3, per_group=3, own=(8, 30))  # both page sizes: one reference
    engine = Engine(model, num_slots=num_slots, page_size=page_size, dtype=torch.float32,
                    max_context_len=128, max_requests=8, max_batch_tokens=48)
    got = engine.generate(prompts, max_new_tokens=32)
    assert_same_tokens(got, cached_reference(model, prompts, 32))
    stats = engine.last_stats
    assert stats.preemptions > 0, "the pool was meant to be too small for every request at once"
    # More KV was written than the pool holds, so cached tokens had to be evicted along the way.
    assert stats.prefill_computed + stats.output_tokens > num_slots
    assert_cache_idle(engine)


def test_next_turn_reuses_committed_output(model: torch.nn.Module, no_interpreter: None) -> None:
    """Multi-turn: the second call's prompts are the first call's prompt + answer + a new message;
    prompt and answer come from the cache (answer minus its last token, whose KV never exists)."""
    first = shared_prefix_prompts(seed=3, groups=1, per_group=3)
    engine = Engine(model, num_slots=2048, page_size=1, dtype=torch.float32, max_context_len=256)
    answers = engine.generate(first, max_new_tokens=8)
    second = [p + a + [7, 8, 9] for p, a in zip(first, answers)]
    got = engine.generate(second, max_new_tokens=8)
    assert_same_tokens(got, reference(model, second, 8))
    assert engine.last_stats.prefill_reused == sum(len(p) + len(a) - 1 for p, a in zip(first, answers))


def test_eos_stops_a_request(model: torch.nn.Module, no_interpreter: None) -> None:
    prompts = shared_prefix_prompts(seed=4, groups=1, per_group=3)
    free_run = reference(model, prompts, 12).tokens
    eos = free_run[1][5]  # prompt 1 must stop at its 6th token (or earlier if eos shows up before)
    engine = Engine(model, num_slots=2048, dtype=torch.float32, max_context_len=256)
    got = engine.generate(prompts, max_new_tokens=12, eos_token_id=eos)
    assert_same_tokens(got, reference(model, prompts, 12, eos_token_id=eos))
    assert len(got[1]) <= 6 and got[1][-1] == eos


def test_mistral_and_model_left_unchanged(no_interpreter: None) -> None:
    model = build("mistral")
    before = model.config._attn_implementation
    prompts = shared_prefix_prompts(seed=5, groups=1, per_group=3)
    engine = Engine(model, num_slots=1024, page_size=16, dtype=torch.float32, max_context_len=256)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=8), reference(model, prompts, 8))
    assert model.config._attn_implementation == before


def test_cached_prefix_logits_match_no_cache_forward(model: torch.nn.Module, no_interpreter: None) -> None:
    prompts = shared_prefix_prompts(seed=6, groups=1, per_group=2)
    engine = Engine(model, num_slots=1024, page_size=16, dtype=torch.float32, max_context_len=256)
    engine.generate(prompts[:1], max_new_tokens=1)  # caches the 40-token system prompt (2 pages)
    reused, logits = engine.score(prompts[1])
    assert reused == 32
    with torch.no_grad():
        full = model(torch.tensor([prompts[1]])).logits[0, reused:]
    # fp32: two attention implementations that differ in summation order, ~1e-6 apart.
    torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-4)
    assert_cache_idle(engine)


def test_sampling_is_seeded_and_independent_of_batching(model: torch.nn.Module, no_interpreter: None) -> None:
    prompts = shared_prefix_prompts(seed=7, groups=1, per_group=3)
    engine = Engine(model, num_slots=2048, dtype=torch.float32, max_context_len=256)
    sampled = dict(max_new_tokens=8, do_sample=True, top_k=0, top_p=0.9)
    together = engine.generate(prompts, **sampled, seed=11)
    alone = engine.generate(prompts[:1], **sampled, seed=11)
    assert together[0] == alone[0]
    other_seed = engine.generate(prompts, **sampled, seed=12)
    assert other_seed != together  # 3 x 8 draws from a flat-ish distribution: a collision is ~impossible
    # top_p so small, or top_k = 1: only the argmax survives and sampling degenerates to greedy.
    greedy = reference(model, prompts, 8)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=8, do_sample=True, top_p=1e-6, seed=11), greedy)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=8, do_sample=True, top_k=1, seed=11), greedy)


def test_rejects_requests_that_cannot_fit(model: torch.nn.Module, no_interpreter: None) -> None:
    engine = Engine(model, num_slots=64, dtype=torch.float32, max_context_len=128)
    with pytest.raises(ValueError, match="num_slots"):
        engine.generate([[1] * 60], max_new_tokens=8)
    with pytest.raises(ValueError, match="max_context_len"):
        engine.generate([[1] * 10], max_new_tokens=200)
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[]], max_new_tokens=2)
    with pytest.raises(ValueError, match="max_new_tokens must be"):
        engine.generate([[1, 2]], max_new_tokens=-1)
    with pytest.raises(ValueError, match="token ids"):
        engine.generate([[1, VOCAB]], max_new_tokens=2)
    assert engine.generate([[1, 2, 3]], max_new_tokens=0) == [[]]
    assert_cache_idle(engine)


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "512"])
def test_bad_engine_arguments_cost_no_forward(model: torch.nn.Module, bad: object) -> None:
    """An argument error is raised before the construction's probe forward runs, and leaves the model as it was."""
    calls: list[int] = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        model.train()
        with pytest.raises(ValueError, match="max_batch_tokens must be"):
            Engine(model, max_batch_tokens=bad, dtype=torch.float32)
        assert calls == [] and model.training
    finally:
        handle.remove()
        model.eval()


def test_interpreted_triton_kernels() -> None:
    """A few tokens through the Triton kernels under TRITON_INTERPRET=1 (set by conftest)."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    model = build("llama")
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 10, 11], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    # A 6-token budget chunks the third prompt while the first two decode: mixed steps, where
    # decode tokens go to decode_attention and the chunk to extend_attention in one forward.
    engine = Engine(model, num_slots=64, page_size=4, dtype=torch.float32, max_context_len=32,
                    max_batch_tokens=6)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=3), reference(model, prompts, 3))


def test_error_mid_generation_closes_every_sequence(model: torch.nn.Module, no_interpreter: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine(model, num_slots=1024, page_size=4, dtype=torch.float32, max_context_len=256)
    forward, calls = engine._forward, []

    def failing_forward(*args: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected")
        return forward(*args)

    monkeypatch.setattr(engine, "_forward", failing_forward)
    with pytest.raises(RuntimeError, match="injected"):
        engine.generate(shared_prefix_prompts(seed=8, groups=1, per_group=3), max_new_tokens=8)
    assert_cache_idle(engine)
    monkeypatch.setattr(engine, "_forward", forward)
    prompts = shared_prefix_prompts(seed=9, groups=1, per_group=2)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=4), reference(model, prompts, 4))


def test_one_token_budget_and_two_rows(no_interpreter: None) -> None:
    """Prefill one token per forward and only two req_to_token rows: slow, but the same tokens."""
    model = build("llama")
    prompts = shared_prefix_prompts(seed=3, groups=2, per_group=2, system=12, own=(1, 6))
    engine = Engine(model, num_slots=256, page_size=4, dtype=torch.float32, max_context_len=64,
                    max_requests=2, max_batch_tokens=1)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=4), reference(model, prompts, 4))
    assert_cache_idle(engine)


def test_tie_excuse_covers_only_near_ties() -> None:
    want = Expected(tokens=[[1, 2, 3]], gaps=[[0.5, 2e-4, 0.5]])
    assert_same_tokens([[1, 9, 9]], want)  # diverges at a near-tie: excused
    with pytest.raises(AssertionError, match="first mismatch at new token 0"):
        assert_same_tokens([[7, 2, 3]], want)
    with pytest.raises(AssertionError, match="lengths 2 vs 3"):
        assert_same_tokens([[1, 2]], want)
