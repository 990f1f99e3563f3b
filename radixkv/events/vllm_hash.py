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

Cost: the CBOR of all the ids of a run of blocks is made at once by numpy (`cbor_ints`: a uint is
1, 2, 3 or 5 bytes), so a block is one `b"".join` of its head, parent digest, ids and extra keys,
then one hash call: no Python object per token. cbor2 (the `events` extra) encodes only the seed and
non-empty extra keys.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Sequence

import numpy as np

from radixkv.errors import ConfigError

CBOR_SCHEMES = ("sha256_cbor", "xxhash_cbor")
_MASK64 = (1 << 64) - 1
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
        body, starts = cbor_ints(np.asarray(tokens[:n * block_size]))
        cut = starts[::block_size].tolist()  # where each block's ids start in `body`, and the end
        arr = _uint_head(block_size, 0x80)
        h, dumps, out = self._h, self._cbor.dumps, []
        prev = self.root if parent is None else parent
        head = b"\x83" + _bytes_head(len(prev))  # (parent digest, ...): a 3-array, then the digest's head
        for b in range(n):
            keys = None if extra is None else extra[b]
            tail = _NONE if keys is None else dumps(keys, canonical=True)
            prev = h(b"".join((head, prev, arr, body[cut[b]:cut[b + 1]], tail)))
            out.append(prev)
            if b == 0:
                head = b"\x83" + _bytes_head(len(prev))
        return out


def to_int(digest: bytes) -> int:
    """The int a vLLM KV event carries for `digest`: its low 64 bits."""
    return int.from_bytes(digest, "big") & _MASK64


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


# By size class c (argument < 24, < 2**8, < 2**16, < 2**32): the initial byte's low bits (beside
# the major type), which of the 5 bytes [initial, argument big-endian x4] are kept, and how many.
_ADDITIONAL = np.array([0, 24, 25, 26], dtype=np.uint8)
_KEEP = np.array([[0, 0, 0, 0, 1], [1, 0, 0, 0, 1], [1, 0, 0, 1, 1], [1, 1, 1, 1, 1]], dtype=bool)
_SIZES = np.array([1, 2, 3, 5], dtype=np.int64)


def cbor_ints(ids: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Canonical CBOR (cbor2.dumps(x, canonical=True)) of each int in `ids` (1-D, each in
    (-2**32, 2**32)), back to back, and where each one starts in those bytes (int64 [len(ids) + 1])."""
    v = ids.astype(np.int64)
    neg = v < 0
    arg = np.where(neg, -1 - v, v) if neg.any() else v  # CBOR's negative ints (major type 1) carry -1 - n
    cls = (arg >= 24).view(np.uint8) + (arg >= 1 << 8) + (arg >= 1 << 16)
    rows = np.empty((len(v), 5), dtype=np.uint8)
    rows[:, 1:] = arg.astype(">u4").view(np.uint8).reshape(-1, 4)
    rows[:, 0] = _ADDITIONAL[cls]
    if arg is not v:
        major = neg.view(np.uint8) << 5
        rows[:, 0] |= major
        rows[:, 4] |= major * (cls == 0)  # a small argument sits in the initial byte, beside the major type
    starts = np.zeros(len(v) + 1, dtype=np.int64)
    np.cumsum(_SIZES[cls], out=starts[1:])
    return rows[_KEEP[cls]].tobytes(), starts
