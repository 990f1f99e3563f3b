"""radixkv: a prefix-sharing KV-cache engine (radix tree over slot pools, refcounted eviction,
Triton kernels reading KV through slot indices). Public API only; see DESIGN.md."""

from radixkv.cache import RadixCache
from radixkv.config import CacheConfig
from radixkv.errors import (ConfigError, ContextLengthError, InvalidArgumentError, InvalidSlotsError,
                            InvalidTokensError, KernelInputError, LockError, OutOfRowsError, OutOfSlotsError,
                            PinBudgetError, RadixKVError, SequenceError, ThreadOwnershipError,
                            UnsupportedModelError)
from radixkv.results import BatchInputs, MatchResult, SizeInfo
from radixkv.sequences import Sequence

__version__ = "0.1.0"

__all__ = [
    "RadixCache", "CacheConfig", "Sequence", "MatchResult", "SizeInfo", "BatchInputs",
    "RadixKVError", "ConfigError", "OutOfSlotsError", "OutOfRowsError", "InvalidTokensError",
    "InvalidSlotsError", "InvalidArgumentError", "ContextLengthError", "LockError", "SequenceError",
    "KernelInputError", "ThreadOwnershipError", "PinBudgetError", "UnsupportedModelError",
]
