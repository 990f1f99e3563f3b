"""The XXH3 block chain of events/hashing.py for blocks of 33-64 bytes, compiled: no call per block.

XXH3_64 with a seed, for inputs of 33 to 64 bytes, as xxHash's published specification describes it
(github.com/Cyan4973/xxHash, doc/xxhash_spec.md, "XXH3 Algorithm Description (for medium inputs)",
17-128 bytes with two rounds):

    acc  = len * PRIME64_1
    acc += mixStep(input[16:32], secret[32:48]) + mixStep(input[len-32:len-16], secret[48:64])   round 1
    acc += mixStep(input[0:16], secret[0:16]) + mixStep(input[len-16:len], secret[16:32])        round 0
    hash = avalanche(acc) = (acc ^ acc >> 37) * PRIME_MX1, then x ^ x >> 32

    mixStep(data, secret) = fold((data[0:8] ^ (secret[0:8] + seed)) * (data[8:16] ^ (secret[8:16] - seed)))

where fold is the 128-bit product's low half xor its high half, `secret` the specification's default
secret, and every word a little-endian u64. A KV event block of 9-16 tokens is 36-64 bytes.

Why: each block of the chain is seeded by the hash of the block before, so the `xxhash` package
needs one Python call per block (a slice of the key, the call, the seed and the result converted):
~690 instructions a block compiled, ~70 of them hashing. Here a block is native 64-bit arithmetic
(`i64`: compiled, it wraps modulo 2**64, the C being built with -fwrapv) and the node's hashes come
back as ints in one `array.tolist()`: ~480 a block (bench/RESULTS.md, round 13, "events30").

Compiled only: interpreted, `i64` is a plain int that never wraps. events/hashing.py imports this
module only when it runs compiled on a little-endian machine (`array("Q")` reads native order);
elsewhere, and for other block sizes, it calls `xxhash`. tests/test_events_xxh3.py checks every
length 33-64 and several seeds against xxhash. The words are read with librt, mypy's runtime
library, installed wherever the core is compiled (mypy needs it).
"""

from __future__ import annotations

from array import array
from typing import Final

from librt.strings import BytesWriter, read_i64_le, write_i64_le
from mypy_extensions import i64

MIN_BYTES: Final = 33  # the two-round case of the 17-128-byte path: blocks of 33-64 bytes
MAX_BYTES: Final = 64


def _word(x: int) -> i64:
    """The i64 with the bits of the u64 x. (Compiled, a Final i64 literal of 2**62 or more is boxed
    and unboxed at every use; one computed here is a native static.)"""
    return i64(x - (1 << 64)) if x >> 63 else i64(x)


# the default secret's first 64 bytes as little-endian words (the specification's defaultSecret)
_S0: Final = _word(0xBE4BA423396CFEB8)
_S1: Final = _word(0x1CAD21F72C81017C)
_S2: Final = _word(0xDB979083E96DD4DE)
_S3: Final = _word(0x1F67B3B7A4A44072)
_S4: Final = _word(0x78E5C0CC4EE679CB)
_S5: Final = _word(0x2172FFCC7DD05A82)
_S6: Final = _word(0x8E2443F7744608B8)
_S7: Final = _word(0x4C263A81E69035E0)
_PRIME64_1: Final = _word(0x9E3779B185EBCA87)
_PRIME_MX1: Final = _word(0x165667919E3779F9)
_LOW32: Final[i64] = 0xFFFFFFFF


def _fold(a: i64, b: i64) -> i64:
    """Low 64 bits xor high 64 bits of the unsigned 128-bit product a * b, from 32-bit halves
    (the shifts masked: `>>` on an i64 is arithmetic)."""
    al, ah, bl, bh = a & _LOW32, (a >> 32) & _LOW32, b & _LOW32, (b >> 32) & _LOW32
    ll, hl, lh = al * bl, ah * bl, al * bh
    cross = ((ll >> 32) & _LOW32) + (hl & _LOW32) + lh  # at most 2**64 - 1: no carry lost
    high = ((hl >> 32) & _LOW32) + ((cross >> 32) & _LOW32) + ah * bh
    return (a * b) ^ high


def chain(raw: bytes, step: int, n: int, seed: int) -> list[int]:
    """XXH3_64 of the blocks raw[b * step:(b + 1) * step], b in [0, n), each seeded by the hash of the
    block before and the first by `seed` (0 <= seed < 2**64); MIN_BYTES <= step <= MAX_BYTES and
    len(raw) >= n * step (else IndexError from the read). Reads raw only."""
    size: i64 = step
    start: i64 = size * _PRIME64_1
    h = _word(seed)
    out = BytesWriter()
    s0, s1, s2, s3, s4, s5, s6, s7, mx = _S0, _S1, _S2, _S3, _S4, _S5, _S6, _S7, _PRIME_MX1  # locals: no checks
    lo: i64 = 0
    stop: i64 = n * size
    while lo < stop:  # (an i64 loop: `for _ in range(n)` boxed an int per block)
        end = lo + size
        acc = start + _fold(read_i64_le(raw, lo + 16) ^ (s4 + h), read_i64_le(raw, lo + 24) ^ (s5 - h))
        acc += _fold(read_i64_le(raw, end - 32) ^ (s6 + h), read_i64_le(raw, end - 24) ^ (s7 - h))
        acc += _fold(read_i64_le(raw, lo) ^ (s0 + h), read_i64_le(raw, lo + 8) ^ (s1 - h))
        acc += _fold(read_i64_le(raw, end - 16) ^ (s2 + h), read_i64_le(raw, end - 8) ^ (s3 - h))
        acc = (acc ^ ((acc >> 37) & 0x7FFFFFF)) * mx
        h = acc ^ ((acc >> 32) & _LOW32)
        write_i64_le(out, h)
        lo = end
    return array("Q", out.getvalue()).tolist()  # one C loop makes the ints, as xxhash would
