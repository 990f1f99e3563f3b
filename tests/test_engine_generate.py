"""Engine.generate follows transformers: defaults from `model.generation_config` (EOS lists, pad,
lengths), keyword overrides, the same prompt forms, typed errors. Every check compares with
`model.generate` on the same tiny random model (Llama and Qwen2 with EOS and pad configured)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from hf_helpers import (VOCAB, assert_same_tokens, build, no_interpreter, one_thread,  # noqa: E402, F401 (fixtures)
                        reference_generate, shared_prefix_prompts)

from radixkv import InvalidTokensError, RadixKVError  # noqa: E402
from radixkv.errors import InvalidArgumentError  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402

PAD = 0
PROMPTS = shared_prefix_prompts(seed=21, groups=1, per_group=3, system=12, own=(2, 9))


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    """A model whose config (hence generation_config) sets pad and a two-token EOS list; the first EOS
    is a token the model emits early for PROMPTS[1], so a request really stops there."""
    free_run = reference_generate(build(request.param, pad_token_id=PAD), PROMPTS, max_new_tokens=12,
                                  do_sample=False).tokens
    eos = [free_run[1][3], VOCAB - 1]
    m = build(request.param, pad_token_id=PAD, eos_token_id=eos)
    assert m.generation_config.eos_token_id == eos and m.generation_config.pad_token_id == PAD
    return m


def engine_for(model: torch.nn.Module, **kwargs: object) -> Engine:
    return Engine(model, num_slots=2048, page_size=4, dtype=torch.float32, max_context_len=256, **kwargs)


def test_generation_config_eos_pad_and_default_length(model: torch.nn.Module, no_interpreter: None) -> None:
    got = engine_for(model).generate(PROMPTS)  # no option at all: everything from generation_config
    want = reference_generate(model, PROMPTS)
    assert_same_tokens(got, want)
    eos = set(model.generation_config.eos_token_id)
    assert len(got[1]) <= 4 and got[1][-1] in eos  # stopped at the configured EOS, which is kept
    assert any(len(g) == 20 for g in got)  # transformers' default: 20 new tokens


def test_lengths_from_config_and_arguments(model: torch.nn.Module, no_interpreter: None) -> None:
    engine = engine_for(model)
    model.generation_config.max_new_tokens = 3
    try:
        assert_same_tokens(engine.generate(PROMPTS), reference_generate(model, PROMPTS))
        assert_same_tokens(engine.generate(PROMPTS, max_new_tokens=6),
                           reference_generate(model, PROMPTS, max_new_tokens=6))
    finally:
        model.generation_config.max_new_tokens = None
    longest = max(map(len, PROMPTS))
    for p in PROMPTS:  # max_length counts the prompt: each prompt gets what is left of it
        assert_same_tokens(engine.generate([p], max_length=longest + 5),
                           reference_generate(model, [p], max_length=longest + 5))
    with pytest.raises(ValueError):
        reference_generate(model, PROMPTS[:1], max_length=len(PROMPTS[0]))
    with pytest.raises(InvalidArgumentError, match="max_length"):
        engine.generate(PROMPTS[:1], max_length=len(PROMPTS[0]))


@pytest.mark.parametrize("eos", [np.int64, torch.tensor, lambda t: [np.int32(t)], lambda t: torch.tensor([t])],
                         ids=["np.int64", "0-d tensor", "list of np.int32", "1-D tensor"])
def test_explicit_eos_overrides_config(model: torch.nn.Module, eos, no_interpreter: None) -> None:
    stop = reference_generate(model, PROMPTS, eos_token_id=None, max_new_tokens=10).tokens[0][2]
    got = engine_for(model).generate(PROMPTS, max_new_tokens=10, eos_token_id=eos(stop))
    assert_same_tokens(got, reference_generate(model, PROMPTS, max_new_tokens=10, eos_token_id=stop))
    assert got[0][-1] == stop


def test_prompt_forms_agree(model: torch.nn.Module, no_interpreter: None) -> None:
    engine = engine_for(model)
    want = reference_generate(model, PROMPTS, max_new_tokens=6)
    assert_same_tokens(engine.generate(PROMPTS, max_new_tokens=6), want)
    assert_same_tokens(engine.generate([torch.tensor(p) for p in PROMPTS], max_new_tokens=6), want)
    assert_same_tokens(engine.generate(tuple(np.array(p, dtype=np.int32) for p in PROMPTS), max_new_tokens=6), want)
    # A left-padded 2-D batch, as tokenizer(..., padding=True, return_tensors="pt") gives it.
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    assert_same_tokens(engine.generate(ids, attention_mask=mask, max_new_tokens=6), want)
    same_len = [p[:5] for p in PROMPTS]
    assert_same_tokens(engine.generate(np.array(same_len), max_new_tokens=6),
                       reference_generate(model, same_len, max_new_tokens=6))


def _tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer built in memory (nothing downloads): word i has id i, BOS prepended."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, VOCAB)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                pad_token="<pad>", unk_token="<unk>")


def test_strings_with_a_tokenizer(model: torch.nn.Module, no_interpreter: None) -> None:
    tok = _tokenizer()
    texts = ["w5 w9 w17 w33 w60", "w5 w9 w17 w40"]
    engine = engine_for(model, tokenizer=tok)
    want_ids, want_text = [], []
    for t in texts:
        inputs = tok(t, return_tensors="pt")
        out = model.generate(**inputs, max_new_tokens=8)[0, inputs.input_ids.shape[1]:]
        want_ids.append(out.tolist())
        want_text.append(tok.decode(out, skip_special_tokens=True))
    assert engine.generate(texts, max_new_tokens=8) == want_ids
    assert engine.generate(texts, max_new_tokens=8, return_text=True) == want_text
    reused, _ = engine.score(texts[0])  # score takes the same prompt forms
    assert reused > 0


def test_sampling_settings_from_config(model: torch.nn.Module, no_interpreter: None) -> None:
    """do_sample and top_k from generation_config apply: top_k = 1 leaves only the argmax."""
    model.generation_config.do_sample, model.generation_config.top_k = True, 1
    try:
        got = engine_for(model).generate(PROMPTS, max_new_tokens=6, seed=5)
    finally:
        model.generation_config.do_sample, model.generation_config.top_k = None, None
    assert_same_tokens(got, reference_generate(model, PROMPTS, max_new_tokens=6, do_sample=False))


def test_unimplemented_option_in_config_is_refused_until_turned_off(model: torch.nn.Module,
                                                                   no_interpreter: None) -> None:
    engine = engine_for(model)
    model.generation_config.repetition_penalty = 1.3
    try:
        with pytest.raises(InvalidArgumentError, match="repetition_penalty=1.3"):
            engine.generate(PROMPTS, max_new_tokens=4)
        got = engine.generate(PROMPTS, max_new_tokens=4, repetition_penalty=1.0)
        assert_same_tokens(got, reference_generate(model, PROMPTS, max_new_tokens=4, repetition_penalty=1.0))
    finally:
        model.generation_config.repetition_penalty = None


@pytest.mark.parametrize("prompts, kwargs, error, match", [
    ([[1.9, 2.7]], {}, InvalidTokensError, "integer id"),
    ([[True, 2]], {}, InvalidTokensError, "integer id"),
    ([torch.tensor([1.0, 2.0])], {}, InvalidTokensError, "integer tensor"),
    (["hello"], {}, InvalidTokensError, "tokenizer"),
    ([[1, VOCAB]], {}, InvalidTokensError, r"\[0, 256\)"),
    ([[]], {}, InvalidTokensError, "at least one token"),
    ([1, 2, 3], {}, InvalidArgumentError, "list of prompts"),
    ("hello", {}, InvalidArgumentError, "list of prompts"),
    ([[1, 2]], {"max_new_token": 3}, InvalidArgumentError, "did you mean 'max_new_tokens'"),
    ([[1, 2]], {"num_beams": 2}, InvalidArgumentError, "not implemented"),
    ([[1, 2]], {"temperature": 0.7}, InvalidArgumentError, "do_sample=True"),
    ([[1, 2]], {"do_sample": True, "temperature": 0.0}, InvalidArgumentError, "temperature > 0"),
    ([[1, 2]], {"eos_token_id": 2.0}, InvalidTokensError, "integer id"),
    ([[1, 2]], {"eos_token_id": VOCAB}, InvalidArgumentError, "outside the model's vocabulary"),
    ([[1, 2]], {"max_new_tokens": -1}, InvalidArgumentError, "max_new_tokens must be an integer >= 0"),
    ([[1, 2]], {"max_new_tokens": 2.5}, InvalidArgumentError, "max_new_tokens must be an integer"),
    ([[1, 2]], {"return_text": True}, InvalidArgumentError, "tokenizer"),
    ([[1, 2]], {"seed": "7"}, InvalidArgumentError, "seed must be an integer"),
    ([[1, 2]], {"do_sample": True, "top_p": "0.9"}, InvalidArgumentError, "top_p must be a number"),
    ([[1, 2]], {"attention_mask": [[1, 1]]}, InvalidArgumentError, "2-D tensor"),
])
def test_bad_input_raises_a_typed_error(model: torch.nn.Module, prompts: object, kwargs: dict, error: type,
                                        match: str, no_interpreter: None) -> None:
    engine = engine_for(model)
    with pytest.raises(error, match=match) as info:
        engine.generate(prompts, **kwargs)
    assert isinstance(info.value, RadixKVError) and isinstance(info.value, ValueError)
    assert engine.cache.sizes().private == 0  # nothing was opened before the check


def test_engine_options_are_checked(model: torch.nn.Module) -> None:
    with pytest.raises(InvalidArgumentError, match="did you mean \\['num_slots'\\]"):
        Engine(model, num_slot=64)
    with pytest.raises(InvalidArgumentError, match="max_batch_tokens"):
        Engine(model, max_batch_tokens=0)
