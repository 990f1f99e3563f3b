"""KV events from outside: the one validator (`parse_event`) and the map layout (`event_to_dict`).

`parse_event` is the one validator for everything that arrives from outside (a dict in the map
layout `{"type": "BlockStored", ...}` that vLLM 0.33 and msgspec's tagged structs produce, a list in
the older positional layout `["BlockStored", block_hashes, parent_block_hash, token_ids,
block_size, lora_id, medium, lora_name, ...]` that llm-d still reads, or one of the event objects
of radixkv.events.records). Block hashes may be ints in [0, 2**64) or bytes (vLLM 0.33's default
sha256 digests); bytes become the int of their last 8 bytes, big-endian, as llm-d reads them.
Anything malformed raises EventFormatError, never TypeError. Interpreted, not compiled with the
core: a compiled local's declared type would raise TypeError before these checks could.
"""

from __future__ import annotations

from typing import Any

from radixkv.errors import RadixKVError
from radixkv.events.records import (DEVICE, EVENT_TYPES, FIELDS, HASH_LIMIT, MEDIA, REQUIRED, AllBlocksCleared,
                                    BlockHashes, BlockRemoved, BlockStored, KVEvent, TokenIds)


class EventFormatError(RadixKVError, ValueError):
    """A serialized event is malformed: unknown type, missing or mistyped fields."""


def event_to_dict(event: KVEvent) -> dict[str, Any]:
    """The map layout: {"type": class name, every field} (block hashes and token ids as lists)."""
    out = {"type": type(event).__name__, **{k: getattr(event, k) for k in FIELDS[type(event).__name__]}}
    for k in ("block_hashes", "token_ids"):
        if isinstance(out.get(k), (BlockHashes, TokenIds)):
            out[k] = out[k].tolist()
    return out


def parse_event(obj: object) -> KVEvent:
    """Validate one event in any accepted layout (see the module docstring); EventFormatError otherwise."""
    if isinstance(obj, (BlockStored, BlockRemoved, AllBlocksCleared)):
        name, values = type(obj).__name__, {k: getattr(obj, k) for k in FIELDS[type(obj).__name__]}
    elif isinstance(obj, dict):
        name = obj.get("type")
        if not isinstance(name, str) or name not in EVENT_TYPES:
            raise EventFormatError(f"not a KV event (no known 'type'): {_show(obj)}")
        values = {k: v for k, v in obj.items() if k != "type"}
    elif isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], str) and obj[0] in EVENT_TYPES:
        name = obj[0]
        if len(obj) - 1 > len(FIELDS[name]):
            raise EventFormatError(f"{name}: {len(obj) - 1} positional fields, at most {len(FIELDS[name])}")
        values = dict(zip(FIELDS[name], obj[1:]))
    else:
        raise EventFormatError(f"not a KV event: {_show(obj)}")
    unknown = set(values) - set(FIELDS[name])
    if unknown:
        raise EventFormatError(f"{name}: unknown fields {sorted(map(str, unknown))}")
    missing = [k for k in FIELDS[name][:REQUIRED[name]] if k not in values]
    if missing:
        raise EventFormatError(f"{name}: missing fields {missing}")
    if name == "BlockStored":
        return _stored(values)
    if name == "BlockRemoved":
        return BlockRemoved(_hashes(values["block_hashes"], name), _medium(values.get("medium", DEVICE), name),
                            *(_opt(values.get(k), int if k == "group_idx" else str, f"{name}.{k}")
                              for k in ("group_idx", "locality", "ownership")))
    return AllBlocksCleared()


def _stored(v: dict[str, Any]) -> BlockStored:
    name = "BlockStored"
    hashes = _hashes(v["block_hashes"], name)
    size, toks, parent = v["block_size"], v["token_ids"], v["parent_block_hash"]
    if not _is_int(size) or size < 1:
        raise EventFormatError(f"{name}: block_size must be a positive int, got {_show(size)}")
    if not (isinstance(toks, TokenIds) or _is_int_list(toks)) or len(toks) != size * len(hashes):
        raise EventFormatError(f"{name}: token_ids must be a list of block_size ints per block hash")
    parent = None if parent is None else _hashes([parent], name)[0]
    extra = v.get("extra_keys")
    if extra is not None and (not isinstance(extra, (list, tuple)) or len(extra) != len(hashes)
                              or not all(e is None or isinstance(e, (list, tuple)) for e in extra)):
        raise EventFormatError(f"{name}: extra_keys must be None or one tuple (or None) per block hash")
    look = v.get("lookahead_token_ids")
    if look is not None and (not isinstance(look, (list, tuple)) or not all(_is_int_list(x) for x in look)):
        raise EventFormatError(f"{name}: lookahead_token_ids must be None or lists of ints")
    return BlockStored(
        hashes, parent, toks if isinstance(toks, TokenIds) else list(toks), size,
        _opt(v.get("lora_id"), int, "lora_id"), _medium(v.get("medium", DEVICE), name),
        _opt(v.get("lora_name"), str, "lora_name"),
        None if extra is None else [None if e is None else _freeze(e) for e in extra],
        _opt(v.get("group_idx"), int, "group_idx"), _opt(v.get("kv_cache_spec_kind"), str, "kv_cache_spec_kind"),
        _opt(v.get("kv_cache_spec_sliding_window"), int, "kv_cache_spec_sliding_window"),
        _opt(v.get("locality"), str, "locality"), _opt(v.get("ownership"), str, "ownership"),
        _opt(v.get("session_id"), str, "session_id"), None if look is None else [list(x) for x in look])


_MAX_DEPTH = 8  # extra keys are (identifier, offset) pairs and strings: deeper nesting is malformed


def _freeze(value: Any, depth: int = 0) -> Any:
    """Lists (msgpack has no tuples) back into tuples, recursively, so decoded extra keys compare equal."""
    if not isinstance(value, (list, tuple)):
        return value
    if depth >= _MAX_DEPTH:
        raise EventFormatError(f"BlockStored: extra_keys nested deeper than {_MAX_DEPTH} levels")
    return tuple(_freeze(x, depth + 1) for x in value)


def _hashes(values: object, name: str) -> list[int] | BlockHashes:
    if isinstance(values, BlockHashes):
        return values  # a cache's own: 64-bit words, every one a valid hash
    if not isinstance(values, (list, tuple)):
        raise EventFormatError(f"{name}: block_hashes must be a list, got {_show(values)}")
    if _plain_ints(values) and (not values or (min(values) >= 0 and max(values) < HASH_LIMIT)):
        return list(values)  # the common case, checked by C-level passes
    out = []
    for h in values:
        if isinstance(h, (bytes, bytearray)) and h:
            h = int.from_bytes(bytes(h[-8:]), "big")  # vLLM's sha256 digests, read as llm-d reads them
        if not _is_int(h) or not 0 <= h < HASH_LIMIT:
            raise EventFormatError(f"{name}: block hashes must be ints in [0, 2**64) or non-empty bytes, "
                                   f"got {_show(h)}")
        out.append(h)
    return out


def _medium(m: object, name: str) -> str:
    if m is None:
        return DEVICE  # vLLM leaves it None for the GPU tier in older releases; llm-d reads None as GPU
    if m not in MEDIA:
        raise EventFormatError(f"{name}: medium must be one of {MEDIA} or None, got {_show(m)}")
    return m  # type: ignore[return-value]


def _opt(value: object, kind: type, what: str) -> Any:
    if value is None or (kind is int and _is_int(value)) or (kind is str and isinstance(value, str)):
        return value
    raise EventFormatError(f"{what} must be {kind.__name__} or None, got {_show(value)}")


_INT = {int}


def _is_int(x: object) -> bool:
    return type(x) is int or (isinstance(x, int) and not isinstance(x, bool))


def _is_int_list(v: object) -> bool:
    return isinstance(v, (list, tuple)) and (_plain_ints(v) or all(type(x) is int or _is_int(x) for x in v))


def _plain_ints(v: list | tuple) -> bool:
    """Every item's type is exactly int (one C-level pass; subclasses take the slow checks)."""
    return not v or set(map(type, v)) == _INT


def _show(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."
