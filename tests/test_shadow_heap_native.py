"""A shadow's leaf heap in C (radixkv/_runs_native.c's `heap_place` and `heap_pop`, used by radix/shadow_heap.py
while the compiled core runs) against heapq's forms that run interpreted: the very same list after every step, for
ints that fit a machine word, ints that do not, a shadow's (int key, node) entries (equal keys: one node) and a
policy's key tuples; the refusals."""

from __future__ import annotations

import heapq
import random
from typing import Any

import pytest

import radixkv
from radixkv.radix import shadow_heap

compiled_only = pytest.mark.skipif(not radixkv.COMPILED_CORE, reason="the C forms run with the compiled core only")


def _native() -> Any:
    from radixkv import _runs_native

    return _runs_native


def _place_ref(heap: list[Any], k: object, top: bool) -> None:
    """The interpreted form: heappush, or k in place of heap[0] (no sift where no child is less)."""
    if not top:
        heapq.heappush(heap, k)
    elif (len(heap) < 2 or not heap[1] < k) and (len(heap) < 3 or not heap[2] < k):
        heap[0] = k
    else:
        heapq.heapreplace(heap, k)


def _keys(kind: str, rng: random.Random) -> Any:
    if kind == "word":  # an LRU key at 20-bit fields, and negatives
        return lambda: rng.randrange(-(1 << 40), 1 << 40)
    if kind == "wide":  # LFU's 40-bit fields: past 2**63, beside small ones
        return lambda: rng.randrange(1 << 100) >> rng.randrange(0, 100, 20)
    if kind == "entry":  # a shadow's (int key, node): an int names one node (the same object), some wide
        nodes: dict[int, object] = {}
        return lambda: (lambda k: (k, nodes.setdefault(k, object())))(rng.randrange(600) << rng.randrange(0, 90, 30))
    return lambda: (rng.randrange(50), rng.randrange(50), rng.randrange(1 << 70))  # a policy's own key tuples


def test_the_c_forms_only_with_the_compiled_core() -> None:
    assert (shadow_heap._c_place is not None) == (shadow_heap._c_pop is not None) == radixkv.COMPILED_CORE


@pytest.mark.parametrize("kind", ["word", "wide", "entry", "tuple"])
def test_place_and_pop_move_as_heapq_does(kind: str) -> None:
    """Pushes, in-place replacements of the first entry and pops, mixed: the same list as heapq's after each (both
    forms: whichever runs), and, compiled, the C functions called directly too."""
    rng = random.Random(7)
    key = _keys(kind, rng)
    ref: list[Any] = []
    mine: list[Any] = []
    for step in range(4000):
        op = rng.random()
        if op < 0.5 or not ref:
            k = key()
            _place_ref(ref, k, False)
            shadow_heap._place(mine, k, False)
        elif op < 0.8:
            k = key() if rng.random() < 0.5 else ref[0]  # (its own value again, as a re-keyed leaf may be)
            _place_ref(ref, k, True)
            shadow_heap._place(mine, k, True)
        else:
            heapq.heappop(ref)
            shadow_heap.pop_first(mine)
        assert mine == ref, step
    if radixkv.COMPILED_CORE:
        c, ref = _native(), []
        direct: list[Any] = []
        for _ in range(2000):
            k = key()
            top = bool(ref) and rng.random() < 0.3
            _place_ref(ref, k, top)
            c.heap_place(direct, k, top)
            if rng.random() < 0.3:
                assert c.heap_pop(direct) == heapq.heappop(ref)
            assert direct == ref


@compiled_only
def test_the_c_forms_refuse_what_they_cannot_take() -> None:
    c = _native()
    with pytest.raises(TypeError):
        c.heap_place((1, 2), 3, False)
    with pytest.raises(TypeError):
        c.heap_pop(None)
    with pytest.raises(IndexError):
        c.heap_place([], 3, True)
    with pytest.raises(IndexError):
        c.heap_pop([])
    with pytest.raises(TypeError):  # a key Python cannot order: its own error
        c.heap_place([1], "a", False)
    with pytest.raises(TypeError):  # equal ints, then two nodes: Python's own error, as heapq's
        c.heap_place([(1, object())], (1, object()), False)
