"""Engine vs transformers: greedy output must be token-identical to `model.generate(do_sample=False)`
run one prompt at a time, whatever the cache does (prefix reuse, chunked prefill, eviction,
preemption, page size). Tiny models built from configs with seeded random weights, fp32, CPU.

Most tests unset TRITON_INTERPRET (tests/conftest.py sets it) so the kernels run their torch
references; `test_interpreted_triton_kernels` keeps it and goes through the Triton kernels.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GenerationConfig  # noqa: E402

from radixkv.integrations.transformers import Engine  # noqa: E402

VOCAB = 256
# initializer_range 0.2 (HF default 0.02) spreads the logits of a random model, so greedy argmax
# has clear winners and both attention paths agree despite fp32 rounding differences.
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
               initializer_range=0.2, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def _build(kind: str) -> torch.nn.Module:
    torch.manual_seed({"llama": 1, "qwen2": 2, "mistral": 3}[kind])
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**_COMMON))
    elif kind == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**_COMMON))
    else:
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**_COMMON, sliding_window=None))
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core box OpenMP workers
    spinning against other processes made these tests 20x slower. Restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    return _build(request.param)


@pytest.fixture
def no_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


class Expected(NamedTuple):
    tokens: list[list[int]]  # new tokens of each prompt
    gaps: list[list[float]]  # top-1 minus top-2 logit at each of those steps


# A mismatch is excused only where the reference's top two logits lie closer than this: a genuine
# near-tie that fp32 rounding (different summation orders, ~1e-6) may flip. In these tiny models
# 1 step in ~1,000 has a gap under 1e-4; any real bug shows up far from ties.
TIE = 1e-3


def reference(model: torch.nn.Module, prompts: list[list[int]], max_new_tokens: int,
              eos_token_id: int | None = None) -> Expected:
    """`model.generate(do_sample=False)` one prompt at a time (sdpa attention, DynamicCache)."""
    gen = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos_token_id,
                           pad_token_id=0 if eos_token_id is None else eos_token_id,
                           output_logits=True, return_dict_in_generate=True)
    tokens, gaps = [], []
    with torch.no_grad():
        for p in prompts:
            out = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 generation_config=gen)
            tokens.append(out.sequences[0, len(p):].tolist())
            gaps.append([float(t[0] - t[1]) for t in (step[0].topk(2).values for step in out.logits)])
    return Expected(tokens, gaps)


def shared_prefix_prompts(seed: int, groups: int = 2, per_group: int = 4, system: int = 40,
                          own: tuple[int, int] = (1, 24)) -> list[list[int]]:
    """Groups of prompts sharing a long system prompt; one prompt equals its system prompt, one is
    a duplicate, so full-prefix hits and prompt-is-a-prefix-of-another both occur."""
    g = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(groups):
        head = torch.randint(0, VOCAB, (system,), generator=g).tolist()
        prompts.append(head)
        for _ in range(per_group - 1):
            n = int(torch.randint(own[0], own[1], (1,), generator=g))
            prompts.append(head + torch.randint(0, VOCAB, (n,), generator=g).tolist())
        prompts.append(list(prompts[-1]))
    return prompts


def assert_same_tokens(got: list[list[int]], want: Expected) -> None:
    """Token for token, except after a first mismatch at a reference near-tie (gap < TIE)."""
    assert len(got) == len(want.tokens)
    for i, (a, b) in enumerate(zip(got, want.tokens)):
        if a == b:
            continue
        k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if k < len(b) and k < len(a) and want.gaps[i][k] < TIE:
            continue  # a genuine tie in the reference: what follows may legitimately differ
        raise AssertionError(f"prompt {i}: first mismatch at new token {k}: engine {a[k:k + 4]} "
                             f"vs model.generate {b[k:k + 4]} (lengths {len(a)} vs {len(b)}; "
                             f"reference top-2 gap there {want.gaps[i][k] if k < len(b) else None})")


def assert_cache_idle(engine: Engine) -> None:
    """After generate() every Sequence is closed: nothing private, nothing locked."""
    engine.cache.check_invariants()
    sizes = engine.cache.sizes()
    assert sizes.private == 0 and sizes.protected == 0, sizes


@pytest.mark.parametrize("page_size", [1, 16])
def test_shared_prefixes_and_chunked_prefill(model: torch.nn.Module, page_size: int, no_interpreter: None) -> None:
    prompts = shared_prefix_prompts(seed=page_size)
    engine = Engine(model, num_slots=4096, page_size=page_size, dtype=torch.float32,
                    max_context_len=256, max_batch_tokens=24)  # 24 < 40: every prompt is chunked
    got = engine.generate(prompts, max_new_tokens=10)
    assert_same_tokens(got, reference(model, prompts, 10))
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
    """9 requests of up to 102 tokens in a pool of 128 or 192 slots (checked to preempt 4-11 times)."""
    prompts = shared_prefix_prompts(seed=10 + page_size, groups=3, per_group=3, own=(8, 30))
    engine = Engine(model, num_slots=num_slots, page_size=page_size, dtype=torch.float32,
                    max_context_len=128, max_requests=8, max_batch_tokens=48)
    got = engine.generate(prompts, max_new_tokens=32)
    assert_same_tokens(got, reference(model, prompts, 32))
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
    model = _build("mistral")
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
    together = engine.generate(prompts, max_new_tokens=8, temperature=1.0, top_p=0.9, seed=11)
    alone = engine.generate(prompts[:1], max_new_tokens=8, temperature=1.0, top_p=0.9, seed=11)
    assert together[0] == alone[0]
    other_seed = engine.generate(prompts, max_new_tokens=8, temperature=1.0, top_p=0.9, seed=12)
    assert other_seed != together  # 3 x 8 draws from a flat-ish distribution: a collision is ~impossible
    # top_p so small that only the argmax survives: sampling degenerates to greedy.
    nucleus = engine.generate(prompts, max_new_tokens=8, temperature=1.0, top_p=1e-6, seed=11)
    assert_same_tokens(nucleus, reference(model, prompts, 8))


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


def test_interpreted_triton_kernels() -> None:
    """A few tokens through the Triton kernels under TRITON_INTERPRET=1 (set by conftest)."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    model = _build("llama")
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
    model = _build("llama")
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
