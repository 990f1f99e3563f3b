"""Canonical namespace keys: one byte string per namespace, distinct by type and value.

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

from typing import Any

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
