"""Canonical keys: one byte string per namespace (and per request's extra keys), distinct by type and value.

A namespace partitions the cache: requests in different namespaces never share KV (a LoRA
adapter, a tenant, a model revision). It may be None (the default), a str, bytes, an int (not a
bool), or a tuple of these. Python's `==` would merge `1`, `1.0`, `True` and `np.int64(1)` into one
namespace and `repr` depends on the object, so the cache keys roots, and KV-event hashes, by an
explicit encoding instead:

    None -> b"n"        str -> b"s" + len + utf-8        bytes -> b"b" + len + bytes
    int  -> b"i" + len + signed big-endian               tuple -> b"t" + count + items
    (len and count: 4 bytes big-endian)

The encoding depends only on the value, so it is the same in every process, on every machine and
whatever order the traffic arrives in. Anything else raises InvalidArgumentError.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from radixkv.errors import InvalidArgumentError

DEFAULT_NAMESPACE = b"n"
_MAX_DEPTH = 8  # nested tuples deeper than this are rejected (a namespace is a small label)


def namespace_key(namespace: Any) -> bytes:
    """The canonical bytes of `namespace`; raises InvalidArgumentError for an unsupported type."""
    if namespace is None:
        return DEFAULT_NAMESPACE
    return _encode(namespace, 0)


def _encode(value: Any, depth: int) -> bytes:
    kind = type(value)
    if kind is str:
        data = value.encode("utf-8", "surrogatepass")
        return b"s" + len(data).to_bytes(4, "big") + data
    if kind is bytes:
        return b"b" + len(value).to_bytes(4, "big") + value
    if kind is int:
        data = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
        return b"i" + len(data).to_bytes(4, "big") + data
    if value is None:
        return DEFAULT_NAMESPACE
    if kind is tuple and depth < _MAX_DEPTH:
        return b"t" + len(value).to_bytes(4, "big") + b"".join(_encode(v, depth + 1) for v in value)
    raise InvalidArgumentError(
        f"a namespace must be None, a str, bytes, an int (not a bool) or a tuple of these, got "
        f"{kind.__name__} {value!r:.60}; convert it (e.g. str(x)) so that equal namespaces are equal values")


# ---------------------------------------------------------------------------------------------
# Extra keys: what else, besides the namespace and the tokens, decides whether KV can be shared.
#
#   lora_id / lora_name   the adapter the KV was computed with: covers the whole request
#   cache_salt            a tenant's secret (vLLM's cache_salt): covers the whole request
#   mm                    multimodal items, each (content hash, offset, length) of placeholder tokens:
#                         covers the blocks from the item's offset on
#
# Whole-request keys are folded into the namespace key (`request_key`): b"e" + namespace key +
# encode((lora_id, lora_name, cache_salt)), so requests that differ in them never share a root,
# and every block hash covers them. A multimodal item replaces its placeholder token ids by ids
# derived from its content hash (as SGLang pads image tokens with the item's hash): position i of
# the item gets MM_BASE + 30 bits of splitmix64(blake2b(identifier) + i). The radix tree then shares
# everything before the item's offset with text-only requests and nothing from the offset on with a
# request whose item differs, at any page size, with no change to the tree; block hashes follow.
# Derived ids lie in [2**30, 2**31): no tokenizer has 2**30 tokens, so no text id collides with
# them, and two different items collide only if 30 bits per position all agree (2**-64 for
# items of three or more tokens, since every id derives from one 64-bit digest).
# ---------------------------------------------------------------------------------------------

MM_BASE = 1 << 30


@dataclass(frozen=True)
class MultiModalItem:
    identifier: str  # the item's content hash (vLLM's mm_hash): equal content, equal identifier
    offset: int  # position of its first placeholder token in the request
    length: int  # placeholder tokens it occupies


@dataclass(frozen=True)
class ExtraKeys:
    """Per-request keys that partition the cache beyond the namespace (validated at construction).

    `mm` may be given as MultiModalItems or (identifier, offset, length) tuples, in any order; it is
    kept sorted by offset (items may not overlap), so equal requests give equal keys."""

    lora_id: int | None = None
    lora_name: str | None = None
    cache_salt: str | None = None
    mm: tuple[MultiModalItem, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.lora_id is not None and (type(self.lora_id) is not int or self.lora_id < 0):
            raise InvalidArgumentError(f"extra_keys.lora_id must be an int >= 0 or None, got {self.lora_id!r}")
        for name in ("lora_name", "cache_salt"):
            value = getattr(self, name)
            if value is not None and type(value) is not str:
                raise InvalidArgumentError(f"extra_keys.{name} must be a str or None, got {value!r:.60}")
        if not isinstance(self.mm, (tuple, list)):
            raise InvalidArgumentError(f"extra_keys.mm must be a list of (identifier, offset, length), got {self.mm!r:.60}")
        items = sorted((_mm_item(x) for x in self.mm), key=lambda m: m.offset)
        for a, b in zip(items, items[1:]):
            if b.offset < a.offset + a.length:
                raise InvalidArgumentError(f"extra_keys.mm items overlap: {a} and {b}")
        object.__setattr__(self, "mm", tuple(items))

    @property
    def whole_request(self) -> tuple[int | None, str | None, str | None]:
        return self.lora_id, self.lora_name, self.cache_salt

    def apply(self, tokens: np.ndarray, start: int = 0) -> np.ndarray:
        """`tokens` (int32, positions [start, start + len)) with every multimodal placeholder replaced
        by its derived id; a copy when anything changes, else `tokens` itself."""
        out = tokens
        for item in self.mm:
            lo, hi = max(item.offset, start), min(item.offset + item.length, start + len(tokens))
            if lo < hi:
                if out is tokens:
                    out = tokens.astype(np.int32, copy=True)
                out[lo - start:hi - start] = placeholder_ids(item)[lo - item.offset:hi - item.offset]
        return out


def _mm_item(x: object) -> MultiModalItem:
    if isinstance(x, MultiModalItem):
        item = x
    elif isinstance(x, (tuple, list)) and len(x) == 3:
        item = MultiModalItem(*x)
    else:
        raise InvalidArgumentError(f"extra_keys.mm items are (identifier, offset, length), got {x!r:.60}")
    if type(item.identifier) is not str or not item.identifier:
        raise InvalidArgumentError(f"a multimodal identifier must be a non-empty str, got {item.identifier!r:.60}")
    if type(item.offset) is not int or item.offset < 0 or type(item.length) is not int or item.length < 1:
        raise InvalidArgumentError(f"a multimodal item needs an int offset >= 0 and length >= 1, got {item}")
    return item


def as_extra_keys(extra: Any) -> ExtraKeys | None:
    """None, an ExtraKeys, or a dict of its fields; InvalidArgumentError for anything else."""
    if extra is None or isinstance(extra, ExtraKeys):
        return extra
    if isinstance(extra, dict):
        unknown = set(extra) - {"lora_id", "lora_name", "cache_salt", "mm"}
        if unknown:
            raise InvalidArgumentError(f"unknown extra_keys {sorted(map(str, unknown))}; "
                                       "use lora_id, lora_name, cache_salt, mm")
        return ExtraKeys(**extra)
    raise InvalidArgumentError(f"extra_keys must be None, an ExtraKeys or a dict, got {type(extra).__name__}")


def request_key(namespace: Any, extra_keys: Any, tokens: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The canonical root key of a request and its tokens as the cache keys them (multimodal
    placeholders replaced). Validates everything first; InvalidArgumentError, nothing changed."""
    ns = namespace_key(namespace)
    extra = as_extra_keys(extra_keys)
    if extra is None:
        return ns, tokens
    if extra.mm and extra.mm[-1].offset + extra.mm[-1].length > len(tokens):
        raise InvalidArgumentError(f"extra_keys.mm item {extra.mm[-1]} runs past the request's {len(tokens)} tokens")
    if extra.whole_request != (None, None, None):
        ns = b"e" + ns + _encode(extra.whole_request, 0)
    return ns, extra.apply(tokens)


def whole_request_keys(ns: bytes) -> tuple[int | None, str | None, str | None]:
    """(lora_id, lora_name, cache_salt) folded into a root key by `request_key` (all None if none)."""
    if not ns.startswith(b"e"):
        return None, None, None
    return _decode(ns, _skip(ns, 1))[0]  # type: ignore[return-value]


def placeholder_ids(item: MultiModalItem) -> np.ndarray:
    """int32 `[item.length]`: the ids that stand for the item's placeholder tokens in the cache."""
    digest = hashlib.blake2b(_encode(item.identifier, 0), digest_size=8, person=b"radixkv-mm").digest()
    z = np.uint64(int.from_bytes(digest, "big")) + np.arange(item.length, dtype=np.uint64)
    with np.errstate(over="ignore"):  # splitmix64: wrapping uint64 arithmetic on purpose
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (np.uint64(MM_BASE) + (z >> np.uint64(34))).astype(np.int32)


def _skip(data: bytes, pos: int) -> int:
    """Position after the canonical value that starts at `pos`."""
    tag, n = data[pos:pos + 1], int.from_bytes(data[pos + 1:pos + 5], "big")
    if tag == b"n":
        return pos + 1
    if tag == b"t":
        pos += 5
        for _ in range(n):
            pos = _skip(data, pos)
        return pos
    return pos + 5 + n


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    """The value of a canonical encoding of None, str, int or a tuple of these, and where it ends."""
    tag, n = data[pos:pos + 1], int.from_bytes(data[pos + 1:pos + 5], "big")
    if tag == b"n":
        return None, pos + 1
    if tag == b"t":
        items, pos = [], pos + 5
        for _ in range(n):
            item, pos = _decode(data, pos)
            items.append(item)
        return tuple(items), pos
    body = data[pos + 5:pos + 5 + n]
    if tag == b"s":
        value: Any = body.decode("utf-8", "surrogatepass")
    else:
        value = body if tag == b"b" else int.from_bytes(body, "big", signed=True)
    return value, pos + 5 + n


def common_bytes(a: bytes, b: bytes, pos: int, page_bytes: int) -> int:
    """Bytes of `a` equal to `b[pos:]` from the start, rounded down to whole pages: where two edge keys
    (int32 little-endian token ids, as the tree core, radix/core.py, keeps them) part."""
    n = min(len(a), len(b) - pos) // 4
    x = np.frombuffer(a, dtype=np.int32, count=n)
    y = np.frombuffer(b, dtype=np.int32, count=n, offset=pos)
    diff = np.flatnonzero(x != y)
    same = int(diff[0]) if len(diff) else n
    return same * 4 // page_bytes * page_bytes
