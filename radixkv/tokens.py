"""Validation at the public boundary: tokens, slots and counts in, compact numpy arrays and ints out.

Tokens may be a list of ints, a 1-D integer numpy array or a 1-D integer torch tensor, with ids
in [0, 2**31 - 1]; bools, floats, strings, ragged or nested lists, other ranks and out-of-range ids
raise InvalidTokensError. Slots follow the same rules against the pool size (InvalidSlotsError).
Counts and priorities are ints, never bools (InvalidArgumentError). Nothing here mutates its input.
"""

from __future__ import annotations

from typing import Any, Callable, Final, Sequence, TypeAlias

import numpy as np
import torch

from radixkv.core_loader import native
from radixkv.errors import InvalidArgumentError, InvalidSlotsError, InvalidTokensError

MAX_TOKEN_ID = 2**31 - 1
# Final: compiled, a C static each (a pointer read), not a module-dict lookup (and `np.` a getattr) per use
_max: Final = np.maximum.reduce  # no Python wrapper
_eq: Final = np.equal
_argmin: Final = np.ndarray.argmin
_NDARRAY: Final = np.ndarray
TokensLike: TypeAlias = Sequence[int] | np.ndarray | torch.Tensor
# Public arguments a call validates itself, raising a typed RadixKVError for a bad one. Typed Any,
# named for what they should be: the compiled core (radixkv/build.py) checks a declared type at the
# call, which would raise TypeError (and reject numpy integers) before the call's own check.
IntArg: TypeAlias = Any  # an int or numpy integer, never a bool (as_count, as_priority)
SecondsArg: TypeAlias = Any  # a positive, finite number of seconds (radix/pins.py's as_ttl)
SequenceArg: TypeAlias = Any  # an open Sequence of this cache (SequenceTable.get)
ExtraKeysArg: TypeAlias = Any  # radixkv.keys.ExtraKeys, a dict of its fields, or None (as_extra_keys)
_TENSOR: Final = torch.Tensor
_TORCH_INTS = frozenset([torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
_INT_TYPES = frozenset([int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
_I32: Final = np.dtype(np.int32)  # the canonical descriptors: `is` is a pointer test, `==` a conversion
_I64: Final = np.dtype(np.int64)
_U64: Final = np.dtype(np.uint64)


def _as_int_array(values: Any, what: str, error: type[Exception]) -> np.ndarray:
    if isinstance(values, np.ndarray):
        arr = values
    elif isinstance(values, torch.Tensor):
        if values.dtype not in _TORCH_INTS:
            raise error(f"{what} must be an integer tensor, got dtype {values.dtype}")
        arr = values.numpy() if values.is_cpu else values.cpu().numpy()  # integer tensors need no grad
        if arr.ndim == 1:
            return arr
    elif isinstance(values, (list, tuple, range)):
        arr = _list_to_array(values, what, error)
    else:
        raise error(f"{what} must be a list of ints, a 1-D numpy array or a 1-D tensor, "
                    f"got {type(values).__name__}")
    if arr.ndim != 1:
        raise error(f"{what} must be 1-D, got shape {tuple(arr.shape)}")
    if arr.dtype.kind not in "iu":
        raise error(f"{what} must hold integers, got dtype {arr.dtype}")
    return arr


def _list_to_array(values: Sequence[Any], what: str, error: type[Exception]) -> np.ndarray:
    if not len(values):
        return np.empty(0, dtype=np.int64)
    kinds = set(map(type, values))
    if not kinds <= _INT_TYPES:  # bools, floats, strings, nested lists, None...
        odd = next(k for k in kinds if k not in _INT_TYPES)
        raise error(f"{what} must be ints, got a {odd.__name__}")
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        raise error(f"{what} hold an id outside the int64 range") from None


def as_tokens(tokens: TokensLike) -> np.ndarray:
    """int32 `[n]` view or copy of `tokens`; raises InvalidTokensError."""
    arr = int32_tokens(tokens)
    return non_negative(arr) if arr is tokens else arr


def int32_tokens(tokens: TokensLike) -> np.ndarray:
    """as_tokens, except that a 1-D int32 numpy array comes back as it is, its ids unchecked: whoever
    called checks them (non_negative), or the part of them no earlier check covered."""
    arr: Any = tokens
    if type(arr) is _NDARRAY and arr.dtype is _I32 and arr.ndim == 1:  # the hot path
        return arr
    arr = _as_int_array(tokens, "tokens", InvalidTokensError)
    if not len(arr):
        return arr.astype(_I32, copy=False)
    if arr.dtype is _I32:
        return non_negative(arr)
    if arr.min() < 0 or arr.max() > MAX_TOKEN_ID:
        raise InvalidTokensError(
            f"token ids must lie in [0, {MAX_TOKEN_ID}], got min {arr.min()} and max {arr.max()}")
    return arr.astype(_I32)


# radixkv/_runs_native.c's `negative` while the compiled core runs; None otherwise: then non_negative uses numpy
_c_negative: Final[Callable[[np.ndarray], bool] | None] = native("negative")


def non_negative(arr: np.ndarray) -> np.ndarray:
    """int32 `arr`, whose only possible fault is a sign. Compiled, one C pass (radixkv/_runs_native.c: an OR of
    the values, ~0.6 instructions a token and no numpy call); interpreted, argmin, which has none of a ufunc
    reduction's fixed cost (dtype resolution, an iterator): 2-3x cheaper; the unbound method and `item` skip a
    method lookup and a numpy scalar."""
    if _c_negative is not None:
        below = _c_negative(arr)
    else:
        below = len(arr) > 0 and arr.item(_argmin(arr)) < 0
    if below:
        raise InvalidTokensError(f"token ids must lie in [0, {MAX_TOKEN_ID}], got min {arr.min()}")
    return arr


def slot_array(slots: TokensLike) -> np.ndarray:
    """int64 `[n]` view or copy of integer `slots`, not yet range-checked; raises InvalidSlotsError."""
    t: Any = slots
    if type(t) is _TENSOR:  # the hot path: the cache's own tensors (match_prefix, alloc) or a cat of them;
        try:  # numpy's dtype and ndim are struct reads, torch's each a Python-level getter
            arr = t.numpy()
        except (TypeError, RuntimeError):  # not on the CPU, a dtype numpy lacks, a float needing grad: below
            arr = None
        if arr is not None and arr.dtype is _I64 and arr.ndim == 1:
            return arr
    return _as_int_array(slots, "slots", InvalidSlotsError).astype(_I64, copy=False)


def check_range(values: np.ndarray, limit: int, what: str) -> None:
    """Every int64 value lies in [0, limit); one pass (a negative value, seen as uint64, is huge)."""
    if len(values) and _max(values.view(_U64)) >= limit:
        raise InvalidSlotsError(f"{what} must lie in [0, {limit}), got min {values.min()} and max {values.max()}")


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether int64 `a` and `b` (contiguous: the cache's own copy), of one length, hold the same
    values. Short ones: a memcmp of a's bytes against b's buffer (a ufunc call costs more than
    copying a few KB); long ones: one comparison, and argmin finds a False (a ufunc reduction's
    fixed cost, dtype resolution and an iterator, is twice argmin's)."""
    if len(a) <= 1024:
        buffer: Any = b  # (numpy's stubs do not declare the buffer protocol)
        return a.tobytes().startswith(buffer)  # b's buffer, not a copy of it; of equal length: equality
    same = _eq(a, b)
    return bool(same[same.argmin()])


def starts_with(ours: bytes, theirs: np.ndarray) -> bool:
    """Whether `theirs` equals the first len(theirs) values of `ours` (the bytes of the cache's own copy,
    of theirs' dtype: int32 tokens, a key's): one memcmp against theirs' buffer, no copy of it (a strided
    one is copied)."""
    buffer: Any = theirs  # (numpy's stubs do not declare the buffer protocol)
    try:
        return ours.startswith(buffer)
    except ValueError:  # not C-contiguous: numpy exports no flat buffer
        return ours.startswith(theirs.tobytes())


def as_slots(slots: TokensLike, num_slots: int) -> np.ndarray:
    """int64 `[n]` of slots in [0, num_slots); raises InvalidSlotsError. Distinctness is the caller's
    check (it knows which slots may repeat: none may)."""
    arr = slot_array(slots)
    check_range(arr, num_slots, "slots")
    return arr


def distinct(values: np.ndarray) -> bool:
    """Whether the ints of `values` are distinct: no two neighbours equal once sorted (a copy). No
    memory beyond that copy (a table indexed by value would cost 4 bytes per possible value: per page
    of the pool, 4 bytes per cached token at page_size 1), O(n log n) and 1.5-5x a table's time (bench/
    ledger_ops.py), but off the request path: insert's usual slots are proven distinct by a memcmp
    (PageLedger.fresh_start)."""
    if len(values) < 2:
        return True
    ordered = np.sort(values)
    return not _eq(ordered[1:], ordered[:-1]).any()


def as_count(n: Any, what: str) -> int:
    """A non-negative int (not a bool); raises InvalidArgumentError."""
    if type(n) is int and n >= 0:  # the hot path: no isinstance, no int()
        return n
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative int, got {n!r}")
    return int(n)


def as_priority(priority: Any) -> int:
    """An int (not a bool), any sign; raises InvalidArgumentError."""
    if type(priority) is int:  # the hot path
        return priority
    if isinstance(priority, bool) or not isinstance(priority, (int, np.integer)):
        raise InvalidArgumentError(f"priority must be an int, got {priority!r}")
    return int(priority)
