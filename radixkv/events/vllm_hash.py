"""vLLM's own block hashes (`--prefix-caching-hash-algo sha256_cbor` or `xxhash_cbor`), computed here.

vLLM 0.33 (`vllm/utils/hashing.py`, `vllm/v1/core/kv_cache_utils.py`) names block b of a request

    digest_b  = H(cbor((digest_{b-1}, tuple(block b's token ids), extra_keys_b)))
    digest_-1 = NONE_HASH = H(cbor(PYTHONHASHSEED as a str))     if PYTHONHASHSEED is set,
                            32 random bytes drawn once per process  otherwise

with H = sha256 (sha256_cbor) or XXH3-128 (xxhash_cbor), cbor = `cbor2.dumps(x, canonical=True)`,
and KV events carry `int.from_bytes(digest, "big") & (2**64 - 1)` (the low 64 bits; vLLM's
VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, on by default). Without PYTHONHASHSEED no other process can
reproduce a vLLM instance's hashes, and none can reproduce ours: a fleet that routes on these
hashes sets PYTHONHASHSEED to one value everywhere (README, "Behind llm-d and Dynamo").

`extra_keys_b` is vLLM's `generate_block_hash_extra_keys`: the LoRA name, then
(mm identifier, item offset - block start) for every multimodal item the block overlaps, then the
cache salt on block 0 only (when non-empty); None when the list is empty.

Cost: a token id's CBOR bytes (an unsigned int is 1, 2, 3 or 5 bytes) come from a memo filled on
first use, so a block's array is one C-level `b"".join(map(...))` over its ids, then one hash call:
no Python frame per token. cbor2 (the `events` extra) encodes only the seed and non-empty extra keys.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Sequence

import numpy as np

from radixkv.errors import ConfigError

CBOR_SCHEMES = ("sha256_cbor", "xxhash_cbor")
_NONE = b"\xf6"  # CBOR null: a block without extra keys
_RANDOM_ROOT = os.urandom(32)  # vLLM's NONE_HASH without PYTHONHASHSEED: per process, as vLLM draws it


def _digest_fn(scheme: str) -> Callable[[bytes], bytes]:
    if scheme == "sha256_cbor":
        return lambda data: hashlib.sha256(data).digest()
    try:
        import xxhash
    except ImportError:
        raise ConfigError("event_hash='xxhash_cbor' needs xxhash: pip install 'radixkv[events]'") from None
    return xxhash.xxh3_128_digest


def _cbor2() -> Any:
    try:
        import cbor2
    except ImportError:
        raise ConfigError("vLLM's CBOR block hashes need cbor2: pip install 'radixkv[events]'") from None
    return cbor2


class VllmHasher:
    """Block digests of one scheme in CBOR_SCHEMES; the root is fixed at construction (PYTHONHASHSEED)."""

    def __init__(self, scheme: str, seed: str | None = None) -> None:
        """`seed`: PYTHONHASHSEED's value (read from the environment when None; unset: per-process random)."""
        if scheme not in CBOR_SCHEMES:
            raise ConfigError(f"unknown vLLM hash scheme {scheme!r}; choose from {CBOR_SCHEMES}")
        self.scheme = scheme
        self._cbor = _cbor2()
        self._h = _digest_fn(scheme)
        seed = os.environ.get("PYTHONHASHSEED") if seed is None else seed
        self.root = _RANDOM_ROOT if seed is None else self._h(self._cbor.dumps(seed, canonical=True))

    def digests(self, tokens: np.ndarray, block_size: int, parent: bytes | None,
                extra: Sequence[tuple | None] | None = None) -> list[bytes]:
        """Digests of the full blocks of `tokens` (int, >= 0; a partial tail is ignored), chained from
        `parent` (the previous block's digest; None: the sequence start). `extra`: one entry per block."""
        n = len(tokens) // block_size
        if n == 0:
            return []
        ids = np.asarray(tokens[:n * block_size]).tolist()
        arr = _uint_head(block_size, 0x80)
        h, dumps, enc, out = self._h, self._cbor.dumps, _UINTS.__getitem__, []
        prev = self.root if parent is None else parent
        head = b"\x83" + _bytes_head(len(prev))  # (parent digest, ...): a 3-array, then the digest's head
        for b in range(n):
            keys = None if extra is None else extra[b]
            tail = _NONE if keys is None else dumps(keys, canonical=True)
            body = b"".join(map(enc, ids[b * block_size:(b + 1) * block_size]))
            prev = h(b"".join((head, prev, arr, body, tail)))
            out.append(prev)
            if b == 0:
                head = b"\x83" + _bytes_head(len(prev))
        return out


def to_ints(digests: list[bytes]) -> list[int]:
    """The ints a vLLM KV event carries for `digests`: their low 64 bits (the last 8 bytes, big-endian)."""
    return [int.from_bytes(d[-8:], "big") for d in digests]


def block_extra_keys(first_block: int, n_blocks: int, block_size: int, lora_name: str | None,
                     salt: str | None, mm: Sequence[tuple[str, int, int]] = ()) -> list[tuple | None] | None:
    """vLLM's extra keys of blocks [first_block, first_block + n_blocks) of a request: `mm` lists its
    multimodal items as (identifier, offset, length) in absolute positions, sorted by offset."""
    if lora_name is None and not salt and not mm:
        return None
    out: list[tuple | None] = []
    for b in range(first_block, first_block + n_blocks):
        start, end = b * block_size, (b + 1) * block_size
        keys: list[Any] = [] if lora_name is None else [lora_name]
        keys += [(ident, off - start) for ident, off, length in mm if off < end and start < off + length]
        if salt and b == 0:
            keys.append(salt)
        out.append(tuple(keys) or None)
    return out


def _bytes_head(n: int) -> bytes:
    return _uint_head(n, 0x40)


def _uint_head(n: int, major: int) -> bytes:
    """CBOR head of major type `major` (0x00 uint, 0x40 bytes, 0x80 array) with argument n, shortest form."""
    if n < 24:
        return bytes([major | n])
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major | extra]) + n.to_bytes(size, "big")
    raise ConfigError(f"a CBOR length of {n} does not fit 64 bits")


class _UintCbor(dict):
    """token id -> its canonical CBOR bytes, filled on first use (a vocabulary's worth at most).
    Negative ids (a multimodal item whose raw ids were forgotten) encode as cbor2 encodes them."""

    def __missing__(self, v: int) -> bytes:
        enc = _uint_head(v, 0x00) if v >= 0 else _uint_head(-1 - v, 0x20)  # CBOR's negative ints carry -1 - n
        if len(self) < _MAX_CACHED:
            self[v] = enc
        return enc


_MAX_CACHED = 1 << 20  # ids remembered (~60 MB at most; real vocabularies are 32k-260k ids)
_UINTS = _UintCbor()  # a pure function's memo, the same for every hasher
