"""What the radix tree returns and whom it tells: small typed results and the residency listener."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode

__all__ = ["DEVICE", "HOST", "USER", "SEQUENCE", "MatchInfo", "InsertResult", "ResidencyListener", "PinKeeper"]

USER, SEQUENCE = 0, 1  # lock holders: lock()/unlock() callers, open Sequences
DEVICE, HOST = "GPU", "CPU"  # media a listener hears of: vLLM's KV-event names (radixkv.events keeps the same)


class MatchInfo(NamedTuple):
    node: TreeNode  # ends exactly at `length` (the start node when nothing matched)
    length: int  # device-cached tokens below the start node, whole pages
    pages: np.ndarray  # int64 [length // page_size]: their device pages, a fresh array
    host_length: int  # further tokens held only in the host tier


class InsertResult(NamedTuple):
    node: TreeNode  # ends exactly at the end of the inserted key
    cached_len: int  # tokens that were already on the device (the caller's pages there are duplicates)
    tree_pages: np.ndarray  # int64 [cached_len // page_size]: the tree's pages there (read only)
    gained: list[TreeNode]  # nodes that just got device KV (new leaf, host-only nodes), parents first


class ResidencyListener(Protocol):
    """Told when a node's blocks appear on or leave a medium ("GPU" device, "CPU" host): KV events."""

    def stored(self, node: TreeNode, medium: str) -> None: ...

    def removed(self, node: TreeNode, medium: str) -> None: ...

    def split(self, upper: TreeNode, lower: TreeNode) -> None: ...

    def attached(self, node: TreeNode, group: int) -> None: ...  # a secondary group's component appeared

    def detached(self, node: TreeNode, group: int) -> None: ...  # ... and went (a tombstone now)


class PinKeeper(Protocol):
    """What the tree tells the pin owner (radix/pins.py's Pins) and asks of it."""

    def split(self, upper: TreeNode, lower: TreeNode) -> None: ...

    def dropped(self, node: TreeNode) -> None: ...

    def pinned_last(self, key: Callable[[TreeNode], tuple]) -> Callable[[TreeNode], tuple]: ...
