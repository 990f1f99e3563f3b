"""ShadowKeys: keys as the shadows of a tree (radix/shadow.py) hold them, one per tree, shared by its shadows.

At page 1 a shadow keeps the tree's own key bytes (int32 per token). From page 3 on it keeps one 64-bit
hash of each page's tokens instead (8 bytes a page, 0.5 per token at page 16, where token bytes cost 4),
so the shadow's tree has the same shape, the same splits and the same matches as one of token bytes.
Two different pages with the same hash below the same node (about 2**-64 a pair) would make the shadow
report a match the real cache would not have: that perturbs an ESTIMATE only (a shadow picks which
expert the real cache follows; it never serves KV), and tests/test_adaptive.py checks shadow == real
cache, request for request, at pages 3, 4 and 16.

A page's hash depends on its own tokens only (no chain through its parent page), so the hashes of a
key are those of its edges, joined: many keys or edges are hashed in one numpy call (`edges`), and a key's
hashes computed elsewhere can be handed in (`prime`). Real nodes' edge hashes are kept by node id (up to
MEMO_BYTES, oldest out first; an upper node a split made takes its part of its only child's): `real_edges`
hashes only the real nodes' edges not kept, so the prior's replay (eviction/history.py) and the shadow
copied from the real tree right after it, at the first eviction, hash each edge once between them. Per
request a key is hashed once for every shadow of a tree: ShadowKeys remembers the last key (the second
shadow's call is free) and extends it (a request's insert of prompt + output hashes only the pages not
hashed yet). A lookup's key is put together from the kept hashes of the real match's path (`along`); its
pages past the real match are hashed only when a shadow's walk reaches them with somewhere to go (`head`),
else with the output's at the insert: one numpy call a request where the path was kept (numpy costs ~10k
instructions a call, ~15-110 a page).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Sequence, cast

import numpy as np

from radixkv.radix.core import PrefixNode

if TYPE_CHECKING:
    from radixkv.eviction.view import NodeView

HASH_BYTES: Final = 8  # a page's key in a hashing shadow: one int64, little-endian
CHUNK: Final = 1 << 20  # token bytes hashed per numpy call by `edges` (a transient of 1/8 of it for the hashes)
MEMO_BYTES: Final = 1 << 17  # real nodes' edge hashes kept by `along`, charged ENTRY_BYTES + their length each
DOT_PAGES: Final = 48  # `pages` of fewer pages calls ndarray.dot, else np.matmul (callgrind: the cheaper each side)
ENTRY_BYTES: Final = 100  # a kept edge's bytes header (33) and its dict slot and int key, rounded up


class ShadowKeys:
    """Keys as a tree's shadows hold them (module docstring): the tree's own key bytes at page sizes
    1 and 2, else one int64 per whole page (a trailing partial page is dropped: nothing matches it),

        hash of a page = sum over its tokens t_j of t_j * w_j   (mod 2**64, j the position in the page)

    with fixed odd 64-bit weights w_j (splitmix64 of j: the same in every process; at even page sizes
    the tokens are taken in int64 pairs, half the work): one matrix-vector product per call (numpy:
    ~10k instructions a call and ~110 a page). Two keys have the same hashes page for page exactly
    when they have the same tokens, barring a collision: one token (pair) that differs always changes
    its page's hash (odd weights are invertible mod 2**64). It remembers the last key asked."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.hashed = 4 * page_size > HASH_BYTES  # page sizes 1 and 2: token bytes are no longer
        self.page_bytes = HASH_BYTES if self.hashed else 4 * page_size  # key bytes a page
        wide = page_size % 2 == 0  # tokens taken in int64 pairs
        self._page = np.dtype((np.int64 if wide else np.int32, page_size // 2 if wide else page_size))  # a row
        self._weights = _weights(page_size // 2 if wide else page_size)
        self._key = b""  # the last key asked (token bytes) ...
        self._hashes = b""  # ... and its page hashes
        self._edges: dict[int, bytes] = {}  # real node id -> its edge's hashes (a split keeps a suffix of them)
        self._looked = b""  # token bytes: the last lookup's key (from its root) ...
        self._hit: PrefixNode[Any] | None = None  # ... and the real node where the real cache's match of it ended
        self._memo = 0  # bytes charged for _edges (oldest first out past MEMO_BYTES)

    def of(self, key: bytes) -> bytes:
        """`key` (int32 token bytes from a namespace root) as the shadows hold it."""
        if not self.hashed:
            cut = len(key) % self.page_bytes  # a partial page matches nothing: as a hashing shadow drops it
            return key if cut == 0 else key[:len(key) - cut]
        hashes, tb = self._hashes, 4 * self.page_size
        if key is self._key:
            if len(hashes) // HASH_BYTES == len(key) // tb:
                return hashes
        elif not key.startswith(self._key):  # not the last key (or its known pages) extended: hash it all
            hashes = b""
        hashes += self.pages(key, len(hashes) // HASH_BYTES * tb)  # the pages not known yet only
        self._key, self._hashes = key, hashes
        return hashes

    def head(self, key: bytes) -> bytes:
        """A prefix of `of(key)`, hashing nothing new where `along` left key's pages past its node for later:
        a shadow's walk asks `of` for the rest only if it gets that far."""
        return self._hashes if key is self._key else self.of(key)

    def prime(self, key: bytes, shaped: bytes) -> None:
        """The next `of(key)` (this very object) returns `shaped`: `key`'s whole pages as the shadows hold
        them, put together by the caller from `edges` (hashing shadows only)."""
        self._key, self._hashes = key, shaped

    def along(self, key: bytes, node: NodeView) -> None:
        """`key` (token bytes from a root) starts with the key of real node `node` (where the real
        cache's match of it ended): make `head(key)` ready from the hashes of the edges on node's path,
        kept from earlier keys or hashed now, in one numpy call with key's pages past node. When all were
        kept, key's pages past node are left to `of` (the request's insert hashes them with its output in
        one call, unless a shadow's match walks past node). A split node keeps its edge's last pages: a
        suffix of them. Where keys are token bytes it only remembers `node` for `real_end`."""
        if not self.hashed:
            self._looked, self._hit = key, cast("PrefixNode[Any]", node)
            return
        if key is self._key:
            return
        path: list[PrefixNode[Any]] = []  # node's path, from its root's child down
        real = cast("PrefixNode[Any]", node)  # a real node: its fields read as a native class's, compiled
        tail = 4 * (real.depth + real.size)
        while real.parent is not None:
            path.append(real)
            real = real.parent
        path.reverse()
        self._key, self._hashes = key, b"".join(self.real_edges(path, key, tail))

    def real_end(self, key: bytes) -> PrefixNode[Any] | None:
        """Token bytes: the real node where the real cache's match of `key` (this very object, the last
        lookup's) ended, if `along` was told; else None. The real tree may have changed since: a reader
        compares what it takes from that node's path."""
        return self._hit if key is self._looked else None

    def real_edges(self, nodes: Sequence[NodeView], key: bytes = b"", tail: int = -1) -> list[bytes]:
        """Real `nodes`' edges as the shadows hold them: kept hashes where they cover the edge (a split
        node keeps its edge's last pages: a suffix of them), the others hashed in one numpy call and kept
        (the last of `nodes` first: the first stay longest). Where some edge was hashed and `tail` >= 0,
        `key[tail:]` (whole pages but the last) went into that call too: its hashes come last."""
        if not self.hashed:
            return [n.key for n in nodes]
        ps, kept = self.page_size, self._edges
        out: list[bytes] = []
        todo: list[int] = []  # positions of the edges not kept
        for view in nodes:
            node = cast("PrefixNode[Any]", view)  # a real node (as in `along`)
            h, need = kept.get(node.id), node.size // ps * HASH_BYTES
            if h is not None and len(h) >= need:
                out.append(h if len(h) == need else h[len(h) - need:])
            elif h is None and len(node.children) == 1 and (h := self._above(node, need)) is not None:
                out.append(h)
                self.keep(node.id, h)
            else:
                todo.append(len(out))
                out.append(b"")
        if not todo:  # nothing to hash: key's rest, if asked, is left to `of` (`head`)
            return out
        hashed = self.edges([nodes[i].key for i in todo] + ([key[tail:]] if tail >= 0 else []))
        for i, h in zip(todo, hashed):
            out[i] = h
        room = MEMO_BYTES  # keep no more than the memo holds: the rest would only push these out
        for i in reversed(todo):
            room -= ENTRY_BYTES + len(out[i])
            if room < 0:
                break
            self.keep(nodes[i].id, out[i])
        if tail >= 0:
            out.append(hashed[-1])
        return out

    def remember(self, node: NodeView, key: bytes) -> None:
        """Real node `node` (a new leaf) ends within `key`, the key last asked: keep its edge's hashes."""
        if not self.hashed or key is not self._key:
            return
        real, ps = cast("PrefixNode[Any]", node), self.page_size  # (as in `along`)
        start, end = real.depth // ps * HASH_BYTES, (real.depth + real.size) // ps * HASH_BYTES
        if end <= len(self._hashes):
            self.keep(real.id, self._hashes[start:end])

    def keep(self, node_id: int, hashes: bytes) -> None:
        """Keep real node `node_id`'s edge hashes; past MEMO_BYTES drop the oldest kept."""
        kept = self._edges
        old = kept.pop(node_id, None)
        if old is not None:
            self._memo -= ENTRY_BYTES + len(old)
        kept[node_id] = hashes
        self._memo += ENTRY_BYTES + len(hashes)
        while self._memo > MEMO_BYTES:
            self._memo -= ENTRY_BYTES + len(kept.pop(next(iter(kept))))

    def _above(self, node: PrefixNode[Any], need: int) -> bytes | None:
        """The `need` hashes of real node `node`'s edge from its only child's kept hashes, if they reach
        that far up: a match that ended inside an edge split it, and the lower part, the old node, keeps
        its id and its end, so its kept hashes end with its edge's and begin with node's, or above."""
        child: PrefixNode[Any] = next(iter(node.children.values()))
        h = self._edges.get(child.id)
        if h is None:
            return None
        below = child.size // self.page_size * HASH_BYTES
        return h[len(h) - below - need:len(h) - below] if len(h) >= below + need else None

    def edges(self, keys: list[bytes]) -> list[bytes]:
        """Each of `keys` (whole pages of int32 tokens) as the shadows hold it: the same as `of` gives,
        in one numpy call per CHUNK token bytes instead of one per key."""
        if not self.hashed:
            return keys
        out: list[bytes] = []
        i, n, tb = 0, len(keys), 4 * self.page_size
        while i < n:
            j, size = i, 0
            while j < n and (j == i or size < CHUNK):
                size += len(keys[j])
                j += 1
            hashes, pos = self.pages(b"".join(keys[i:j]), 0), 0
            for key in keys[i:j]:
                end = pos + len(key) // tb * HASH_BYTES
                out.append(hashes[pos:end])
                pos = end
            i = j
        return out

    def pages(self, tokens: bytes, offset: int) -> bytes:
        """Hashes of the whole pages of `tokens` (int32 bytes) from byte `offset` (a page boundary) on."""
        n = (len(tokens) - offset) // (4 * self.page_size)
        if n <= 0:
            return b""
        rows = np.frombuffer(tokens, self._page, n, offset)
        # int64, wrapping; the method dot costs ~1.7k instructions less a call, ~30 more a page than matmul
        return (rows.dot(self._weights) if n < DOT_PAGES else np.matmul(rows, self._weights)).tobytes()


def _weights(n: int) -> np.ndarray:
    """Odd 64-bit weights for positions 0..n-1 in a page: splitmix64 of the position, int64."""
    z = (np.arange(n, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) | np.uint64(1)).view(np.int64)
