"""What the radix tree returns and whom it tells: small typed results and the residency listener."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Final, Protocol

import numpy as np
from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode

__all__ = ["DEVICE", "HOST", "USER", "SEQUENCE", "MatchInfo", "InsertResult", "ResidencyListener", "PinKeeper"]

USER, SEQUENCE = 0, 1  # lock holders: lock()/unlock() callers, open Sequences
# media a listener hears of: vLLM's KV-event names (radixkv.events keeps the same); Final: compiled, constants
DEVICE: Final = "GPU"
HOST: Final = "CPU"


# Plain classes, not NamedTuples: compiled, building one is a C call and its fields are struct reads
# (a NamedTuple's __new__ is an interpreted lambda, two per request).
class MatchInfo:
    __slots__ = ("node", "length", "runs", "host_length")

    def __init__(self, node: TreeNode, length: int, runs: list[int], host_length: int) -> None:
        self.node = node  # ends exactly at `length` (the start node when nothing matched)
        self.length = length  # device-cached tokens below the start node, whole pages
        self.runs = runs  # their device pages (length // page_size) as runs (radixkv/runs.py): nobody's to write
        self.host_length = host_length  # further tokens held only in the host tier


class InsertResult:
    __slots__ = ("node", "cached_len", "tree_pages", "gained")

    def __init__(self, node: TreeNode, cached_len: int, tree_pages: np.ndarray, gained: list[TreeNode]) -> None:
        self.node = node  # ends exactly at the end of the inserted key
        self.cached_len = cached_len  # tokens that were already on the device (the caller's pages there are duplicates)
        self.tree_pages = tree_pages  # int64 [cached_len // page_size]: the tree's pages there (read only; empty after an `accept`)
        self.gained = gained  # nodes that just got device KV (new leaf, host-only nodes), parents first


@mypyc_attr(allow_interpreted_subclasses=True)
class ResidencyListener:
    """Told when a node's blocks appear on or leave a medium ("GPU" device, "CPU" host): KV events
    (radixkv/events/recorder.py's EventRecorder). A base class to subclass, not a Protocol: compiled, the
    tree's calls then go through the class's method table, where a Protocol's are attribute lookups by name
    (~300 instructions a call, several a request with events on)."""

    def stored(self, node: TreeNode, medium: str) -> None:
        raise NotImplementedError

    def removed(self, node: TreeNode, medium: str) -> None:
        raise NotImplementedError

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        raise NotImplementedError

    def attached(self, node: TreeNode, group: int) -> None:  # a secondary group's component appeared
        raise NotImplementedError

    def detached(self, node: TreeNode, group: int) -> None:  # ... and went (a tombstone now)
        raise NotImplementedError


class PinKeeper(Protocol):
    """What the tree tells the pin owner (radix/pins.py's Pins) and asks of it."""

    def split(self, upper: TreeNode, lower: TreeNode) -> None: ...

    def dropped(self, node: TreeNode) -> None: ...

    def pinned_last(self, key: Callable[[TreeNode], tuple]) -> Callable[[TreeNode], tuple]: ...
