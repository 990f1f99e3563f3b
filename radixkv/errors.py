"""Typed errors. Every public call that raises one of these leaves the cache exactly as it was.

Messages say what was asked, what was available, and what to do about it.
"""

from __future__ import annotations


class RadixKVError(Exception):
    """Base class of every error radixkv raises on purpose."""


class ConfigError(RadixKVError, ValueError):
    """A CacheConfig field is out of range or inconsistent with another."""


class OutOfSlotsError(RadixKVError):
    """Not enough KV slots, even after evicting every unlocked cached token."""


class OutOfRowsError(RadixKVError):
    """All `max_requests` rows of req_to_token are held by open Sequences."""


class InvalidTokensError(RadixKVError, ValueError):
    """Tokens of the wrong type, dtype or rank, or ids outside [0, 2**31 - 1]."""


class InvalidSlotsError(RadixKVError, ValueError):
    """Slots outside the pool, duplicated, or not owned the way the call requires."""


class ContextLengthError(RadixKVError, ValueError):
    """A request would grow past `max_context_len` positions."""


class LockError(RadixKVError):
    """lock/unlock imbalance, a lock on an evicted node, or a node from another cache."""


class SequenceError(RadixKVError):
    """A closed or foreign Sequence, or a commit that contradicts what the Sequence holds."""


class KernelInputError(RadixKVError, ValueError):
    """A kernel argument of the wrong shape, dtype, device or layout, or a row/length out of range."""


class InvalidArgumentError(RadixKVError, ValueError):
    """An argument of the wrong type or out of range: a count, a priority, a namespace, an option."""


class ThreadOwnershipError(RadixKVError, RuntimeError):
    """A RadixCache was called from a thread other than the one that owns it (one thread drives a cache)."""


class PinBudgetError(RadixKVError):
    """A pin would take more than CacheConfig.pin_budget_tokens pinned tokens (or pinning is off)."""


class UnsupportedModelError(RadixKVError):
    """A model with a layer kind the Engine would not serve exactly (a recurrent mixer, an unknown
    attention variant); the message names the kind and its layers."""


class TraceFormatError(RadixKVError):
    """A trace file that cannot be read or holds a bad line (the message names file:line and the field)."""
