"""Argument checks for the workload generators (radixkv/bench/workloads.py): each keyword is checked
against the type of its default before anything is generated, so a bad value is an
InvalidArgumentError naming the workload and the parameter, never a numpy ValueError or TypeError.

    seed                 int >= 0
    other ints           counts and lengths: int in [1, MAX_PARAM]
    floats               a number, finite, >= 0; p_* and *_ratio (probabilities, shares) at most 1,
                         range_ratio, zipf_s and mean_gap above 0
    (lo, hi) tuples      two ints, 0 <= lo <= hi <= MAX_PARAM
Bools are never ints here.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, TypeVar

from radixkv.errors import InvalidArgumentError

MAX_PARAM = 1 << 22  # no count or length of a benchmark workload comes near 4 Mi
_POSITIVE = ("range_ratio", "zipf_s", "mean_gap")
F = TypeVar("F", bound=Callable[..., Any])


def checked(fn: F) -> F:
    """Check every argument of the workload generator `fn` against its default's type (see above)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise InvalidArgumentError(f"{fn.__name__}: {e}") from None
        for name, value in bound.arguments.items():
            _check(fn.__name__, name, value, sig.parameters[name].default)
        try:
            return fn(*args, **kwargs)
        except (ValueError, IndexError, ZeroDivisionError) as e:  # values fine alone, not together (k > num_docs)
            raise InvalidArgumentError(f"{fn.__name__}{tuple(bound.arguments.items())}: the parameters do not "
                                       f"fit together ({e})") from None

    return run  # type: ignore[return-value]


def _check(workload: str, name: str, value: Any, default: Any) -> None:
    what = f"{workload}({name}={value!r:.40})"
    if type(default) is int:
        low = 0 if name == "seed" else 1
        if type(value) is not int or not low <= value <= MAX_PARAM:
            raise InvalidArgumentError(f"{what}: must be an int in [{low}, {MAX_PARAM}]")
    elif type(default) is float:
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise InvalidArgumentError(f"{what}: must be a finite number >= 0")
        if (name.startswith("p_") or name.endswith("_ratio")) and value > 1:
            raise InvalidArgumentError(f"{what}: a share, at most 1")
        if name in _POSITIVE and value == 0:
            raise InvalidArgumentError(f"{what}: must be above 0")
    elif type(default) is tuple:
        if (type(value) is not tuple or len(value) != 2 or any(type(v) is not int for v in value)
                or not 0 <= value[0] <= value[1] <= MAX_PARAM):
            raise InvalidArgumentError(f"{what}: must be a pair of ints (lo, hi), 0 <= lo <= hi <= {MAX_PARAM}")
