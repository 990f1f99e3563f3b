"""Validation at the public boundary: tokens and slots in, compact numpy arrays out.

Tokens may be a list of ints, a 1-D integer numpy array or a 1-D integer torch tensor, with ids
in [0, 2**31 - 1]; bools, floats, other ranks and out-of-range ids raise InvalidTokensError.
Slots follow the same rules against the pool size and must be distinct (InvalidSlotsError).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from radixkv.errors import InvalidSlotsError, InvalidTokensError

MAX_TOKEN_ID = 2**31 - 1
TokensLike = Sequence[int] | np.ndarray | torch.Tensor


def _as_int_array(values: Any, what: str, error: type[Exception]) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        if values.dtype == torch.bool or values.is_floating_point() or values.is_complex():
            raise error(f"{what} must be an integer tensor, got dtype {values.dtype}")
        arr = values.detach().cpu().numpy()
    elif isinstance(values, np.ndarray):
        arr = values
    elif isinstance(values, (list, tuple, range)):
        if any(type(v) is bool for v in values):
            raise error(f"{what} must be ints, got a bool")
        arr = np.asarray(values) if len(values) else np.empty(0, dtype=np.int64)
    else:
        raise error(f"{what} must be a list of ints, a 1-D numpy array or a 1-D tensor, "
                    f"got {type(values).__name__}")
    if arr.ndim != 1:
        raise error(f"{what} must be 1-D, got shape {tuple(arr.shape)}")
    if arr.dtype.kind not in "iu":
        raise error(f"{what} must hold integers, got dtype {arr.dtype}")
    return arr


def as_tokens(tokens: TokensLike) -> np.ndarray:
    """int32 `[n]` view or copy of `tokens`; raises InvalidTokensError. Never mutates its input."""
    arr = _as_int_array(tokens, "tokens", InvalidTokensError)
    fits = arr.dtype.itemsize < 4 or arr.dtype == np.int32  # cannot exceed MAX_TOKEN_ID
    if len(arr) and (arr.min() < 0 or (not fits and arr.max() > MAX_TOKEN_ID)):
        raise InvalidTokensError(
            f"token ids must lie in [0, {MAX_TOKEN_ID}], got min {arr.min()} and max {arr.max()}")
    return arr.astype(np.int32, copy=False)


class SlotValidator:
    """Turns slots into int64 `[n]` of distinct slots in [0, num_slots), or raises InvalidSlotsError.

    Distinctness costs O(n), not a sort: write each slot's own index into a scratch table
    (`int32 [num_slots]`) and read it back; a repeated slot reads a later index than its own.
    """

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._scratch = np.zeros(num_slots, dtype=np.int32)
        self._order = np.arange(num_slots, dtype=np.int32)  # slices of it number a call's slots

    def __call__(self, slots: TokensLike) -> np.ndarray:
        arr = _as_int_array(slots, "slots", InvalidSlotsError)
        if len(arr) and (arr.min() < 0 or arr.max() >= self.num_slots):
            raise InvalidSlotsError(
                f"slots must lie in [0, {self.num_slots}), got min {arr.min()} and max {arr.max()}")
        arr = arr.astype(np.int64, copy=False)
        if len(arr) > self.num_slots:  # then some slot repeats
            raise InvalidSlotsError("slots must be distinct; more slots than the pool holds")
        order = self._order[:len(arr)]
        self._scratch[arr] = order
        if not np.array_equal(self._scratch[arr], order):
            raise InvalidSlotsError("slots must be distinct; the same slot appears twice")
        return arr


def as_count(n: Any, what: str) -> int:
    """A non-negative int (not a bool)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{what} must be a non-negative int, got {n!r}")
    return int(n)
