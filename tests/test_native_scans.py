"""The request path's two scans in C (radixkv/_runs_native.c's `negative` and `shared`) and the shadow's join and
compare of key parts (`joined`, `starts_part`), used while the compiled core runs, against the Python forms that run
interpreted: tokens.py's sign check, the walk's startswith and `parting` (radix/core.py), with a numpy reference of
each, and the slices' forms."""

from __future__ import annotations

import numpy as np
import pytest

import radixkv
from radixkv import InvalidTokensError
from radixkv.eviction import make_policy
from radixkv.radix import core
from radixkv.radix.shadow import ShadowTree
from radixkv.tokens import non_negative

compiled_only = pytest.mark.skipif(not radixkv.COMPILED_CORE, reason="the C forms run with the compiled core only")


def _shared_pages(key: bytes, edge: bytes, pos: int, page_bytes: int) -> int:
    """Bytes of whole pages `edge` and key[pos:] share from the start, len(edge) when all of it (numpy)."""
    n = min(len(edge), len(key) - pos)
    a, b = np.frombuffer(edge, np.uint8, n), np.frombuffer(key, np.uint8, n, pos)
    diff = a != b
    if n == len(edge) and not diff.any():
        return n
    same = int(np.argmax(diff)) if diff.any() else n
    return same // page_bytes * page_bytes


def test_the_c_forms_only_with_the_compiled_core() -> None:
    from radixkv import tokens

    assert (core._c_shared is not None) == (tokens._c_negative is not None) == radixkv.COMPILED_CORE


@pytest.mark.parametrize("n", [0, 1, 7, 8, 33, 3216])
def test_non_negative_finds_any_negative_id(n: int) -> None:
    """Every place a negative id can sit, contiguous and strided (both forms: whichever runs)."""
    rng = np.random.default_rng(n)
    toks = rng.integers(0, 2**31 - 1, n, dtype=np.int32)
    assert non_negative(toks) is toks and non_negative(toks[::3]) is not None
    for at in sorted({0, n // 2, n - 1} - {-1}) if n else []:
        bad = toks.copy()
        bad[at] = -1 if at % 2 else -(2**31)
        with pytest.raises(InvalidTokensError, match="got min"):
            non_negative(bad)
        if at % 2 == 0:
            with pytest.raises(InvalidTokensError):
                non_negative(bad[::2])  # strided, the bad id kept
        else:
            assert non_negative(bad[::2]) is not None  # strided past it


@compiled_only
def test_negative_in_c_equals_numpy() -> None:
    from radixkv import _runs_native as c

    rng = np.random.default_rng(1)
    for n in range(0, 70):
        toks = rng.integers(-3, 2**31 - 1, n, dtype=np.int32)
        for arr in (toks, toks[::2], toks[::-1]):
            assert c.negative(arr) == bool(n and arr.min() < 0)
    with pytest.raises(TypeError):
        c.negative(np.arange(3, dtype=np.int64))
    with pytest.raises(TypeError):
        c.negative(np.zeros((2, 2), dtype=np.int32))


@compiled_only
@pytest.mark.parametrize("page_bytes", [4, 8, 64])
def test_shared_in_c_equals_the_walks_python_form(page_bytes: int) -> None:
    """For keys and edges that part at every byte of a few pages, end first or run past: C's `shared` gives what
    the interpreted walk takes (len(edge) where startswith holds, else `parting`) and the numpy reference."""
    from radixkv import _runs_native as c

    tree = ShadowTree(make_policy("lru"), page_bytes // 4)
    rng = np.random.default_rng(page_bytes)
    edge = rng.integers(0, 256, 9 * page_bytes + 300, dtype=np.uint8).tobytes()[:9 * page_bytes]
    head = rng.integers(0, 256, 2 * page_bytes, dtype=np.uint8).tobytes()
    for cut in range(page_bytes, len(edge)):  # the first page equal, as a walk's dict lookup makes it
        changed = bytearray(edge)
        changed[cut] ^= 0x5A
        for key, pos in ((head + bytes(changed), len(head)), (bytes(changed), 0)):
            python = tree.parting(edge, key, pos)
            assert c.shared(key, edge, pos, page_bytes) == python == _shared_pages(key, edge, pos, page_bytes)
    for pages in range(1, 12):  # equal while both last: the key ends first, or holds all of the edge
        key = head + (edge * 2)[:pages * page_bytes]
        python = len(edge) if key.startswith(edge, len(head)) else tree.parting(edge, key, len(head))
        assert c.shared(key, edge, len(head), page_bytes) == python == _shared_pages(key, edge, len(head), page_bytes)
    assert c.shared(edge, edge, 0, page_bytes) == len(edge)
    with pytest.raises(ValueError):
        c.shared(edge, edge, len(edge) + 1, page_bytes)
    with pytest.raises(ValueError):
        c.shared(edge, edge, 0, 0)
    with pytest.raises(TypeError):
        c.shared(bytearray(edge), edge, 0, page_bytes)


@compiled_only
def test_joined_and_starts_part_in_c_are_the_slices_forms() -> None:
    """C's `joined(head, lo, hi, key)` is head[lo:hi] + key and `starts_part(key, head, lo, hi)` is
    key.startswith(head[lo:hi]) (radix/shadow.py's insert after its match, interpreted), for every part of a head,
    keys that agree, part anywhere or end first; out of range they raise."""
    from radixkv import _runs_native as c

    rng = np.random.default_rng(7)
    head = rng.integers(0, 4, 40, dtype=np.uint8).tobytes()
    keys = [head[5:30], head[5:30] + b"x", head[5:12], b"", head[:9] + b"\x09" + head[10:]]
    for lo in range(len(head) + 1):
        for hi in range(lo, len(head) + 1, 3):
            for key in keys:
                assert c.joined(head, lo, hi, key) == head[lo:hi] + key
                assert c.starts_part(key, head, lo, hi) == key.startswith(head[lo:hi])
    with pytest.raises(ValueError):
        c.joined(head, 3, 2, b"")
    with pytest.raises(ValueError):
        c.starts_part(b"", head, 0, len(head) + 1)
    with pytest.raises(TypeError):
        c.joined(head, 0, 1, bytearray(b"a"))
