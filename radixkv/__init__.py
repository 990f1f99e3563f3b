"""radixkv: a prefix-sharing KV-cache engine (radix tree over slot pools, refcounted eviction,
Triton kernels reading KV through slot indices). Public API only; see DESIGN.md.

The names below are imported on first use (PEP 562), so that `import radixkv` and `radixkv
--version` stay fast: the cache and its errors pull in torch only when asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from radixkv import core_loader

__version__ = "0.1.0"
COMPILED_CORE = core_loader.choose()  # the mypyc-built core (radixkv/build.py) runs, or the same .py files

_ERRORS = ("RadixKVError", "ConfigError", "OutOfSlotsError", "OutOfRowsError", "InvalidTokensError",
           "InvalidSlotsError", "InvalidArgumentError", "ContextLengthError", "LockError", "SequenceError",
           "KernelInputError", "ThreadOwnershipError", "PinBudgetError", "UnsupportedModelError")
_HOME = {"RadixCache": "radixkv.cache", "CacheConfig": "radixkv.config", "GroupSpec": "radixkv.config", "Sequence": "radixkv.sequences",
         "MatchResult": "radixkv.results", "SizeInfo": "radixkv.results", "BatchInputs": "radixkv.results",
         **{name: "radixkv.errors" for name in _ERRORS}}

__all__ = ["RadixCache", "CacheConfig", "GroupSpec", "Sequence", "MatchResult", "SizeInfo", "BatchInputs", *_ERRORS]

if TYPE_CHECKING:
    from radixkv.cache import RadixCache
    from radixkv.config import CacheConfig, GroupSpec
    from radixkv.errors import (ConfigError, ContextLengthError, InvalidArgumentError, InvalidSlotsError,
                                InvalidTokensError, KernelInputError, LockError, OutOfRowsError, OutOfSlotsError,
                                PinBudgetError, RadixKVError, SequenceError, ThreadOwnershipError,
                                UnsupportedModelError)
    from radixkv.results import BatchInputs, MatchResult, SizeInfo
    from radixkv.sequences import Sequence


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'radixkv' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
