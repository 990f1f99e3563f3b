"""The XXH3 block chain computed natively (radixkv/_runs_native.c's xxh3_chain) names every block as the
`xxhash` package does, and runs exactly when the compiled core does."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import xxhash

import radixkv
from radixkv.events import hashing
from radixkv.events.hashing import NATIVE_BYTES, SEED, chain_hashes, xxh3_chain

SEEDS = (0, 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, SEED, 0x8000_0000_0000_0001)


def reference(raw: bytes, step: int, n: int, seed: int) -> list[int]:
    """One xxhash call per block, each seeded by the block before: the chain's definition."""
    out, h = [], seed
    for b in range(n):
        h = xxhash.xxh3_64_intdigest(raw[b * step:(b + 1) * step], seed=h)
        out.append(h)
    return out


def test_native_exactly_when_compiled() -> None:
    assert (hashing._CHAIN is not None) == radixkv.COMPILED_CORE


def test_interpreted_the_chain_calls_xxhash() -> None:
    """The same file run interpreted (RADIXKV_PURE_PYTHON=1): no native chain, the same hashes through xxhash."""
    code = ("import xxhash; from radixkv.events import hashing; "
            "raw = bytes(range(128)); "
            "h = xxhash.xxh3_64_intdigest(raw[64:], seed=xxhash.xxh3_64_intdigest(raw[:64], seed=5)); "
            "print(hashing._CHAIN is None, hashing.xxh3_chain(raw, 64, 2, 5)[1] == h)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"], out.stderr


@pytest.mark.skipif(hashing._CHAIN is None, reason="the native chain runs only with the compiled core")
def test_native_chain_refuses_what_it_cannot_hash() -> None:
    chain = hashing._CHAIN
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
            assert xxh3_chain(raw, step, 7, seed) == reference(raw, step, 7, seed), (step, seed)


def test_many_blocks_and_none() -> None:
    raw = random.Random(1).randbytes(64 * 300)
    assert xxh3_chain(raw, 64, 300, SEED) == reference(raw, 64, 300, SEED)
    assert xxh3_chain(raw, 64, 0, SEED) == []
    assert xxh3_chain(b"", 64, 0, 5) == []


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
