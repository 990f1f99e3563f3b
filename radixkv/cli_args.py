"""argparse value types for the `radixkv` command: each checks its range, so a mistake is one line
from argparse ("radixkv calc: error: argument --gpu-memory-utilization: ...") and exit status 2."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from radixkv.errors import RadixKVError
from radixkv.model_spec import get_model


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in --help, and a description (a script's docstring) printed as written."""


def positive_int(s: str) -> int:
    return _int_at_least(s, 1)


def nonneg_int(s: str) -> int:
    return _int_at_least(s, 0)


def _int_at_least(s: str, low: int) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer") from None
    if v < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
    return v


def positive_float(s: str) -> float:
    v = _float(s)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
    return v


def fraction(s: str) -> float:
    """A number in (0, 1]: a share, not a percentage."""
    v = _float(s)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1] (a fraction, 0.25 = 25%), got {s}")
    return v


def _float(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None


def one_of(names: Iterable[str]) -> Callable[[str], str]:
    allowed = list(names)

    def check(x: str) -> str:
        if x not in allowed:
            raise argparse.ArgumentTypeError(f"unknown {x!r}: choose from {','.join(allowed)}")
        return x

    return check


def csv_of(item: Callable[[str], object]) -> Callable[[str], list]:
    """A comma-separated list whose items each pass `item`."""
    def parse(s: str) -> list:
        values = [item(x.strip()) for x in s.split(",") if x.strip()]
        if not values:
            raise argparse.ArgumentTypeError("give at least one value")
        return values

    return parse


def model_name(s: str) -> str:
    """A preset, a config.json or a folder with one (checked now; nothing is downloaded)."""
    try:
        get_model(s)
    except (RadixKVError, OSError, ValueError, KeyError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return s
