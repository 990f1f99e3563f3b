"""What `Engine.generate` accepts as prompts, turned into lists of token ids (or a typed error).

A batch is a list (or tuple) of prompts, or a 2-D integer tensor / array with one prompt per row
(`tokenizer(texts, return_tensors="pt", padding=True).input_ids`, with its `attention_mask`
marking the real tokens). One prompt is a list of ints (Python or numpy integers), a 1-D integer
tensor or array, or a string when the Engine has a tokenizer (encoded as `tokenizer(text)` does,
special tokens included, as `model.generate(**tokenizer(text, return_tensors="pt"))` sees it).
Ids must lie in `[0, vocab_size)`; bools, floats and empty prompts are rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from radixkv.errors import InvalidArgumentError, InvalidTokensError


def int_id(x: Any, what: str) -> int:
    """One integer id: a Python or numpy integer, or a 0-d integer tensor / array (never bool or float)."""
    if isinstance(x, (torch.Tensor, np.ndarray)) and x.ndim == 0:
        x = x.item()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise InvalidTokensError(f"{what} must be an integer id, got {x!r} ({type(x).__name__})")
    return int(x)


def to_batch(prompts: Any, *, vocab_size: int, tokenizer: Any = None, attention_mask: Any = None) -> list[list[int]]:
    """Every prompt of a batch as a list of ids in `[0, vocab_size)`; raises InvalidTokensError or
    InvalidArgumentError naming the prompt and what is wrong with it."""
    if isinstance(prompts, (torch.Tensor, np.ndarray)):
        rows = _rows(prompts, attention_mask)
    else:
        if attention_mask is not None:
            raise InvalidArgumentError("attention_mask goes with a 2-D tensor of prompts (one row each); "
                                       "a list of prompts needs none")
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
            raise InvalidArgumentError(f"prompts must be a list of prompts, got {type(prompts).__name__}; "
                                       f"for one prompt pass [prompt]")
        if prompts and all(isinstance(p, (int, np.integer)) for p in prompts):
            raise InvalidArgumentError("prompts is a flat list of ints; pass a list of prompts, e.g. [[1, 2, 3]]")
        rows = list(prompts)
    return [prompt_ids(p, vocab_size=vocab_size, tokenizer=tokenizer, where=f"prompt {i}") for i, p in enumerate(rows)]


def prompt_ids(prompt: Any, *, vocab_size: int, tokenizer: Any = None, where: str = "prompt") -> list[int]:
    """One prompt as a non-empty list of ids in `[0, vocab_size)`."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise InvalidTokensError(f"{where} is a string but the Engine has no tokenizer: pass token ids, or "
                                     f"build Engine(model, tokenizer=tokenizer)")
        prompt = tokenizer(prompt)["input_ids"]
    if isinstance(prompt, (torch.Tensor, np.ndarray)):
        ids = _array_ids(prompt, where)
    elif isinstance(prompt, Sequence) and not isinstance(prompt, bytes):
        ids = [int_id(t, f"{where}, token {j},") for j, t in enumerate(prompt)]
    else:
        raise InvalidTokensError(f"{where} must be a list of ids, a 1-D integer tensor or array, or a string; "
                                 f"got {type(prompt).__name__}")
    if not ids:
        raise InvalidTokensError(f"{where} is empty: every prompt needs at least one token "
                                 "(the model predicts from it)")
    lo, hi = min(ids), max(ids)
    if lo < 0 or hi >= vocab_size:
        bad = next(j for j, t in enumerate(ids) if not 0 <= t < vocab_size)
        raise InvalidTokensError(f"{where}: token ids must lie in [0, {vocab_size}) (the model's vocab_size), "
                                 f"got {ids[bad]} at position {bad}")
    return ids


def _array_ids(x: torch.Tensor | np.ndarray, where: str) -> list[int]:
    dtype = x.dtype
    integer = (not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool
               if isinstance(x, torch.Tensor) else np.issubdtype(dtype, np.integer))
    if x.ndim != 1 or not integer:
        raise InvalidTokensError(f"{where} must be a 1-D integer tensor or array, got {x.ndim}-D {dtype}")
    return [int(t) for t in x.tolist()]


def _rows(batch: torch.Tensor | np.ndarray, attention_mask: Any) -> list[torch.Tensor | np.ndarray]:
    if batch.ndim != 2:
        raise InvalidArgumentError(f"a tensor of prompts must be 2-D [batch, length], got shape {tuple(batch.shape)}; "
                                   f"for one prompt pass [prompt]")
    if attention_mask is None:
        return list(batch)
    mask = (attention_mask.detach().cpu().numpy() if isinstance(attention_mask, torch.Tensor)
            else np.asarray(attention_mask))
    if mask.shape != tuple(batch.shape):
        raise InvalidArgumentError(f"attention_mask has shape {mask.shape}, the prompts {tuple(batch.shape)}")
    if not np.isin(mask, (0, 1)).all():
        raise InvalidArgumentError("attention_mask must hold only 0 (padding) and 1 (token)")
    return [row[torch.from_numpy(m.astype(bool)) if isinstance(row, torch.Tensor) else m.astype(bool)]
            for row, m in zip(batch, mask)]
