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

Compiled with the core (radixkv/core_loader.py). Compiled code checks a value's declared type where it
reads it, a TypeError before any check of ours could raise the typed error: so the validators read
what callers give through `Any` (ExtraKeys' and MultiModalItem's fields included), and ExtraKeys is a
plain Python dataclass when compiled (frozen, `==`, hashing and `dataclasses.replace` as before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from mypy_extensions import mypyc_attr

from radixkv.errors import InvalidArgumentError
from radixkv.multimodal import MultiModalItem, MultiModalKeys, hash_ids

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
#   mm                    multimodal items, radixkv.multimodal.MultiModalItem(identifier, offset,
#                         length): the item's full content hash and its placeholder positions;
#                         covers the positions from the item's offset on
#
# Whole-request keys are folded into the namespace key (`request_key`): b"e" + namespace key +
# encode((lora_id, lora_name, cache_salt)), so requests that differ in them never share a root,
# and every block hash covers them. A multimodal item's placeholder positions are keyed by ids
# the cache's MultiModalKeys table interned for its whole identifier: negative, so no text token
# equals them, and equal only for equal identifiers (radixkv/multimodal.py). Block hashes, which
# must not depend on a cache, see stateless hash ids there instead (`hash_key`).
# ---------------------------------------------------------------------------------------------


@mypyc_attr(native_class=False)
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
        given: Any = self  # the fields as given, unchecked (module docstring)
        lora_id, mm = given.lora_id, given.mm
        if lora_id is not None and (type(lora_id) is not int or lora_id < 0):
            raise InvalidArgumentError(f"extra_keys.lora_id must be an int >= 0 or None, got {lora_id!r}")
        for name in ("lora_name", "cache_salt"):
            value = getattr(self, name)
            if value is not None and type(value) is not str:
                raise InvalidArgumentError(f"extra_keys.{name} must be a str or None, got {value!r:.60}")
        if not isinstance(mm, (tuple, list)):
            raise InvalidArgumentError(f"extra_keys.mm must be a list of (identifier, offset, length), got {mm!r:.60}")
        items = sorted((_mm_item(x) for x in mm), key=lambda m: m.offset)
        for a, b in zip(items, items[1:]):
            if b.offset < a.offset + a.length:
                raise InvalidArgumentError(f"extra_keys.mm items overlap: {a} and {b}")
        object.__setattr__(self, "mm", tuple(items))

    @property
    def whole_request(self) -> tuple[int | None, str | None, str | None]:
        return self.lora_id, self.lora_name, self.cache_salt

    def keyed(self, tokens: np.ndarray, mm_keys: MultiModalKeys) -> np.ndarray:
        """`tokens` (int32) with every item's positions replaced by the ids `mm_keys` interned for it:
        what the tree keys. A copy when anything changes, else `tokens` itself."""
        return self._replace(tokens, mm_keys.ids)

    def hashed(self, tokens: np.ndarray) -> np.ndarray:
        """`tokens` with every item's positions replaced by its stateless hash ids (block hashes only)."""
        return self._replace(tokens, hash_ids)

    def rekey(self, tokens: np.ndarray, start: int, keyed: np.ndarray) -> np.ndarray:
        """`tokens` (positions [start, start + len)) with the item positions among them taken from
        `keyed` (the request's tokens as keyed at open: items never run past them)."""
        out = tokens
        for item in self.mm:
            lo, hi = max(item.offset, start), min(item.offset + item.length, start + len(tokens))
            if lo < hi:
                out = out.astype(np.int32, copy=True) if out is tokens else out
                out[lo - start:hi - start] = keyed[lo:hi]
        return out

    def _replace(self, tokens: np.ndarray, ids: Callable[[MultiModalItem], np.ndarray]) -> np.ndarray:
        if not self.mm:
            return tokens
        out = tokens.astype(np.int32, copy=True)
        for item in self.mm:
            out[item.offset:item.offset + item.length] = ids(item)
        return out


def _mm_item(x: object) -> MultiModalItem:
    item: Any  # its fields as given, unchecked (module docstring)
    if isinstance(x, MultiModalItem):
        item = x
    elif isinstance(x, (tuple, list)) and len(x) == 3:
        item = MultiModalItem(*x)
    else:
        raise InvalidArgumentError(f"extra_keys.mm items are (identifier, offset, length), got {x!r:.60}")
    identifier, offset, length = item.identifier, item.offset, item.length
    if type(identifier) is not str or not identifier:
        raise InvalidArgumentError(f"a multimodal identifier must be a non-empty str, got {identifier!r:.60}")
    if type(offset) is not int or offset < 0 or type(length) is not int or length < 1:
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


def request_key(namespace: Any, extra_keys: Any, tokens: np.ndarray, mm_keys: MultiModalKeys
                ) -> tuple[bytes, np.ndarray]:
    """The canonical root key of a request and its tokens as a cache's tree keys them (item positions
    keyed by `mm_keys`). Validates everything first; InvalidArgumentError, nothing changed."""
    ns, extra = _checked(namespace, extra_keys, tokens)
    if extra is None or not extra.mm:
        return ns, tokens
    keyed = extra.keyed(tokens, mm_keys)  # may start a new epoch: take the root after it
    return mm_keys.root(ns), keyed


def hash_key(namespace: Any, extra_keys: Any, tokens: np.ndarray) -> tuple[bytes, np.ndarray]:
    """`request_key` as block hashes see it: the same on every instance (items by their hash ids)."""
    ns, extra = _checked(namespace, extra_keys, tokens)
    return ns, tokens if extra is None else extra.hashed(tokens)


def _checked(namespace: Any, extra_keys: Any, tokens: np.ndarray) -> tuple[bytes, ExtraKeys | None]:
    ns = namespace_key(namespace)
    extra = as_extra_keys(extra_keys)
    if extra is None:
        return ns, None
    if extra.mm and extra.mm[-1].offset + extra.mm[-1].length > len(tokens):
        raise InvalidArgumentError(f"extra_keys.mm item {extra.mm[-1]} runs past the request's {len(tokens)} tokens")
    if extra.whole_request != (None, None, None):
        ns = b"e" + ns + _encode(extra.whole_request, 0)
    return ns, extra


def whole_request_keys(ns: bytes) -> tuple[int | None, str | None, str | None]:
    """(lora_id, lora_name, cache_salt) folded into a root key by `request_key` (all None if none)."""
    ns = hash_root(ns)
    if not ns.startswith(b"e"):
        return None, None, None
    return _decode(ns, _skip(ns, 1))[0]  # type: ignore[return-value]


def hash_root(ns: bytes) -> bytes:
    """A root key as block hashes see it: without the epoch a MultiModalKeys table may have added."""
    return ns[5:] if ns.startswith(b"m") else ns


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
