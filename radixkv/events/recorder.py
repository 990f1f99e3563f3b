"""EventRecorder: turns residency changes of tree nodes into vLLM-style KV events.

Blocks are `block_size` tokens aligned from the root, independent of page_size, so a block may
start in an ancestor's edge. A block belongs to the node whose edge holds its last token:

    node edge covers positions [depth, end);  its blocks are b with depth < (b + 1) * E <= end

A block is reported on a medium when its node holds its KV there (the rest of the prefix is then
resident too: on the device, since device residency is prefix-closed, or on the host). A hybrid
model's secondary layer groups (radix/node.py) are reported by events/groups.py: the same block
hashes with their group index, as vLLM 0.33 keys blocks by (hash, group). With groups, group 0's
(full KV) events carry `group_idx=0` and its spec; a one-group model's events carry no group
fields at all (byte for byte what they were before groups existed).

The recorder owns the block digests (radixkv.events.hashing.BlockHasher, `event_hash` scheme): they
are computed the first time a node's blocks are needed, kept in `_digests` keyed by node, cut in two
when the tree splits a node, and dropped when the node leaves its last medium. It reads nodes
through their public fields (tokens(), depth, end, parent, ns, pages, host_pages, secondary) and
never writes them: the tree (radixkv.radix) is the only writer of nodes and never imports this package.

Cost: per stored node, one join of its blocks' key bytes (a slice when they start in its own edge),
one hash call per new block, and the event; its token ids are those bytes (records.TokenIds), not a
Python int per token nor an array. Removal and splits reuse the kept digests.
Multimodal checks run only once a multimodal request was seen (`learn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Sequence, cast

import numpy as np

from radixkv.events.groups import FULL, EventGroup, GroupEvents
from radixkv.events.hashing import BlockHasher, Digest
from radixkv.events.holders import Holders
from radixkv.events.records import DEVICE, HOST, AllBlocksCleared, BlockRemoved, BlockStored, KVEvent, TokenIds
from radixkv.keys import ExtraKeys, hash_root, whole_request_keys
from radixkv.multimodal import MultiModalKeys

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode
    from radixkv.radix.tree import RadixTree


_INT32: Final = np.dtype(np.int32)  # a tree key's ids
_MAX_RAW = 1 << 16  # items whose raw placeholder ids are remembered (vLLM's schemes hash them)


class EventRecorder:
    def __init__(self, block_size: int, page_size: int = 1, scheme: str = "xxh3",
                 mm_keys: MultiModalKeys | None = None, groups: Sequence[EventGroup] = (),
                 hasher: BlockHasher | None = None) -> None:
        """`groups`: the specs of the secondary layer groups 1..n (none: a one-group model).
        `hasher`: share another recorder's (vLLM's schemes draw a random root per hasher), else a new
        one of `scheme`."""
        # fails here, at construction, if a package is missing
        self.hasher = hasher if hasher is not None else BlockHasher(scheme)
        self.block_size = block_size
        self.events: list[KVEvent] = []
        # node -> (digests, their event ints) of the blocks ending in its edge (one list for xxh3)
        self._digests: dict[TreeNode, tuple[list[Digest], list[int]]] = {}
        # root key -> (the root its block hashes chain from, lora_id, lora_name, cache_salt)
        self._ns_keys: dict[bytes, tuple[bytes, int | None, str | None, str | None]] = {}
        self.mm_keys = mm_keys if mm_keys is not None else MultiModalKeys()  # the cache's: names item ids
        self._raw: dict[tuple[str, int], list[int]] = {}  # (identifier, length) -> the raw ids a request gave
        self._mm = False  # a multimodal request was seen: item ids (negative) may be in the tree
        # Siblings diverge at page boundaries, their first pages differing somewhere inside. When
        # block_size is a multiple of page_size, that page lies inside one block, which therefore
        # differs too: every block has one holder. Otherwise (page 16, block 6; or page 32, block
        # 16) a block can end in two siblings whose pages differ only after it, so blocks are
        # reference-counted per medium: reported when the first holder appears, removed when the
        # last one goes (events/holders.py). vLLM's schemes leave the namespace out of the hash, so
        # two namespaces can hold one block: counted too.
        self.page_size = page_size
        self._counted = bool(block_size % page_size) or self.hasher.vllm
        self._holders = Holders()
        self.groups = GroupEvents(self, groups) if groups else None
        # the group fields of each group's events: none at all for a one-group model
        self.fields: list[tuple] = [()] if not groups else [FULL.fields(0)] + [s.fields(g + 1) for g, s in enumerate(groups)]

    def take(self) -> list[KVEvent]:
        out, self.events = self.events, []
        return out

    # ------------------------------------------------------------------ ResidencyListener

    def stored(self, node: TreeNode, medium: str) -> None:
        size = self.block_size
        first, last = node.depth // size, node.end // size
        if last <= first:  # no block ends in this edge
            return
        raw = path_bytes(node, first * size)  # gathered once, for the digests and the event's ids
        parent = self._parent_digest(node, first * size)
        hashes = self.digests(node, raw, parent)[1]
        self.publish(node, hashes, self._int(parent), raw, first, medium, 0)

    def removed(self, node: TreeNode, medium: str) -> None:
        self.withdraw(self.digests(node)[1], medium, 0)
        if medium == DEVICE and self.groups is not None:
            self.groups.dropped(node)  # its components go with its full KV
        other = node.host_pages if medium == DEVICE else node.pages
        if other is None:  # the node leaves the tree: its digests go with it
            self._digests.pop(node, None)

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """`lower`'s edge was just cut after `upper.size` tokens: the blocks it had are those ending
        in upper's edge, then those ending in lower's, so its digests are cut the same way."""
        old = self._digests.pop(lower, None)
        if old is not None:
            (d, h), j = old, upper.end // self.block_size - upper.depth // self.block_size
            du, dl = d[:j], d[j:]
            if h is d:  # xxh3: the digests are the ints, one list
                hu, hl = cast("list[int]", du), cast("list[int]", dl)
            else:
                hu, hl = h[:j], h[j:]
            self._digests[upper], self._digests[lower] = (du, hu), (dl, hl)
        if self.groups is not None:
            self.groups.split(upper, lower)

    def attached(self, node: TreeNode, group: int) -> None:
        """`node` just got a component of secondary group `group` (>= 1)."""
        if self.groups is not None:
            self.groups.changed(node, group)

    def detached(self, node: TreeNode, group: int) -> None:
        """`node` just lost its group-`group` component (a tombstone now)."""
        if self.groups is not None and node.pages is not None:  # else removed() reported it with the full KV
            self.groups.changed(node, group)

    def learn(self, extra: ExtraKeys, tokens: np.ndarray) -> None:
        """Remember the raw placeholder ids `tokens` (the request as given) holds at `extra`'s
        multimodal items: vLLM's schemes hash them (the tree keys item positions by its own ids)."""
        self._mm = True
        if len(self._raw) > _MAX_RAW:
            self._raw.clear()  # forgetting only misnames blocks of vLLM's schemes: a missed route
        for item in extra.mm:
            self._raw[(item.identifier, item.length)] = tokens[item.offset:item.offset + item.length].tolist()

    # ------------------------------------------------------------------ events

    def publish(self, node: TreeNode, hashes: list[int], parent: int | None, raw: bytes, first: int,
                medium: str, group: int) -> None:
        """BlockStored for blocks [first, first + len(hashes)) of `node`'s path (`raw`: the path's
        key bytes from the start of block `first`, maybe more; `parent` the int of block first - 1);
        counted: only blocks new to (medium, group), in runs of consecutive ones."""
        size = self.block_size
        new = self._holders.add(hashes, medium, group) if self._counted else None
        if new is None:  # every block is new to (medium, group)
            self._emit(node, hashes, parent, raw, first, medium, group)
            return
        start = -1  # of the run of consecutive new blocks being gathered, reported as one event
        run_parent = parent
        for i in range(len(hashes) + 1):
            if i < len(hashes) and new[i]:
                if start < 0:
                    start, run_parent = i, parent
            elif start >= 0:
                self._emit(node, hashes[start:i], run_parent, raw[4 * start * size:4 * i * size], first + start, medium,
                           group)
                start = -1
            if i < len(hashes):
                parent = hashes[i]

    def store_blocks(self, node: TreeNode, hashes: list[int], first: int, group: int) -> None:
        """`publish` on the device for blocks [first, first + len(hashes)) of `node`'s edge."""
        pos = first * self.block_size
        self.publish(node, hashes, self.parent_int(node, pos), path_bytes(node, pos), first, DEVICE, group)

    def withdraw(self, hashes: list[int], medium: str, group: int) -> None:
        """BlockRemoved for `hashes` (counted: those whose last holder this was)."""
        if self._counted:
            hashes = self._holders.remove(hashes, medium, group)
        if hashes:
            event = BlockRemoved(hashes, medium)
            fields = self.fields[group]
            if fields:  # a hybrid model's: which group
                event.group_idx = fields[0]
            self.events.append(event)

    def _emit(self, node: TreeNode, hashes: list[int], parent: int | None, raw: bytes, first_block: int,
              medium: str, group: int) -> None:
        """One BlockStored; `raw` holds the blocks' ids (key bytes), maybe more after them."""
        n = len(hashes) * self.block_size
        _, lora_id, lora_name, salt = self._keys(node.ns)
        if lora_name is None and not salt and not self._mm:  # the common case: no numpy, the ids stay bytes
            extra, ids = None, TokenIds(raw, n)
        else:
            toks = np.frombuffer(raw, _INT32, n)
            extra = self._extra_keys(toks, first_block, lora_name, salt)
            ids = TokenIds(self._event_tokens(toks)) if self._mm else TokenIds(raw, n)
        event = BlockStored(hashes, parent, ids, self.block_size, lora_id, medium, lora_name, extra)
        fields = self.fields[group]
        if fields:  # a hybrid model's: which group, and what it keeps
            event.group_idx, event.kv_cache_spec_kind, event.kv_cache_spec_sliding_window = fields
        self.events.append(event)

    def _keys(self, ns: bytes) -> tuple[bytes, int | None, str | None, str | None]:
        """(hash root, lora_id, lora_name, cache_salt) of root key `ns`, worked out once per key."""
        keys = self._ns_keys.get(ns)
        if keys is None:
            keys = self._ns_keys[ns] = (hash_root(ns), *whole_request_keys(ns))
        return keys

    def _extra_keys(self, toks: np.ndarray, first_block: int, lora_name: str | None,
                    salt: str | None) -> list[tuple | None] | None:
        """vLLM's per-block extra_keys (its generate_block_hash_extra_keys): the LoRA name,
        (item identifier, item offset - block start) per multimodal item the block overlaps, and
        the cache salt on the sequence's first block; None when no block has any."""
        has_mm = self._mm and int(toks.min(initial=0)) < 0  # item ids are negative (radixkv.multimodal)
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
        if not self._mm or not len(toks) or int(toks.min()) >= 0:
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

    def digests(self, node: TreeNode, raw: bytes | None = None,
                parent: Digest | None | bool = False) -> tuple[list[Digest], list[int]]:
        """Digests of the blocks whose last token lies in `node`'s edge, and the ints events carry for
        them (computed once, then kept). `raw`: the path's key bytes from the first such block's
        start, and `parent`: the digest of the block before it, when the caller has them."""
        got = self._digests.get(node)
        if got is None:
            size = self.block_size
            first, last = node.depth // size, node.end // size  # blocks [first, last)
            if first >= last:
                got = ([], [])
            else:
                if raw is None:
                    raw = path_bytes(node, first * size)
                if parent is False:
                    parent = self._parent_digest(node, first * size)
                got = self._hash(node, raw, first, last, parent)
            self._digests[node] = got
        return got

    def _hash(self, node: TreeNode, raw: bytes, first: int, last: int,
              parent: Digest | None) -> tuple[list[Digest], list[int]]:
        size, root = self.block_size, self._keys(node.ns)[0]
        if not self._mm and not self.hasher.vllm:  # the common case: XXH3 straight from the key bytes
            digests = self.hasher.digests(raw, root, size, parent)
            return digests, cast("list[int]", digests)  # xxh3: the digest is the int
        tree_toks = np.frombuffer(raw, _INT32, (last - first) * size)
        extra = None
        if self.hasher.vllm:
            _, _, lora_name, salt = self._keys(node.ns)
            extra = self._extra_keys(tree_toks, first, lora_name, salt)
        digests = self.hasher.digests(self._event_tokens(tree_toks), root, size, parent, extra)
        return digests, self.hasher.ints(digests)

    def _parent_digest(self, node: TreeNode, pos: int) -> Digest | None:
        """Digest of the block that ends at `pos` (<= node.depth), held by an ancestor (None at 0)."""
        if pos == 0:
            return None
        anc: TreeNode = node.parent  # type: ignore[assignment]
        while not anc.depth < pos <= anc.end:
            anc = anc.parent  # type: ignore[assignment]
        return self.digests(anc)[0][pos // self.block_size - 1 - anc.depth // self.block_size]

    def parent_int(self, node: TreeNode, pos: int) -> int | None:
        """The event int of the block ending at `pos` (block-aligned, <= node.end) on `node`'s path."""
        first = node.depth // self.block_size
        if pos // self.block_size <= first:
            return self._int(self._parent_digest(node, pos))
        return self.digests(node)[1][pos // self.block_size - 1 - first]

    def _int(self, digest: Digest | None) -> int | None:
        if digest is None or not self.hasher.vllm:  # xxh3: the digest is the int
            return cast("int | None", digest)
        return self.hasher.ints([digest])[0]

    def _fork(self) -> EventRecorder:
        """A recorder sharing this one's hasher, digests and multimodal names, counting every block
        once (a fresh Holders, counted): what `snapshot` records into."""
        fresh = EventRecorder(self.block_size, self.page_size, hasher=self.hasher, mm_keys=self.mm_keys)
        fresh._digests, fresh._ns_keys, fresh._raw, fresh.fields = self._digests, self._ns_keys, self._raw, self.fields
        fresh._counted = True
        return fresh

    def snapshot(self, tree: RadixTree) -> list[KVEvent]:
        """AllBlocksCleared, then BlockStored for everything cached now, parents first (for resync),
        each secondary group's blocks after their node's full KV. A hybrid model first announces its
        groups: one BlockStored per group >= 1 with no blocks and the group's fields, so an index
        knows every group before any of its blocks (cluster/groups.py). Shares this recorder's
        digests and multimodal names; records nothing here."""
        fresh = self._fork()
        fresh.events = [AllBlocksCleared()]
        fresh.events += [BlockStored([], None, [], self.block_size, None, DEVICE, None, None, *f)
                         for f in self.fields[1:]]
        fresh._mm = True  # this recorder may not have seen the requests (kv_events off): check every id
        fresh.groups = None if self.groups is None else GroupEvents(fresh, self.groups.specs)
        for node in tree.nodes():
            if node.parent is not None:
                for medium, resident in ((DEVICE, node.pages is not None), (HOST, node.host_pages is not None)):
                    if resident:
                        fresh.stored(node, medium)
                if fresh.groups is not None and node.pages is not None:
                    for g, comp in enumerate(node.secondary, 1):
                        if comp is not None:
                            fresh.groups.changed(node, g)
        return fresh.events


def path_bytes(node: TreeNode, start: int) -> bytes:
    """The key bytes (int32 little-endian token ids) of positions [start, node.end) along the path
    to `node`."""
    if start >= node.depth:
        return node.key[4 * (start - node.depth):]
    chunks = []
    while node.end > start:
        chunks.append(node.key[4 * max(0, start - node.depth):])
        node = node.parent  # type: ignore[assignment]
    return b"".join(chunks[::-1])
