"""EventRecorder: turns residency changes of tree nodes into vLLM-style KV events.

Blocks are `block_size` tokens aligned from the root, independent of page_size, so a block may
start in an ancestor's edge. A block belongs to the node whose edge holds its last token:

    node edge covers positions [depth, end);  its blocks are b with depth < (b + 1) * E <= end

A block is reported on a medium when its node holds its KV there (the rest of the prefix is then
resident too: on the device, since device residency is prefix-closed, or on the host). Hashes
(radixkv.events.block_hashes) are computed the first time a node's blocks are needed and cached on
the node; a split clears them, and both halves recompute from their own edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from radixkv.events import DEVICE, HOST, AllBlocksCleared, BlockRemoved, BlockStored, KVEvent, chain_hashes
from radixkv.radix.node import TreeNode

if TYPE_CHECKING:
    from radixkv.radix.tree import RadixTree


class EventRecorder:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.events: list[KVEvent] = []
        # A block may end in two sibling nodes when pages diverge after it (block_size not a
        # multiple of page_size), so blocks are reference-counted per medium: the stream reports
        # a block when its first holder appears and removes it when its last holder goes.
        self._holders: dict[tuple[int, str], int] = {}

    def take(self) -> list[KVEvent]:
        out, self.events = self.events, []
        return out

    # ------------------------------------------------------------------ ResidencyListener

    def stored(self, node: TreeNode, medium: str) -> None:
        hashes, size = self.hashes(node), self.block_size
        if not hashes:
            return
        first = node.depth // size * size
        tokens = _path_tokens(node, first)
        parent = self._hash_ending_at(node.parent, first)
        run: list[int] = []  # consecutive blocks new to this medium, reported as one event
        run_parent = parent
        for i, h in enumerate(hashes + [None]):
            if h is not None and self._hold(h, medium, +1) == 1:
                run_parent = parent if not run else run_parent
                run.append(h)
            elif run:
                start = i - len(run)
                self.events.append(BlockStored(run, run_parent, tokens[start * size:i * size].tolist(), size, medium))
                run = []
            parent = h

    def removed(self, node: TreeNode, medium: str) -> None:
        gone = [h for h in self.hashes(node) if self._hold(h, medium, -1) == 0]
        if gone:
            self.events.append(BlockRemoved(gone, medium))

    def _hold(self, h: int, medium: str, delta: int) -> int:
        key = (h, medium)
        n = self._holders.get(key, 0) + delta
        if n:
            self._holders[key] = n
        else:
            del self._holders[key]
        return n

    # ------------------------------------------------------------------ hashes

    def hashes(self, node: TreeNode) -> list[int]:
        """Hashes of the blocks whose last token lies in `node`'s edge."""
        if node.block_hashes is None:
            size = self.block_size
            first, last = node.depth // size, node.end // size  # blocks [first, last)
            if first >= last:
                node.block_hashes = []
            else:
                tokens = _path_tokens(node, first * size)
                parent = self._hash_ending_at(node.parent, first * size)
                node.block_hashes = chain_hashes(tokens[:(last - first) * size], node.ns, size, parent)
        return node.block_hashes

    def _hash_ending_at(self, node: TreeNode, pos: int) -> int | None:
        """Hash of the block that ends at `pos`, held by `node` or an ancestor (None at pos 0)."""
        if pos == 0:
            return None
        while not node.depth < pos <= node.end:
            node = node.parent
        return self.hashes(node)[pos // self.block_size - 1 - node.depth // self.block_size]

    @classmethod
    def snapshot(cls, tree: RadixTree, block_size: int) -> list[KVEvent]:
        """AllBlocksCleared, then BlockStored for everything cached now, parents first (for resync)."""
        fresh = cls(block_size)
        fresh.events.append(AllBlocksCleared())
        for node in tree.nodes():
            if node.parent is not None:
                for medium, resident in ((DEVICE, node.pages is not None), (HOST, node.host_pages is not None)):
                    if resident:
                        fresh.stored(node, medium)
        return fresh.events


def _path_tokens(node: TreeNode, start: int) -> np.ndarray:
    """Tokens of positions [start, node.end) along the path to `node`."""
    chunks = []
    while node.end > start:
        chunks.append(node.tokens()[max(0, start - node.depth):])
        node = node.parent
    return np.concatenate(chunks[::-1])
