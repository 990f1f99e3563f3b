"""Block hashes: what a fleet router and every instance agree to call a cached prefix.

A *block* is `block_size` consecutive tokens aligned from the start of a sequence (independent of
the cache's page_size). `CacheConfig.event_hash` picks how blocks are named:

**"xxh3"** (the default: radixkv's own chain, cheapest). Block b of a sequence has the 64-bit hash

    h_b    = XXH3_64(tokens of block b as int32 little-endian, seed = h_{b-1})
    h_{-1} = XXH3_64(ns, seed = SEED)                       (the root of the request's key)

where `ns` is the canonical key of the request's namespace and extra keys (radixkv.keys: the
namespace, a LoRA adapter and a cache salt folded into one self-delimiting byte string; multimodal
items are already in the tokens, whose placeholder ids are replaced by stateless ids derived from
each item's content hash: radixkv.multimodal.hash_ids). The parent enters as XXH3's 64-bit seed, so
each block costs one call on its own 4 * block_size bytes and no concatenation. h_b names the whole
prefix up to the end of block b and depends only on values: the same in every process and on every
machine. XXH3 is not collision resistant against someone who knows the seed, but a collision here
can only misroute a request: an instance matches real tokens in its radix tree, so no request is
ever served another prefix's KV. The seed is public and fixed (a fleet must share it).

**"sha256_cbor"**, **"xxhash_cbor"**: vLLM's own hashes (radixkv.events.vllm_hash), so a router
that hashes prompts the way vLLM does (llm-d's kv-cache-manager, Dynamo) finds radixkv's blocks.
vLLM has no namespace: under these schemes the namespace (and a LoRA given only by `lora_id`) does
not enter the hash, only vLLM's extra keys do (LoRA name, multimodal items, cache salt).

`BlockHasher` is the one object both sides use: the cache's event recorder (events/recorder.py)
and the Router. XXH3 comes from the `xxhash` package and CBOR from `cbor2` (the `events` extra).
Compiled, a chain of 9-16-token blocks is computed natively, one call per chain instead of one per
block (radixkv/_runs_native.c's `xxh3_words`: the same hashes, from XXH3's specification, written as
8-byte words: the recorder keeps them so, records.BlockHashes, and makes no int per block).
"""

from __future__ import annotations

from typing import Any, Callable, Final, Sequence, Union, cast

import numpy as np

from radixkv.core_loader import native
from radixkv.errors import ConfigError, InvalidArgumentError
from radixkv.events.records import BlockHashes
from radixkv.events.vllm_hash import CBOR_SCHEMES, VllmHasher, block_extra_keys, to_ints
from radixkv.keys import ExtraKeys, as_extra_keys, hash_key

SEED: Final = 0x7261646978_6B7631  # b"radixkv1" read as an int: fixed, so every process agrees
EVENT_HASHES = ("xxh3",) + CBOR_SCHEMES
Digest = Union[int, bytes]  # xxh3: the 64-bit hash itself; vLLM's schemes: the full digest
_xxh3: Callable[[bytes, int], int] | None = None
NATIVE_BYTES: Final = (33, 64)  # the block lengths the native chain hashes (bytes, both ends included)


def hash_function() -> Callable[[bytes, int], int]:
    """xxhash.xxh3_64_intdigest; ConfigError naming the extra when xxhash is not installed."""
    global _xxh3  # a cached import, not state: every process computes the same function
    if _xxh3 is None:
        try:
            import xxhash
        except ImportError:
            raise ConfigError("KV events hash blocks with XXH3: pip install 'radixkv[events]' "
                              "(the xxhash package)") from None
        _xxh3 = xxhash.xxh3_64_intdigest
    return _xxh3


# radixkv/_runs_native.c's chain while the compiled core runs (fixed per process), None interpreted
_WORDS: Final[Callable[[bytes, int, int, int], bytes] | None] = native("xxh3_words")


def xxh3_words(raw: bytes, step: int, n: int, seed: Any) -> bytes:
    """XXH3 of the n blocks raw[b * step:(b + 1) * step], each seeded by the hash of the one before, the
    first by `seed`, as n 8-byte little-endian words (records.BlockHashes): native when compiled and
    NATIVE_BYTES holds `step` (no Python int per block), else `xxh3_chain`'s ints packed."""
    words = _WORDS
    if words is not None and NATIVE_BYTES[0] <= step <= NATIVE_BYTES[1]:
        return words(raw, step, n, seed)
    return BlockHashes.of(xxh3_chain(raw, step, n, seed)).words


def xxh3_chain(raw: bytes, step: int, n: int, seed: Any) -> list[Any]:
    """`xxh3_words` as ints: native as there, else an `xxhash` call per block. (Any: compiled, the ints
    stay as they come.)"""
    words = _WORDS
    if words is not None and NATIVE_BYTES[0] <= step <= NATIVE_BYTES[1]:
        return BlockHashes(words(raw, step, n, seed)).tolist()
    xxh3: Callable[[bytes, Any], Any] = _xxh3 or hash_function()
    hashes: list[Any] = [None] * n  # filled in place, a running offset: a slice and a hash call per block
    h, lo = seed, 0
    for b in range(n):
        hi = lo + step
        h = xxh3(raw[lo:hi], h)
        hashes[b] = h
        lo = hi
    return hashes


class BlockHasher:
    """One `event_hash` scheme. `digests` chains the digests of a run of full blocks; `ints` gives
    the ints KV events and indexes carry. Construction fails (ConfigError) when a package is missing."""

    def __init__(self, scheme: object = "xxh3") -> None:
        if not isinstance(scheme, str) or scheme not in EVENT_HASHES:
            raise ConfigError(f"event_hash must be one of {EVENT_HASHES}, got {scheme!r:.60}")
        self.scheme = scheme
        self.vllm = scheme != "xxh3"  # names blocks as vLLM does: raw token ids, extra keys, no namespace
        self._vllm = VllmHasher(scheme) if self.vllm else None
        if not self.vllm:
            hash_function()

    def digests(self, tokens: np.ndarray | bytes, ns: bytes, block_size: int, parent: Digest | None = None,
                extra: Sequence[tuple | None] | None = None) -> list[Digest]:
        """xxh3: `tokens` as the tree keys them, chained from `ns`'s root; vLLM's schemes: the raw
        token ids with one extra-keys entry per block (`extra`), `ns` unused."""
        if self._vllm is None:
            return cast("list[Digest]", chain_hashes(tokens, ns, block_size, parent))  # type: ignore[arg-type]
        return cast("list[Digest]", self._vllm.digests(tokens, block_size, parent, extra))  # type: ignore[arg-type]

    def ints(self, digests: list[Digest]) -> list[int]:
        return digests if not self.vllm else to_ints(digests)  # type: ignore[return-value, arg-type]

    # extra_keys are Any here and below: as_extra_keys raises the typed error, where a compiled union
    # annotation would raise TypeError first
    def request(self, tokens: Any, namespace: Any, block_size: int, extra_keys: Any,
                parent: Digest | None = None) -> list[Digest]:
        """Digests of a request's full blocks, from its tokens as the engine takes them."""
        from radixkv.tokens import as_tokens

        if block_size < 1:
            raise InvalidArgumentError(f"block_size must be a positive int, got {block_size!r:.60}")
        raw = as_tokens(tokens)
        ns, hashed = hash_key(namespace, extra_keys, raw)  # validates everything
        if not self.vllm:
            return self.digests(hashed, ns, block_size, parent)
        extra = as_extra_keys(extra_keys) or ExtraKeys()
        if parent is not None and (extra.mm or extra.cache_salt):
            raise InvalidArgumentError("with a parent hash, vLLM's schemes take no multimodal items or cache "
                                       "salt (their keys depend on positions from the sequence start)")
        mm = [(m.identifier, m.offset, m.length) for m in extra.mm]
        keys = block_extra_keys(0, len(raw) // block_size, block_size, extra.lora_name, extra.cache_salt, mm)
        return self.digests(raw, ns, block_size, parent, keys)


def block_hashes(tokens: Any, namespace: Any, block_size: int, parent_hash: Digest | None = None,
                 extra_keys: Any = None, scheme: str = "xxh3") -> list[int]:
    """Hashes of the full blocks of `tokens` (a trailing partial block is ignored), for a request in
    `namespace` with `extra_keys`, exactly as an instance with `event_hash=scheme` names them in
    its KV events.

    `parent_hash` is the hash of the block just before `tokens[0]` (None at the sequence start): the
    int for "xxh3", the full digest (`block_digests`) for vLLM's schemes. With multimodal extra
    keys, `tokens` must start at position 0 (the offsets are positions).
    """
    hasher = BlockHasher(scheme)
    return hasher.ints(hasher.request(tokens, namespace, block_size, extra_keys, parent_hash))


def block_digests(tokens: Any, namespace: Any, block_size: int, parent_hash: Digest | None = None,
                  extra_keys: Any = None, scheme: str = "xxh3") -> list[Digest]:
    """`block_hashes` before the cut to 64 bits (vLLM's schemes chain on the full digest)."""
    return BlockHasher(scheme).request(tokens, namespace, block_size, extra_keys, parent_hash)


def chain_hashes(tokens: np.ndarray | list[int] | bytes, ns: bytes, block_size: int,
                 parent_hash: int | None = None) -> list[int]:
    """XXH3 `block_hashes` for tokens already keyed (placeholders replaced) and a canonical key `ns`.
    `tokens` may be their int32 little-endian bytes (a tree key): hashed as they are."""
    raw = tokens if isinstance(tokens, bytes) else np.ascontiguousarray(tokens, dtype="<i4").tobytes()
    step = 4 * block_size
    return xxh3_chain(raw, step, len(raw) // step, (_xxh3 or hash_function())(ns, SEED) if parent_hash is None
                      else parent_hash)
