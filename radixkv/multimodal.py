"""Multimodal keys: an image (an audio clip, a video) is keyed by its whole content hash, never by token ids.

The public key type, carried beside a request's tokens in `ExtraKeys.mm` (radixkv.keys):

    MultiModalItem(identifier, offset, length)
      identifier  str: the item's full content hash as the caller computed it (vLLM's mm_hash, e.g.
                  a sha256 hex digest). Compared whole, never shortened: equal content, equal identifier.
      offset      int >= 0: position of the item's first placeholder token in the request
      length      int >= 1: placeholder tokens it occupies

How the radix tree keys an item. Text token ids lie in [0, 2**31 - 1]. A cache's MultiModalKeys
table gives each distinct (identifier, length) a run of fresh negative int32 ids, one per
placeholder position, and the tree keys those positions by them (the caller's own placeholder ids
are never looked at). So:

  - no token sequence can equal an image: text ids are >= 0, item ids < 0;
  - two items get the same ids only if their identifiers are equal as whole strings (a dict lookup
    on the full identifier), so no collision of a shortened hash can share KV;
  - the text before an item's offset is shared with text-only requests and with other items.

Ids are never handed out twice within an epoch. The table remembers at most `max_items` items,
forgetting the least recently used: a forgotten item seen again gets fresh ids (a miss, never
another item's KV). When the id space runs out, a new epoch starts: the table is cleared and
multimodal requests from then on live under their own root (`root`), which no older id reaches.

`hash_ids(item)` gives stateless ids for *hashing* only (KV-event block hashes and the router, which
must name a block alike on every instance). A collision there (30 bits a position) can only
misroute a request: the instance matches the tree's own keys, so it never serves wrong KV.
`MultiModalKeys.hash_form` turns a cache's keys back into that form; `item_at` names the item of an id.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from radixkv.errors import InvalidArgumentError

HASH_BASE = 1 << 30  # hash_ids lie in [2**30, 2**31): only ever hashed, never matched in a tree


@dataclass(frozen=True)
class MultiModalItem:
    identifier: str  # the item's full content hash (vLLM's mm_hash): equal content, equal identifier
    offset: int  # position of its first placeholder token in the request
    length: int  # placeholder tokens it occupies


class MultiModalKeys:
    """One cache's table: (identifier, length) -> its first id (negative int32); see the module doc."""

    def __init__(self, max_items: int = 1 << 16, id_space: int = 1 << 31) -> None:
        self.max_items = max_items  # ~250 bytes an item: 16 MiB at the default
        self.id_space = id_space  # ids lie in [-id_space, -1]
        self.epoch = 0
        self._first: OrderedDict[tuple[str, int], int] = OrderedDict()  # least recently used first
        self._by_first: dict[int, tuple[str, int]] = {}  # first id -> (identifier, length)
        self._firsts: list[int] = []  # first ids, increasing; forgotten ones dropped lazily
        self._used = 0  # ids handed out in this epoch

    def root(self, ns: bytes) -> bytes:
        """The root key of a multimodal request in namespace key `ns` (itself in epoch 0)."""
        return ns if not self.epoch else b"m" + self.epoch.to_bytes(4, "big") + ns

    def ids(self, item: MultiModalItem) -> np.ndarray:
        """int32 `[item.length]`: the ids the tree keys the item's positions by (interned on first use)."""
        key = (item.identifier, item.length)
        first = self._first.get(key)
        if first is None:
            first = self._intern(key)
        else:
            self._first.move_to_end(key)
        return np.arange(first, first + item.length, dtype=np.int64).astype(np.int32)

    def _intern(self, key: tuple[str, int]) -> int:
        if key[1] > self.id_space:
            raise InvalidArgumentError(f"a multimodal item of {key[1]} tokens exceeds the id space ({self.id_space})")
        if self._used + key[1] > self.id_space:  # a new epoch: no id of the old one is reachable again
            self.epoch += 1
            self._first.clear()
            self._by_first.clear()
            self._firsts.clear()
            self._used = 0
        if len(self._first) >= self.max_items:
            del self._by_first[self._first.popitem(last=False)[1]]
        first = self._used - self.id_space
        self._used += key[1]
        self._first[key] = first
        self._by_first[first] = key
        self._firsts.append(first)
        if len(self._firsts) > 2 * len(self._by_first) + 64:
            self._firsts = [f for f in self._firsts if f in self._by_first]
        return first

    def item_at(self, token: int) -> tuple[str, int, int] | None:
        """(identifier, length, index in the item) of a tree id, or None (a text id or a forgotten item)."""
        if token >= 0:
            return None
        i = bisect.bisect_right(self._firsts, token) - 1
        key = self._by_first.get(self._firsts[i]) if i >= 0 else None
        if key is None or token >= self._firsts[i] + key[1]:
            return None
        return key[0], key[1], token - self._firsts[i]

    def hash_form(self, tokens: np.ndarray) -> np.ndarray:
        """`tokens` (int32, as the tree keys them) with each item id replaced by its hash id (a copy
        when anything changes). Ids of forgotten items stay as they are (their hashes then differ
        from other instances': a missed route, never wrong KV)."""
        if not len(tokens) or int(tokens.min()) >= 0:
            return tokens
        out, known = tokens.astype(np.int32, copy=True), {}
        for p in np.flatnonzero(out < 0).tolist():
            hit = self.item_at(int(out[p]))
            if hit is not None:
                if hit[:2] not in known:
                    known[hit[:2]] = hash_ids(MultiModalItem(hit[0], 0, hit[1]))
                out[p] = known[hit[:2]][hit[2]]
        return out


def hash_ids(item: MultiModalItem) -> np.ndarray:
    """int32 `[item.length]` in [2**30, 2**31): stateless ids standing for the item in block hashes."""
    ident = item.identifier.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(b"s" + len(ident).to_bytes(4, "big") + ident, digest_size=8,
                             person=b"radixkv-mm").digest()
    z = np.uint64(int.from_bytes(digest, "big")) + np.arange(item.length, dtype=np.uint64)
    with np.errstate(over="ignore"):  # splitmix64: wrapping uint64 arithmetic on purpose
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (np.uint64(HASH_BASE) + (z >> np.uint64(34))).astype(np.int32)
