"""The XXH3 block chain computed natively (radixkv/_runs_native.c's xxh3_words, its words read back by
words_ints) names every block as the `xxhash` package does, and runs exactly when the compiled core does."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import xxhash

import radixkv
from radixkv.core_loader import native
from radixkv.events import hashing
from radixkv.events.hashing import NATIVE_BYTES, SEED, chain_hashes, xxh3_chain, xxh3_words
from radixkv.events.records import BlockHashes

SEEDS = (0, 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, SEED, 0x8000_0000_0000_0001)


def reference(raw: bytes, step: int, n: int, seed: int) -> list[int]:
    """One xxhash call per block, each seeded by the block before: the chain's definition."""
    out, h = [], seed
    for b in range(n):
        h = xxhash.xxh3_64_intdigest(raw[b * step:(b + 1) * step], seed=h)
        out.append(h)
    return out


def test_native_exactly_when_compiled() -> None:
    assert (hashing._WORDS is not None) == radixkv.COMPILED_CORE


def test_interpreted_the_chain_calls_xxhash() -> None:
    """The same file run interpreted (RADIXKV_PURE_PYTHON=1): no native chain, the same hashes through xxhash."""
    code = ("import xxhash; from radixkv.events import hashing; "
            "raw = bytes(range(128)); "
            "h = xxhash.xxh3_64_intdigest(raw[64:], seed=xxhash.xxh3_64_intdigest(raw[:64], seed=5)); "
            "print(hashing._WORDS is None, hashing.xxh3_chain(raw, 64, 2, 5)[1] == h, "
            "hashing.xxh3_words(raw, 64, 2, 5)[8:] == h.to_bytes(8, 'little'))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr


@pytest.mark.skipif(hashing._WORDS is None, reason="the native chain runs only with the compiled core")
def test_native_chain_refuses_what_it_cannot_hash() -> None:
    chain = hashing._WORDS
    assert chain is not None
    for step, n in ((32, 1), (65, 1), (64, 3), (64, -1)):
        with pytest.raises(ValueError):
            chain(bytes(128), step, n, 0)
    with pytest.raises(OverflowError):
        chain(bytes(64), 64, 1, -1)
    with pytest.raises(TypeError):
        chain(bytearray(64), 64, 1, 0)


@pytest.mark.parametrize("step", range(NATIVE_BYTES[0] - 2, NATIVE_BYTES[1] + 3))
def test_every_length_and_seed_as_xxhash(step: int) -> None:
    """Every block length of the native range and just outside it (xxhash there), several seeds
    around the sign bit of an i64, random bytes and all-ones bytes (every word negative as an i64)."""
    rnd = random.Random(step)
    for raw in (rnd.randbytes(7 * step + 5), b"\xff" * (7 * step)):
        for seed in (*SEEDS, rnd.getrandbits(64)):
            want = reference(raw, step, 7, seed)
            assert xxh3_chain(raw, step, 7, seed) == want, (step, seed)
            assert xxh3_words(raw, step, 7, seed) == b"".join(h.to_bytes(8, "little") for h in want), (step, seed)


def test_many_blocks_and_none() -> None:
    raw = random.Random(1).randbytes(64 * 300)
    assert xxh3_chain(raw, 64, 300, SEED) == reference(raw, 64, 300, SEED)
    assert xxh3_chain(raw, 64, 0, SEED) == []
    assert xxh3_chain(b"", 64, 0, 5) == []
    assert xxh3_words(b"", 64, 0, 5) == b""
    assert BlockHashes(xxh3_words(raw, 64, 300, SEED)).tolist() == reference(raw, 64, 300, SEED)


def test_chain_hashes_of_token_ids() -> None:
    """The Router's side (chain_hashes) from token ids, with and without a parent, block sizes inside
    and outside the native range."""
    toks = random.Random(2).choices(range(-3, 200_000), k=16 * 40 + 7)
    raw = b"".join(t.to_bytes(4, "little", signed=True) for t in toks)
    for size in (4, 8, 9, 16, 17, 32):
        root = xxhash.xxh3_64_intdigest(b"ns", seed=SEED)
        n = len(toks) // size
        assert chain_hashes(toks, b"ns", size) == reference(raw, 4 * size, n, root)
        assert chain_hashes(toks, b"ns", size, parent_hash=2**64 - 2) == reference(raw, 4 * size, n, 2**64 - 2)


@pytest.mark.skipif(hashing._WORDS is None, reason="the native words run only with the compiled core")
def test_native_words_read_back_and_refuse_what_is_not_words() -> None:
    ints = native("words_ints")
    assert ints(b"") == [] and ints(bytes(range(8)) + b"\xff" * 8) == [0x0706050403020100, 2**64 - 1]
    for bad in (b"1234567", bytearray(8), 8):
        with pytest.raises(TypeError):
            ints(bad)
    at = native("word_at")
    assert at(bytes(range(16)), 1) == 0x0F0E0D0C0B0A0908 and at(b"\xff" * 8, 0) == 2**64 - 1
    for k in (-1, 2):
        with pytest.raises(IndexError):
            at(bytes(16), k)
    with pytest.raises(TypeError):
        at(bytearray(8), 0)
