"""KV events, in vLLM's field names, and the block hash that fleet routers match on.

A *block* is `block_size` consecutive tokens aligned from the start of a sequence (independent of
the cache's page_size). Block b of a sequence in a namespace has the chained hash

    h_b = first 8 bytes (big-endian int) of
          sha256( parent || namespace_key(namespace) || tokens of block b as int32 little-endian )
    parent = h_{b-1}.to_bytes(8, "big"), or b"" for the first block

where `namespace_key` is the canonical, self-delimiting encoding of radixkv.keys (so `1`, `"1"`
and `(1,)` hash apart, and equal namespaces hash alike whichever object carried them)

so it names the whole prefix up to the end of the block, is identical across processes and
machines (no Python `hash()`), and two namespaces never share a hash. The cache publishes
`BlockStored` when a block becomes fully cached on a medium and `BlockRemoved` when it stops being
so; `AllBlocksCleared` says "forget everything from this instance" (sent on resync).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Union

import numpy as np

from radixkv.errors import RadixKVError
from radixkv.keys import namespace_key

DEVICE, HOST = "GPU", "CPU"  # vLLM's medium names; the device may be a CPU in tests, the name is the tier


class EventFormatError(RadixKVError, ValueError):
    """A serialized event is malformed: unknown type, missing or mistyped fields."""


def block_hashes(tokens: np.ndarray | list[int], namespace: Hashable, block_size: int,
                 parent_hash: int | None = None) -> list[int]:
    """Chained hashes of the full blocks of `tokens` (a trailing partial block is ignored).

    `parent_hash` is the hash of the block just before `tokens[0]` (None at the sequence start).
    """
    return chain_hashes(tokens, namespace_key(namespace), block_size, parent_hash)


def chain_hashes(tokens: np.ndarray | list[int], ns: bytes, block_size: int,
                 parent_hash: int | None = None) -> list[int]:
    """`block_hashes` for a namespace given by its canonical key `ns` (radixkv.keys.namespace_key)."""
    toks = np.ascontiguousarray(tokens, dtype="<i4")
    out, prev = [], parent_hash
    for b in range(len(toks) // block_size):
        h = hashlib.sha256(b"" if prev is None else prev.to_bytes(8, "big"))
        h.update(ns)
        h.update(toks[b * block_size:(b + 1) * block_size].tobytes())
        prev = int.from_bytes(h.digest()[:8], "big")
        out.append(prev)
    return out


@dataclass(frozen=True)
class BlockStored:
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]  # len(block_hashes) * block_size tokens
    block_size: int
    medium: str = DEVICE
    lora_id: int | None = None


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: list[int]
    medium: str = DEVICE


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


KVEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]
_TYPES: dict[str, type] = {"BlockStored": BlockStored, "BlockRemoved": BlockRemoved,
                           "AllBlocksCleared": AllBlocksCleared}


def event_to_dict(event: KVEvent) -> dict[str, Any]:
    return {"type": type(event).__name__, **asdict(event)}


def _check_fields(name: str, payload: dict[str, Any]) -> None:
    def is_int_list(v: object) -> bool:
        return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)

    if name in ("BlockStored", "BlockRemoved"):
        if not is_int_list(payload.get("block_hashes")) or payload.get("medium") not in (DEVICE, HOST):
            raise EventFormatError(f"{name}: block_hashes must be a list of ints and medium {DEVICE!r} or {HOST!r}")
    if name == "BlockStored":
        size, toks, parent = payload.get("block_size"), payload.get("token_ids"), payload.get("parent_block_hash")
        if not isinstance(size, int) or size < 1 or not is_int_list(toks):
            raise EventFormatError("BlockStored: block_size must be a positive int and token_ids a list of ints")
        if len(toks) != size * len(payload["block_hashes"]):
            raise EventFormatError("BlockStored: token_ids must hold block_size tokens per block hash")
        if parent is not None and not isinstance(parent, int):
            raise EventFormatError("BlockStored: parent_block_hash must be an int or None")


def event_from_dict(payload: object) -> KVEvent:
    """Parse and validate one serialized event; EventFormatError on anything malformed."""
    if not isinstance(payload, dict) or payload.get("type") not in _TYPES:
        raise EventFormatError(f"not a KV event: {str(payload)[:80]}")
    name = payload["type"]
    fields = {k: v for k, v in payload.items() if k != "type"}
    if name != "AllBlocksCleared":
        fields.setdefault("medium", DEVICE)
    _check_fields(name, fields)
    try:
        return _TYPES[name](**fields)
    except TypeError as e:
        raise EventFormatError(f"{name}: {e}") from None
