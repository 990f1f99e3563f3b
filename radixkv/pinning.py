"""PinControl: the facade's side of pins: the clock, the budget, argument checks, per-Sequence deadlines.

The tree changes pins (radix/pins.py); this module decides whether a pin may happen and until when:

    cache.pin(tokens, ns, ttl=60)         pin the cached prefix of tokens for 60 s (PinBudgetError past the budget)
    cache.insert(..., pin_ttl=60)         insert, then pin what was inserted (budget checked before anything changes)
    cache.open(..., pin_ttl=60)           pin the reused prefix now (budget checked), and each page the Sequence
                                          commits later while the budget allows, until open time + 60 s

Time comes from the injected clock (RadixCache(config, clock=...), time.monotonic by default): pins
never read wall time themselves, and tests drive a fake clock instead of sleeping. Expired pins are
dropped lazily: before every eviction, pin and budget read.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from radixkv.errors import ConfigError, InvalidArgumentError, PinBudgetError

if TYPE_CHECKING:
    from radixkv.radix import RadixTree, TreeNode


def as_ttl(ttl: Any, what: str) -> float:
    """A positive, finite number of seconds (int or float, not a bool); raises InvalidArgumentError."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"{what} must be a positive number of seconds, got {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise InvalidArgumentError(f"{what} must be a positive, finite number of seconds, got {ttl!r}")
    return float(ttl)


class PinControl:
    def __init__(self, tree: RadixTree, budget: int, clock: Callable[[], float]) -> None:
        if not callable(clock):
            raise ConfigError(f"RadixCache(clock=...) must be a callable returning seconds, got {clock!r}")
        self.tree = tree
        self.budget = budget  # CacheConfig.pin_budget; 0: pinning is off
        self.clock = clock
        self.rows: dict[int, float] = {}  # req_to_token row -> deadline of its Sequence's pins

    def deadline(self, ttl: Any, what: str) -> float:
        """Validate `ttl` and return now + ttl (drops expired pins first)."""
        seconds = as_ttl(ttl, what)
        if not self.budget:
            raise PinBudgetError(f"{what}: pinning is off (CacheConfig.pin_budget_tokens is 0); set "
                                 "pin_budget_tokens to the most tokens you want pinned at once")
        self.tree.enable_pins()
        now = self.expire()
        return now + seconds

    def expire(self) -> float:
        now = float(self.clock())
        if self.tree.pins is not None:
            self.tree.pins.expire(now)
        return now

    def pinned(self) -> int:
        return 0 if self.tree.pins is None else self.tree.pins.pinned_size

    def charge(self, cost: int, what: str) -> None:
        """PinBudgetError unless `cost` more pinned tokens fit in the budget (nothing changes)."""
        if self.pinned() + cost > self.budget:
            raise PinBudgetError(
                f"{what}: pinning {cost} more tokens would exceed CacheConfig.pin_budget_tokens "
                f"({self.pinned()} of {self.budget} pinned); wait for pins to expire, pin a shorter "
                "prefix, or raise the budget")

    def pin(self, node: TreeNode, until: float, what: str) -> None:
        """Pin the path to `node` until `until`, or raise PinBudgetError with nothing changed."""
        assert self.tree.pins is not None
        self.charge(self.tree.pins.cost(node), what)
        self.tree.pins.pin(node, until)

    def extend(self, row: int, node: TreeNode) -> None:
        """After a commit: pin the Sequence's path to `node` if it was opened with pin_ttl, its
        deadline has not passed and the budget allows (a commit never fails for a pin)."""
        until = self.rows.get(row)
        if until is None or self.tree.pins is None or until <= self.expire():
            return
        if self.pinned() + self.tree.pins.cost(node) <= self.budget:
            self.tree.pins.pin(node, until)
