"""`Engine.generate`'s options, resolved the way transformers' `model.generate` resolves them.

Each option takes the first value that is set among: the keyword argument, the `generation_config`
passed to the call, `model.generation_config`, then transformers' global default. So a model whose
generation_config sets `eos_token_id` (an int or a list) stops there unless the call says otherwise,
and `max_new_tokens` / `max_length` come from it too. Lengths follow transformers:

- `max_new_tokens`, when set, wins over `max_length`;
- else `max_length`, when set, is the whole sequence, prompt included (a prompt that already
  reaches it is an error, as in transformers);
- else 20 new tokens, capped at the model's `max_position_embeddings`.

Greedy unless `do_sample=True`; then `temperature` (default 1.0), `top_k` (50) and `top_p` (1.0)
shape the distribution, applied in that order. Passing `temperature`, `top_k` or `top_p` without
sampling is an error (transformers only warns and runs greedy). `pad_token_id` is checked and
otherwise unused: outputs are unpadded lists. Options of transformers that Engine does not
implement (beam search, repetition penalties, ...) are refused when set, whether by the call or by
the model's generation_config, unless set to the value that turns them off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from radixkv.errors import InvalidArgumentError
from radixkv.integrations.prompts import int_id
from radixkv.integrations.sampling import SamplingParams

DEFAULT_NEW_TOKENS = 20  # transformers' default when neither max_new_tokens nor max_length is set
DEFAULTS: dict[str, Any] = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
OPTIONS = ("max_new_tokens", "max_length", "eos_token_id", "pad_token_id", "do_sample", "temperature", "top_k",
           "top_p")
SAMPLING = ("temperature", "top_k", "top_p", "typical_p", "min_p", "epsilon_cutoff", "eta_cutoff", "top_h")
# transformers options Engine does not implement, at the value that turns each off (None = unset).
NEUTRAL: dict[str, Any] = {
    "num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1, "penalty_alpha": None, "dola_layers": None,
    "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_length": 0,
    "min_new_tokens": 0, "bad_words_ids": None, "force_words_ids": None, "constraints": None,
    "suppress_tokens": None, "begin_suppress_tokens": None, "forced_bos_token_id": None,
    "forced_eos_token_id": None, "sequence_bias": None, "stop_strings": None, "guidance_scale": None,
    "exponential_decay_length_penalty": None, "max_time": None, "watermarking_config": None,
    "typical_p": 1.0, "min_p": None, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None,
    "return_dict_in_generate": False, "output_scores": False, "output_logits": False,
    "output_attentions": False, "output_hidden_states": False, "token_healing": False,
}


@dataclass(frozen=True)
class GenerateOptions:
    max_new_tokens: int | None  # None: from max_length, per prompt
    max_length: int | None  # whole sequence, prompt included; used only without max_new_tokens
    eos: frozenset[int]  # stop right after emitting any of these (the output includes it)
    sampling: SamplingParams
    max_position: int | None  # the model's max_position_embeddings: caps the default length

    def new_tokens(self, prompt_len: int, where: str) -> int:
        """How many tokens a prompt of `prompt_len` may generate at most."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if self.max_length is not None:
            if prompt_len >= self.max_length:
                raise InvalidArgumentError(f"{where} has {prompt_len} tokens but max_length is {self.max_length} "
                                           f"(prompt included); raise max_length or set max_new_tokens")
            return self.max_length - prompt_len
        cap = self.max_position - prompt_len if self.max_position else DEFAULT_NEW_TOKENS
        return max(0, min(DEFAULT_NEW_TOKENS, cap))


def resolve(model: Any, generation_config: Any, options: dict[str, Any], unknown: dict[str, Any],
            vocab_size: int, seed: int = 0) -> GenerateOptions:
    """Merge the call's options with the configs (see the module docstring); raises InvalidArgumentError."""
    _check_unknown(unknown)
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise InvalidArgumentError(f"seed must be an integer, got {seed!r}")
    layers = [("argument", {**options, **unknown})]
    if generation_config is not None:
        if not hasattr(generation_config, "to_dict"):
            raise InvalidArgumentError(f"generation_config must be a transformers GenerationConfig, got "
                                       f"{type(generation_config).__name__}; pass max_new_tokens=... by keyword")
        layers.append(("generation_config", _set_fields(generation_config)))
    layers.append(("the model's generation_config", _set_fields(getattr(model, "generation_config", None))))

    def pick(name: str) -> tuple[Any, str]:
        return next(((d[name], src) for src, d in layers if d.get(name) is not None), (DEFAULTS.get(name), "default"))

    do_sample = pick("do_sample")[0]
    if not isinstance(do_sample, bool):
        raise InvalidArgumentError(f"do_sample must be True or False, got {do_sample!r}")
    _check_unsupported(pick, do_sample)
    if not do_sample:
        _check_not_sampling(layers[0][1])
    eos, eos_src = pick("eos_token_id")
    pad, pad_src = pick("pad_token_id")
    if pad is not None:
        _in_vocab(int_id(pad, f"pad_token_id ({pad_src})"), f"pad_token_id ({pad_src})", vocab_size)
    return GenerateOptions(
        max_new_tokens=_count(*pick("max_new_tokens"), "max_new_tokens", minimum=0),
        max_length=_count(*pick("max_length"), "max_length", minimum=1),
        eos=_eos_set(eos, f"eos_token_id ({eos_src})", vocab_size),
        sampling=_sampling(pick, do_sample, int(seed)),
        max_position=getattr(model.config, "max_position_embeddings", None))


def _set_fields(config: Any) -> dict[str, Any]:
    """The fields a GenerationConfig sets; a value equal to the class default counts as unset
    (transformers 4.x fills every field with its default; 5.x leaves them None)."""
    if config is None:
        return {}
    from transformers import GenerationConfig

    defaults = GenerationConfig().to_dict()
    return {k: v for k, v in config.to_dict().items() if v is not None and v != defaults.get(k)}


def _check_unknown(unknown: dict[str, Any]) -> None:
    for name, value in unknown.items():
        if name not in NEUTRAL:
            import difflib

            close = difflib.get_close_matches(name, [*OPTIONS, *NEUTRAL, "seed", "return_text"], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgumentError(f"unknown generate option {name!r}{hint}; Engine.generate takes "
                                       f"{', '.join(OPTIONS)}, seed, return_text, attention_mask, generation_config")


def _check_not_sampling(explicit: dict[str, Any]) -> None:
    """Sampling options passed to a greedy call: an error rather than silently unused."""
    given = [n for n in SAMPLING if explicit.get(n) is not None and explicit[n] != NEUTRAL.get(n)
             and not (n == "temperature" and explicit[n] == 0)]
    if given:
        raise InvalidArgumentError(f"sampling options ({', '.join(given)}) are used only with do_sample=True: "
                                   f"pass do_sample=True (as in transformers), or leave them out for greedy decoding")


def _check_unsupported(pick: Any, do_sample: bool) -> None:
    for name, neutral in NEUTRAL.items():
        if name in SAMPLING and not do_sample:
            continue  # transformers ignores sampling warpers when decoding greedily
        value, src = pick(name)
        if value is not None and value != neutral and value != []:
            raise InvalidArgumentError(f"{name}={value!r} ({src}) is not implemented by Engine.generate; pass "
                                       f"{name}={neutral!r} to run without it, or use model.generate")


def _count(value: Any, src: str, name: str, *, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an integer >= {minimum}, got {value!r} ({src})")
    return int(value)


def _eos_set(eos: Any, what: str, vocab_size: int) -> frozenset[int]:
    if eos is None:
        return frozenset()
    if isinstance(eos, torch.Tensor) and eos.ndim == 1:
        eos = eos.tolist()
    items = eos if isinstance(eos, (list, tuple, set, frozenset)) else [eos]
    return frozenset(_in_vocab(int_id(t, what), what, vocab_size) for t in items)


def _in_vocab(token: int, what: str, vocab_size: int) -> int:
    if not 0 <= token < vocab_size:
        raise InvalidArgumentError(f"{what} is {token}, outside the model's vocabulary [0, {vocab_size})")
    return token


def _sampling(pick: Any, do_sample: bool, seed: int) -> SamplingParams:
    if not do_sample:
        return SamplingParams(temperature=0.0, seed=seed)
    (temperature, _), (top_k, k_src), (top_p, _) = (pick(n) for n in ("temperature", "top_k", "top_p"))
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise InvalidArgumentError(f"do_sample=True needs temperature > 0, got {temperature!r}; for greedy "
                                   f"decoding pass do_sample=False")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
        raise InvalidArgumentError(f"top_p must be a number in (0, 1], got {top_p!r}")
    return SamplingParams(float(temperature), float(top_p), seed, _count(top_k, k_src, "top_k", minimum=0))
