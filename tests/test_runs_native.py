"""Runs to slots (radixkv/runs.py's expand_slots, are_first_slots): in C (radixkv/_runs_native.c) while the
compiled core runs, numpy otherwise; both against a reference made another way (pages, then page_slots)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import radixkv
from radixkv import CacheConfig, RadixCache
from radixkv.core_loader import NATIVE, source_digest
from radixkv.pools import page_slots
from radixkv.runs import are_first_slots, expand, expand_slots, runs_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _runs_lists(seed: int, n: int) -> list[tuple[list[int], np.ndarray]]:
    """Random runs (some not maximal, some with long runs) and their pages, int64."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        starts, lengths = rng.integers(0, 5_000, 6), rng.integers(1, 3 if i % 2 else 1200, 6)
        runs = [int(x) for pair in zip(starts, lengths) for x in pair][:2 * int(rng.integers(0, 7))]
        pages = np.concatenate([np.arange(s, s + k) for s, k in zip(runs[::2], runs[1::2])] + [np.arange(0)])
        out.append((runs, pages.astype(np.int64)))
    return out


@pytest.mark.parametrize("ps", [1, 4, 16])
def test_expand_slots_equals_the_pages_slots(ps: int) -> None:
    for runs, pages in _runs_lists(ps, 80):
        want = page_slots(pages, ps)
        for n in sorted({0, 1, ps - 1, len(want) // 3, len(want) - 1, len(want)}):
            if 0 <= n <= len(want):
                got = expand_slots(runs, n, ps)
                assert got.dtype == np.int64 and got.flags.writeable and got.tolist() == want[:n].tolist()
                assert got is not expand_slots(runs, n, ps)  # fresh each call
        assert expand(runs, len(pages)).tolist() == pages.tolist()


@pytest.mark.parametrize("ps", [1, 4, 16])
def test_are_first_slots_compares_values_not_copies(ps: int) -> None:
    for runs, pages in _runs_lists(10 + ps, 60):
        slots = page_slots(pages, ps)
        for m in sorted({0, min(1, len(slots)), len(slots) // 2, len(slots)}):
            head = slots[:m].copy()
            assert are_first_slots(runs, ps, head)
            assert are_first_slots(runs, ps, np.repeat(head, 2)[::2])  # strided: the same values
            if m:
                for at in (0, m // 2, m - 1):
                    wrong = head.copy()
                    wrong[at] += 1
                    assert not are_first_slots(runs, ps, wrong)
        assert not are_first_slots(runs, ps, np.append(slots, 7))  # longer than the runs


def test_matches_keep_runs_of_their_pages() -> None:
    """The runs a match keeps (MatchedSlots.runs) hold exactly the pages of its slots; an insert whose head
    differs from them by two slots swapped is refused, one that equals them is taken."""
    cfg = CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=512, page_size=4, max_requests=4,
                      max_context_len=256, dtype=torch.float32)
    cache, rng = RadixCache(cfg), np.random.default_rng(3)
    for i in range(200):
        toks = rng.integers(0, 3, int(rng.integers(8, 120))).tolist()
        r = cache.match_prefix(toks)
        if r.length:
            runs = cache._matched.runs
            assert page_slots(expand(runs, r.length // 4), 4).tolist() == r.slots.tolist()
        slots = torch.cat([r.slots, cache.alloc(len(toks) - r.length)])
        if r.length and i % 5 == 0:
            bad = slots.clone()
            bad[0], bad[1] = slots[1], slots[0]
            with pytest.raises(radixkv.InvalidSlotsError):
                cache.insert(toks, bad)
            cache.free(slots[r.length:])
            continue
        assert cache.insert(toks, slots) == r.length
        cache.check_invariants()


def test_the_c_form_only_with_the_compiled_core() -> None:
    """RADIXKV_PURE_PYTHON=1 hides the C module (runs.py's numpy forms run); its source is in the build stamp."""
    assert f" {NATIVE}.c\n" in source_digest()
    code = ("import radixkv, radixkv.runs as r\ntry:\n    import radixkv._runs_native\n    ok = True\n"
            "except ImportError:\n    ok = False\nprint(radixkv.COMPILED_CORE, r._c_slots is None, ok)")
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "False"]
    import radixkv.runs as runs

    assert (runs._c_slots is not None) == (runs._c_starts is not None) == radixkv.COMPILED_CORE


def test_the_c_form_refuses_what_it_cannot_read() -> None:
    if not radixkv.COMPILED_CORE:
        pytest.skip("the C form runs with the compiled core only")
    from radixkv import _runs_native as c

    with pytest.raises(ValueError, match="fewer than n"):
        c.slots([3, 2], 3, 1)
    with pytest.raises(TypeError):
        c.slots([3, 2.0], 1, 1)
    with pytest.raises(ValueError):
        c.slots([-1, 2], 1, 1)
    with pytest.raises(ValueError):
        c.slots([1, 2], 1, 0)
    with pytest.raises(TypeError):
        c.starts([1, 2], 1, np.arange(2, dtype=np.int32))
    assert c.starts([1, 2], 1, np.arange(1, 3)) and not c.starts([1, 2], 1, np.arange(3))
    assert runs_of(c.slots([7, 3, 2, 1], 4, 1)) == [7, 3, 2, 1]
