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

Cost: per stored node, its blocks' key bytes (the node's own key, or one join when the first block
starts in an ancestor's edge), the XXH3 chain of its new blocks and the event, whose token ids are
those bytes (records.TokenIds) and whose block hashes are the chain's words (records.BlockHashes, no
Python int per block): compiled, one native call for the chain (events/hashing.py `xxh3_words`,
blocks of 9-16 tokens), else one xxhash call and one slice per block. Removal reuses the kept
hashes (the same object) and a split cuts their bytes in two. The common case (XXH3, one holder per
block, one layer group, no multimodal request seen: `_plain`) is one method per stored or removed node
calling no other Python function than the event's constructors: interpreted (`RADIXKV_PURE_PYTHON=1`) a
call costs as much as several blocks' hashes.
Extra keys and ids of LoRA, salted and multimodal requests: events/request_keys.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final, Sequence, cast

import numpy as np

from radixkv.events.groups import FULL, EventGroup, GroupEvents
from radixkv.events.hashing import SEED, BlockHasher, Digest, hash_function, xxh3_words
from radixkv.events.holders import Holders, new_runs
from radixkv.events.records import DEVICE, BlockHashes, BlockRemoved, BlockStored, KVEvent, TokenIds
from radixkv.events.request_keys import block_extra_keys, event_tokens, remember_raw
from radixkv.events.snapshot import snapshot
from radixkv.keys import ExtraKeys, hash_root, whole_request_keys
from radixkv.multimodal import MultiModalKeys
from radixkv.radix.types import ResidencyListener

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode
    from radixkv.radix.tree import RadixTree


_INT32: Final = np.dtype(np.int32)  # a tree key's ids


class EventRecorder(ResidencyListener):
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
        # node -> (digests, the hashes its events carry) of the blocks ending in its edge (xxh3: one
        # BlockHashes, the digests are the hashes)
        self._digests: dict[TreeNode, tuple[Sequence[Digest] | BlockHashes, BlockHashes]] = {}
        # root key -> (the root its block hashes chain from, lora_id, lora_name, cache_salt)
        self._ns_keys: dict[bytes, tuple[bytes, int | None, str | None, str | None]] = {}
        self.mm_keys = mm_keys if mm_keys is not None else MultiModalKeys()  # the cache's: names item ids
        self._raw: dict[tuple[str, int], list[int]] = {}  # (identifier, length) -> the raw ids a request gave
        self._mm = False  # a multimodal request was seen: item ids (negative) may be in the tree
        # Siblings diverge at page boundaries, inside their first pages. When block_size is a multiple
        # of page_size, that page lies inside one block, which differs too: one holder per block.
        # Otherwise (page 16, block 6) a block can end in two siblings whose pages differ only after
        # it, so blocks are counted per medium (events/holders.py); so are vLLM's schemes (no namespace).
        self.page_size = page_size
        self._counted = bool(block_size % page_size) or self.hasher.vllm
        self._holders = Holders()
        self.groups = GroupEvents(self, groups) if groups else None
        # the group fields of each group's events: none at all for a one-group model
        self.fields: list[tuple] = ([()] if not groups
                                    else [FULL.fields(0)] + [s.fields(g + 1) for g, s in enumerate(groups)])
        self._xxh3: Callable[[bytes, Any], Any] | None = None if self.hasher.vllm else hash_function()
        self._plain = False  # the common case (module docstring), set by _replan
        self._replan()

    def _replan(self) -> None:
        self._plain = self._xxh3 is not None and not self._counted and self.groups is None and not self._mm

    def take(self) -> list[KVEvent]:
        out, self.events = self.events, []
        return out

    # ------------------------------------------------------------------ ResidencyListener

    def stored(self, node: TreeNode, medium: str) -> None:
        size, depth = self.block_size, node.depth
        first, last = depth // size, (depth + node.size) // size
        if last <= first:  # no block ends in this edge
            return
        start = first * size
        # the path's key bytes from `start`, for digests and ids: most often the node's own key, not a copy
        raw = (node.key if start == depth else node.key[4 * (start - depth):] if start > depth
               else path_bytes(node, start))
        if not self._plain:
            parent = self._parent_digest(node, start)
            self.publish(node, self.digests(node, raw, parent)[1], self._int(parent), raw, first, medium, 0)
            return
        keys = self._ns_keys.get(node.ns)
        if keys is None:
            keys = self._keys(node.ns)
        root, lora_id, lora_name, salt = keys  # (compiled: one check of the tuple's types, not one per field)
        parent_int: Any = None if start == 0 else self._parent_digest(node, start)  # XXH3: the digest is the int
        got = self._digests.get(node)
        if got is None:  # XXH3 chain of blocks [first, last), each seeded by the one before
            xxh3 = self._xxh3
            assert xxh3 is not None  # _plain
            hashes = BlockHashes(xxh3_words(raw, 4 * size, last - first,
                                            xxh3(root, SEED) if parent_int is None else parent_int))
            self._digests[node] = got = (hashes, hashes)
        if lora_name is None and not salt:  # no LoRA name, no salt: the ids stay bytes
            self.events.append(BlockStored(got[1], parent_int, TokenIds(raw, (last - first) * size), size, lora_id,
                                           medium))
        else:
            self._emit(node, got[1], parent_int, raw, first, medium, 0)

    def removed(self, node: TreeNode, medium: str) -> None:
        got = self._digests.get(node)
        hashes = (got if got is not None else self.digests(node))[1]
        if self._plain:
            if hashes.words:
                self.events.append(BlockRemoved(hashes, medium))
        else:
            self.withdraw(hashes, medium, 0)
            if medium == DEVICE and self.groups is not None:
                self.groups.dropped(node)  # its components go with its full KV
        other = node.host_pages if medium == DEVICE else node.pages
        if other is None:  # the node leaves the tree: its digests go with it (kept above if they were not)
            del self._digests[node]

    def split(self, upper: TreeNode, lower: TreeNode) -> None:
        """`lower`'s edge was just cut after `upper.size` tokens: the blocks it had are those ending
        in upper's edge, then those ending in lower's, so its digests are cut the same way."""
        old = self._digests.get(lower)  # (overwritten below: no pop)
        if old is not None:
            d, h = old[0], old[1]
            j = (upper.depth + upper.size) // self.block_size - upper.depth // self.block_size
            hu, hl = h.cut(j)
            if h is d:  # xxh3: the digests are the hashes
                self._digests[upper], self._digests[lower] = (hu, hu), (hl, hl)
            else:
                self._digests[upper], self._digests[lower] = (d[:j], hu), (d[j:], hl)
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
        self._replan()
        remember_raw(self._raw, extra, tokens)

    # ------------------------------------------------------------------ events

    def publish(self, node: TreeNode, hashes: BlockHashes, parent: int | None, raw: bytes, first: int,
                medium: str, group: int) -> None:
        """BlockStored for blocks [first, first + len(hashes)) of `node`'s path (`raw`: the path's
        key bytes from the start of block `first`, maybe more; `parent` the int of block first - 1);
        counted: only blocks new to (medium, group), in runs of consecutive ones."""
        new = self._holders.add(hashes, medium, group) if self._counted else None
        if new is None:  # every block is new to (medium, group)
            self._emit(node, hashes, parent, raw, first, medium, group)
            return
        step = 4 * self.block_size
        for i, j in new_runs(new):  # one event per run of consecutive new blocks
            self._emit(node, hashes[i:j], parent if i == 0 else hashes.at(i - 1), raw[i * step:j * step], first + i,
                       medium, group)

    def store_blocks(self, node: TreeNode, hashes: BlockHashes, first: int, group: int) -> None:
        """`publish` on the device for blocks [first, first + len(hashes)) of `node`'s edge."""
        pos = first * self.block_size
        self.publish(node, hashes, self.parent_int(node, pos), path_bytes(node, pos), first, DEVICE, group)

    def withdraw(self, hashes: BlockHashes, medium: str, group: int) -> None:
        """BlockRemoved for `hashes` (counted: those whose last holder this was)."""
        if self._counted:
            gone = self._holders.remove(hashes, medium, group)
            hashes = gone if isinstance(gone, BlockHashes) else BlockHashes.of(gone)
        if hashes.words:
            event = BlockRemoved(hashes, medium)
            fields = self.fields[group]
            if fields:  # a hybrid model's: which group
                event.group_idx = fields[0]
            self.events.append(event)

    def _emit(self, node: TreeNode, hashes: BlockHashes, parent: int | None, raw: bytes, first_block: int,
              medium: str, group: int) -> None:
        """One BlockStored; `raw` holds the blocks' ids (key bytes), maybe more after them."""
        n = len(hashes) * self.block_size
        _, lora_id, lora_name, salt = self._keys(node.ns)
        if lora_name is None and not salt and not self._mm:  # the common case: no numpy, the ids stay bytes
            extra, ids = None, TokenIds(raw, n)
        else:
            toks = np.frombuffer(raw, _INT32, n)
            extra = block_extra_keys(self.mm_keys, toks, self.block_size, first_block, lora_name, salt, self._mm)
            ids = (TokenIds(event_tokens(self.mm_keys, self._raw, toks, self.hasher.vllm)) if self._mm
                   else TokenIds(raw, n))
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

    # ------------------------------------------------------------------ digests

    def digests(self, node: TreeNode, raw: bytes | None = None,
                parent: Digest | None | bool = False) -> tuple[Sequence[Digest] | BlockHashes, BlockHashes]:
        """Digests of the blocks whose last token lies in `node`'s edge, and the hashes events carry for
        them (computed once, then kept). `raw`: the path's key bytes from the first such block's
        start, and `parent`: the digest of the block before it, when the caller has them."""
        got = self._digests.get(node)
        if got is None:
            size = self.block_size
            first, last = node.depth // size, (node.depth + node.size) // size  # blocks [first, last)
            if first >= last:
                none = BlockHashes(b"")
                got = (none, none)
            else:
                if raw is None:
                    raw = path_bytes(node, first * size)
                if parent is False:
                    parent = self._parent_digest(node, first * size)
                got = self._hash(node, raw, first, last, parent)
            self._digests[node] = got
        return got

    def _hash(self, node: TreeNode, raw: bytes, first: int, last: int,
              parent: Digest | None) -> tuple[Sequence[Digest] | BlockHashes, BlockHashes]:
        size, root = self.block_size, self._keys(node.ns)[0]
        xxh3 = self._xxh3
        if not self._mm and xxh3 is not None:  # the common case: XXH3 straight from the key bytes
            seed = xxh3(root, SEED) if parent is None else parent
            hashes = BlockHashes(xxh3_words(raw, 4 * size, last - first, seed))
            return hashes, hashes  # xxh3: the digests are the hashes
        tree_toks = np.frombuffer(raw, _INT32, (last - first) * size)
        extra = None
        if self.hasher.vllm:
            _, _, lora_name, salt = self._keys(node.ns)
            extra = block_extra_keys(self.mm_keys, tree_toks, size, first, lora_name, salt, self._mm)
        if self._mm:
            tree_toks = event_tokens(self.mm_keys, self._raw, tree_toks, self.hasher.vllm)
        digests = self.hasher.digests(tree_toks, root, size, parent, extra)
        hashes = BlockHashes.of(self.hasher.ints(digests))
        return (hashes if xxh3 is not None else digests), hashes

    def _parent_digest(self, node: TreeNode, pos: int) -> Digest | None:
        """Digest of the block that ends at `pos` (<= node.depth), held by an ancestor (None at 0)."""
        if pos == 0:
            return None
        anc: TreeNode = node.parent  # type: ignore[assignment]
        while not anc.depth < pos <= anc.depth + anc.size:
            anc = anc.parent  # type: ignore[assignment]
        got = self._digests.get(anc)
        if got is None:
            got = self.digests(anc)
        k = pos // self.block_size - 1 - anc.depth // self.block_size
        return got[1].at(k) if self._xxh3 is not None else got[0][k]  # xxh3: the digest is the hash

    def parent_int(self, node: TreeNode, pos: int) -> int | None:
        """The event int of the block ending at `pos` (block-aligned, <= node.end) on `node`'s path."""
        first = node.depth // self.block_size
        if pos // self.block_size <= first:
            return self._int(self._parent_digest(node, pos))
        return self.digests(node)[1].at(pos // self.block_size - 1 - first)

    def _int(self, digest: Digest | None) -> int | None:
        if digest is None or not self.hasher.vllm:  # xxh3: the digest is the int
            return cast("int | None", digest)
        return self.hasher.ints([digest])[0]

    def fork(self) -> EventRecorder:
        """A recorder sharing this one's hasher, digests and multimodal names, counting every block
        once (a fresh Holders, counted): what `snapshot` records into."""
        fresh = EventRecorder(self.block_size, self.page_size, hasher=self.hasher, mm_keys=self.mm_keys)
        fresh._digests, fresh._ns_keys, fresh._raw, fresh.fields = self._digests, self._ns_keys, self._raw, self.fields
        fresh._counted = True
        fresh._mm = True  # this recorder may not have seen the requests (kv_events off): check every id
        fresh.groups = None if self.groups is None else GroupEvents(fresh, self.groups.specs)
        fresh._replan()
        return fresh

    def snapshot(self, tree: RadixTree) -> list[KVEvent]:
        """Every block cached now, for resync (events/snapshot.py); records nothing here."""
        return snapshot(self.fork(), tree)


def path_bytes(node: TreeNode, start: int) -> bytes:
    """The key bytes (int32 little-endian token ids) of positions [start, node.end) along the path
    to `node`."""
    if start >= node.depth:
        return node.key if start == node.depth else node.key[4 * (start - node.depth):]
    chunks = []
    while node.depth + node.size > start:
        chunks.append(node.key[4 * max(0, start - node.depth):])
        node = node.parent  # type: ignore[assignment]
    return b"".join(chunks[::-1])

