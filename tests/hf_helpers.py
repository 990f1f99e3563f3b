"""Shared by the Engine tests: tiny random models built from configs (nothing downloads), the
`model.generate` reference they are compared with, and the comparison itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple
from weakref import WeakKeyDictionary

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


def build(kind: str, **config: object) -> torch.nn.Module:
    """A tiny seeded random model; `config` overrides _COMMON (e.g. eos_token_id, pad_token_id,
    which transformers copies into `model.generation_config`)."""
    torch.manual_seed({"llama": 1, "qwen2": 2, "mistral": 3}[kind])
    fields = {**_COMMON, **config}
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**fields))
    elif kind == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**fields))
    else:
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**fields, sliding_window=None))
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core box OpenMP workers
    spinning against other processes made these tests 20x slower. Restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    """`model.generate(do_sample=False)` one prompt at a time, with no EOS unless one is given."""
    gen = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos_token_id,
                           pad_token_id=0 if eos_token_id is None else eos_token_id)
    return reference_generate(model, prompts, generation_config=gen)


_REFERENCES: WeakKeyDictionary[torch.nn.Module, dict[tuple[object, ...], Expected]] = WeakKeyDictionary()


def cached_reference(model: torch.nn.Module, prompts: list[list[int]], max_new_tokens: int) -> Expected:
    """`reference` computed once per (model, prompts, max_new_tokens), for tests that compare
    engines of several page sizes or pools with one module-scoped model that nothing mutates."""
    memo = _REFERENCES.setdefault(model, {})
    key = (tuple(map(tuple, prompts)), max_new_tokens)
    if key not in memo:
        memo[key] = reference(model, prompts, max_new_tokens)
    return memo[key]


def reference_generate(model: torch.nn.Module, prompts: list[list[int]], **kwargs: object) -> Expected:
    """`model.generate(**kwargs)` one prompt at a time (sdpa attention, DynamicCache): the model's own
    generation_config supplies every default that `kwargs` leave out."""
    tokens, gaps = [], []
    with torch.no_grad():
        for p in prompts:
            out = model.generate(torch.tensor([p], device=model.device),
                                 attention_mask=torch.ones(1, len(p), dtype=torch.long, device=model.device),
                                 output_logits=True, return_dict_in_generate=True, **kwargs)
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


