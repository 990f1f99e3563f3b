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
from radixkv.keys import hash_root, whole_request_keys
from radixkv.multimodal import MultiModalKeys
from radixkv.radix.node import TreeNode

if TYPE_CHECKING:
    from radixkv.radix.tree import RadixTree


class EventRecorder:
    def __init__(self, block_size: int, page_size: int = 1, mm_keys: MultiModalKeys | None = None) -> None:
        chain_hashes([], b"", block_size)  # fail here, at construction, if the hash is not installed
        self.block_size = block_size
        self.events: list[KVEvent] = []
        self._lora: dict[bytes, tuple[int | None, str | None, str | None]] = {}  # root key -> its keys
        self.mm_keys = mm_keys if mm_keys is not None else MultiModalKeys()  # the cache's: names item ids
        # Siblings diverge at page boundaries, their first pages differing somewhere inside. When
        # block_size is a multiple of page_size, that page lies inside one block, which therefore
        # differs too: every block has one holder. Otherwise (page 16, block 6; or page 32, block
        # 16) a block can end in two siblings whose pages differ only after it, so blocks are
        # reference-counted per medium: reported when the first holder appears, removed when the
        # last one goes.
        self.page_size = page_size
        self._counted = bool(block_size % page_size)
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
        if not self._counted:
            self._emit(node, list(hashes), parent, tokens[:len(hashes) * size], first // size, medium)
            return
        run: list[int] = []  # consecutive blocks new to this medium, reported as one event
        run_parent = parent
        for i, h in enumerate(hashes + [None]):
            if h is not None and self._hold(h, medium, +1) == 1:
                run_parent = parent if not run else run_parent
                run.append(h)
            elif run:
                start = i - len(run)
                self._emit(node, run, run_parent, tokens[start * size:i * size], first // size + start, medium)
                run = []
            parent = h

    def _emit(self, node: TreeNode, hashes: list[int], parent: int | None, toks: np.ndarray, first_block: int,
              medium: str) -> None:
        lora_id, lora_name, salt = self._whole(node.ns)
        extra = None
        if lora_name is not None or salt is not None or (len(toks) and toks.min() < 0):
            extra = self._extra_keys(toks, first_block, lora_name, salt)
        toks = self.mm_keys.hash_form(toks)
        self.events.append(BlockStored(hashes, parent, toks.tolist(), self.block_size, lora_id, medium, lora_name, extra))

    def _whole(self, ns: bytes) -> tuple[int | None, str | None, str | None]:
        keys = self._lora.get(ns)
        if keys is None:
            keys = self._lora[ns] = whole_request_keys(ns)
        return keys

    def _extra_keys(self, toks: np.ndarray, first_block: int, lora_name: str | None,
                    salt: str | None) -> list[tuple | None]:
        """vLLM's per-block extra_keys: the LoRA name, (item identifier, offset in the block) per
        multimodal item the block overlaps, and the cache salt on the sequence's first block."""
        size, out = self.block_size, []
        for b in range(len(toks) // size):
            keys: list = [] if lora_name is None else [lora_name]
            block = toks[b * size:(b + 1) * size]
            for p in np.flatnonzero(block < 0).tolist():
                hit = self.mm_keys.item_at(int(block[p]))
                if hit is not None and (hit[0], p - hit[2]) not in keys:
                    keys.append((hit[0], p - hit[2]))
            if salt is not None and first_block + b == 0:
                keys.append(salt)
            out.append(tuple(keys) or None)
        return out

    def removed(self, node: TreeNode, medium: str) -> None:
        gone = list(self.hashes(node))
        if self._counted:
            gone = [h for h in gone if self._hold(h, medium, -1) == 0]
        if gone:
            self.events.append(BlockRemoved(gone, medium))

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """`lower`'s edge was just cut after `upper.size` tokens: the blocks it had are those ending
        in upper's edge, then those ending in lower's, so its cached hashes are cut the same way."""
        old, size = lower.block_hashes, self.block_size
        j = upper.end // size - upper.depth // size
        upper.block_hashes, lower.block_hashes = old[:j], old[j:]

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
                tokens = self.mm_keys.hash_form(tokens[:(last - first) * size])
                node.block_hashes = chain_hashes(tokens, hash_root(node.ns), size, parent)
        return node.block_hashes

    def _hash_ending_at(self, node: TreeNode, pos: int) -> int | None:
        """Hash of the block that ends at `pos`, held by `node` or an ancestor (None at pos 0)."""
        if pos == 0:
            return None
        while not node.depth < pos <= node.end:
            node = node.parent
        return self.hashes(node)[pos // self.block_size - 1 - node.depth // self.block_size]

    @classmethod
    def snapshot(cls, tree: RadixTree, block_size: int, known: EventRecorder | None = None) -> list[KVEvent]:
        """AllBlocksCleared, then BlockStored for everything cached now, parents first (for resync).
        `known` (the cache's recorder, if any) lends the multimodal names it has learnt."""
        fresh = cls(block_size, known.page_size, known.mm_keys) if known is not None else cls(block_size)
        fresh._counted = True  # a snapshot reports each block once, however many nodes hold it
        if known is not None:
            fresh._lora = known._lora
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
