"""EventRecorder: turns residency changes of tree nodes into vLLM-style KV events.

Blocks are `block_size` tokens aligned from the root, independent of page_size, so a block may
start in an ancestor's edge. A block belongs to the node whose edge holds its last token:

    node edge covers positions [depth, end);  its blocks are b with depth < (b + 1) * E <= end

A block is reported on a medium when its node holds its KV there (the rest of the prefix is then
resident too: on the device, since device residency is prefix-closed, or on the host).

The recorder owns the block digests (radixkv.events.hashing.BlockHasher, `event_hash` scheme): they
are computed the first time a node's blocks are needed, kept in `_digests` keyed by node, cut in two
when the tree splits a node, and dropped when the node leaves its last medium. It reads nodes
through their public fields (tokens(), depth, end, parent, ns, pages, host_pages) and never writes
them: the tree (radixkv.radix) is the only writer of nodes and never imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from radixkv.events.hashing import BlockHasher, Digest
from radixkv.events.records import DEVICE, HOST, AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from radixkv.keys import ExtraKeys, hash_root, whole_request_keys
from radixkv.multimodal import MultiModalKeys

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode
    from radixkv.radix.tree import RadixTree


_MAX_RAW = 1 << 16  # items whose raw placeholder ids are remembered (vLLM's schemes hash them)


class EventRecorder:
    def __init__(self, block_size: int, page_size: int = 1, scheme: str = "xxh3",
                 mm_keys: MultiModalKeys | None = None) -> None:
        self.hasher = BlockHasher(scheme)  # fails here, at construction, if a package is missing
        self.block_size = block_size
        self.events: list[KVEvent] = []
        # node -> (digests, their event ints) of the blocks ending in its edge (one list for xxh3)
        self._digests: dict[TreeNode, tuple[list[Digest], list[int]]] = {}
        self._lora: dict[bytes, tuple[int | None, str | None, str | None]] = {}  # root key -> its keys
        self.mm_keys = mm_keys if mm_keys is not None else MultiModalKeys()  # the cache's: names item ids
        self._raw: dict[tuple[str, int], list[int]] = {}  # (identifier, length) -> the raw ids a request gave
        # Siblings diverge at page boundaries, their first pages differing somewhere inside. When
        # block_size is a multiple of page_size, that page lies inside one block, which therefore
        # differs too: every block has one holder. Otherwise (page 16, block 6; or page 32, block
        # 16) a block can end in two siblings whose pages differ only after it, so blocks are
        # reference-counted per medium: reported when the first holder appears, removed when the
        # last one goes. vLLM's schemes leave the namespace out of the hash, so two namespaces can
        # hold one block: counted too.
        self.page_size = page_size
        self._counted = bool(block_size % page_size) or self.hasher.vllm
        self._holders: dict[tuple[int, str], int] = {}

    def take(self) -> list[KVEvent]:
        out, self.events = self.events, []
        return out

    # ------------------------------------------------------------------ ResidencyListener

    def stored(self, node: TreeNode, medium: str) -> None:
        size = self.block_size
        if node.end // size <= node.depth // size:  # no block ends in this edge
            return
        first = node.depth // size * size
        tokens = _path_tokens(node, first)  # gathered once, for the digests and the event
        hashes = self.digests(node, tokens)[1]
        parent = self._parent_int(node, first)
        if not self._counted:
            self._emit(node, hashes, parent, tokens[:len(hashes) * size], first // size, medium)
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

    def removed(self, node: TreeNode, medium: str) -> None:
        gone = self.digests(node)[1]
        if self._counted:
            gone = [h for h in gone if self._hold(h, medium, -1) == 0]
        if gone:
            self.events.append(BlockRemoved(gone, medium))
        other = node.host_pages if medium == DEVICE else node.pages
        if other is None:  # the node leaves the tree: its digests go with it
            self._digests.pop(node, None)

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """`lower`'s edge was just cut after `upper.size` tokens: the blocks it had are those ending
        in upper's edge, then those ending in lower's, so its digests are cut the same way."""
        old = self._digests.pop(lower, None)
        if old is not None:
            (d, h), j = old, upper.end // self.block_size - upper.depth // self.block_size
            self._digests[upper], self._digests[lower] = (d[:j], h[:j]), (d[j:], h[j:])

    def learn(self, extra: ExtraKeys, tokens: np.ndarray) -> None:
        """Remember the raw placeholder ids `tokens` (the request as given) holds at `extra`'s
        multimodal items: vLLM's schemes hash them (the tree keys item positions by its own ids)."""
        if len(self._raw) > _MAX_RAW:
            self._raw.clear()  # forgetting only misnames blocks of vLLM's schemes: a missed route
        for item in extra.mm:
            self._raw[(item.identifier, item.length)] = tokens[item.offset:item.offset + item.length].tolist()

    def _hold(self, h: int, medium: str, delta: int) -> int:
        key = (h, medium)
        n = self._holders.get(key, 0) + delta
        if n:
            self._holders[key] = n
        else:
            del self._holders[key]
        return n

    # ------------------------------------------------------------------ events

    def _emit(self, node: TreeNode, hashes: list[int], parent: int | None, toks: np.ndarray, first_block: int,
              medium: str) -> None:
        lora_id, lora_name, salt = self._whole(node.ns)
        extra = self._extra_keys(toks, first_block, lora_name, salt)
        self.events.append(BlockStored(hashes, parent, self._event_tokens(toks).tolist(), self.block_size, lora_id,
                                       medium, lora_name, extra))

    def _whole(self, ns: bytes) -> tuple[int | None, str | None, str | None]:
        keys = self._lora.get(ns)
        if keys is None:
            keys = self._lora[ns] = whole_request_keys(ns)
        return keys

    def _extra_keys(self, toks: np.ndarray, first_block: int, lora_name: str | None,
                    salt: str | None) -> list[tuple | None] | None:
        """vLLM's per-block extra_keys (its generate_block_hash_extra_keys): the LoRA name,
        (item identifier, item offset - block start) per multimodal item the block overlaps, and
        the cache salt on the sequence's first block; None when no block has any."""
        has_mm = int(toks.min(initial=0)) < 0  # item ids are negative (radixkv.multimodal)
        if lora_name is None and not salt and not has_mm:
            return None
        size, out = self.block_size, []
        for b in range(len(toks) // size):
            keys: list = [] if lora_name is None else [lora_name]
            block = toks[b * size:(b + 1) * size]
            for p in (np.flatnonzero(block < 0).tolist() if has_mm else ()):
                hit = self.mm_keys.item_at(int(block[p]))  # (identifier, length, index in the item)
                if hit is not None and (hit[0], p - hit[2]) not in keys:
                    keys.append((hit[0], p - hit[2]))
            if salt and first_block + b == 0:
                keys.append(salt)
            out.append(tuple(keys) or None)
        return out

    def _event_tokens(self, toks: np.ndarray) -> np.ndarray:
        """The ids events carry and the hash sees, from the tree's (item positions keyed by negative
        ids): xxh3 puts each item's stateless hash ids there (the same on every instance); vLLM's
        schemes put back the raw ids the request gave (its extra keys name the item)."""
        if not len(toks) or int(toks.min()) >= 0:
            return toks
        if not self.hasher.vllm:
            return self.mm_keys.hash_form(toks)
        out = toks.copy()
        for p in np.flatnonzero(toks < 0).tolist():
            hit = self.mm_keys.item_at(int(toks[p]))
            raw = None if hit is None else self._raw.get(hit[:2])
            if raw is not None:
                out[p] = raw[hit[2]]  # type: ignore[index]
        return out

    # ------------------------------------------------------------------ digests

    def digests(self, node: TreeNode, tokens: np.ndarray | None = None) -> tuple[list[Digest], list[int]]:
        """Digests of the blocks whose last token lies in `node`'s edge, and the ints events carry for
        them (computed once, then kept).
        `tokens`: the path's tokens from the first such block's start, when the caller has them."""
        got = self._digests.get(node)
        if got is None:
            size = self.block_size
            first, last = node.depth // size, node.end // size  # blocks [first, last)
            if first >= last:
                got = ([], [])
            else:
                tree_toks = (_path_tokens(node, first * size) if tokens is None else tokens)[:(last - first) * size]
                parent = self._digest_ending_at(node.parent, first * size)
                extra = None
                if self.hasher.vllm:
                    _, lora_name, salt = self._whole(node.ns)
                    extra = self._extra_keys(tree_toks, first, lora_name, salt)
                digests = self.hasher.digests(self._event_tokens(tree_toks), hash_root(node.ns), size, parent, extra)
                got = (digests, self.hasher.ints(digests))
            self._digests[node] = got
        return got

    def _digest_ending_at(self, node: TreeNode | None, pos: int) -> Digest | None:
        """Digest of the block that ends at `pos`, held by `node` or an ancestor (None at pos 0)."""
        if pos == 0 or node is None:
            return None
        while not node.depth < pos <= node.end:
            node = node.parent  # type: ignore[assignment]
        return self.digests(node)[0][pos // self.block_size - 1 - node.depth // self.block_size]

    def _parent_int(self, node: TreeNode, pos: int) -> int | None:
        parent = self._digest_ending_at(node.parent, pos)
        return None if parent is None else self.hasher.ints([parent])[0]

    def snapshot(self, tree: RadixTree) -> list[KVEvent]:
        """AllBlocksCleared, then BlockStored for everything cached now, parents first (for resync).
        Shares this recorder's digests and multimodal names; records nothing here."""
        fresh = EventRecorder.__new__(EventRecorder)
        fresh.__dict__.update(self.__dict__)
        fresh.events, fresh._holders, fresh._counted = [AllBlocksCleared()], {}, True  # each block once
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
        node = node.parent  # type: ignore[assignment]
    return np.concatenate(chunks[::-1])
