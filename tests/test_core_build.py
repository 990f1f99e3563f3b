"""The compiled core's build and loader (radixkv/build.py, radixkv/core_loader.py), and what its
typing changed in the tree: idle namespace roots are kept by reference count (compiled nodes take no
weak references)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.build import artefacts, build

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=64, page_size=1,
                                  max_requests=4, max_context_len=32, dtype=torch.float32))


def test_idle_roots_stay_while_held_and_go_when_not() -> None:
    """A root a caller holds stays the namespace's root however many namespaces come and go (as a
    WeakValueDictionary kept it); roots nobody holds are dropped, so the table stays bounded."""
    cache = _cache()
    held = cache.match_prefix([1, 2, 3], namespace="held").node
    for i in range(1000):
        assert cache.match_prefix([1, 2, 3], namespace=f"tenant-{i}").length == 0
    assert cache.match_prefix([4], namespace="held").node is held
    idle = len(cache.tree._idle_roots)
    assert 1 <= idle <= 2 * 1 + 64 + 1, idle  # the held root plus at most one sweep's worth of growth
    cache.lock(held)  # the held root is still the live one: locking it registers it
    slots = cache.alloc(2)
    cache.insert([7, 8], slots, namespace="held")
    assert cache.match_prefix([7, 8], namespace="held").length == 2
    cache.unlock(held)
    cache.check_invariants()


@pytest.mark.parametrize("cc", ["no-such-compiler", "false"])  # none at all; one that runs and fails
def test_build_without_a_compiler_is_one_line_and_changes_nothing(monkeypatch, cc: str) -> None:
    before = sorted(artefacts())
    monkeypatch.delenv("RADIXKV_PURE_PYTHON", raising=False)
    monkeypatch.setenv("CC", os.path.join(ROOT, cc) if cc.startswith("no-such") else cc)
    line = build()
    assert "\n" not in line and line.endswith("the core runs as pure Python"), line
    assert "C compiler" in line or "not installed" in line, line
    assert sorted(artefacts()) == before


def test_pure_python_is_forced_by_the_environment() -> None:
    """RADIXKV_PURE_PYTHON=1 loads every core module from its .py file, compiled core or not."""
    code = ("import radixkv, radixkv.cache as c, radixkv.radix.tree as t; "
            "print(radixkv.COMPILED_CORE, c.__file__.endswith('.py'), t.__file__.endswith('.py'))")
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


PURE_SUBSET = ("tests/test_errors.py", "tests/test_tree.py", "tests/test_pools.py", "tests/test_requests.py")


def pure_only() -> list[str]:
    """The test files that skip themselves on the compiled core (they wrap a core class's methods, which the
    compiled classes call natively): where the suite runs compiled, they run only here."""
    tests, marker, found = os.path.join(ROOT, "tests"), "skipif(" + "COMPILED_CORE", []  # (not this file)
    for name in sorted(os.listdir(tests)):
        if name.startswith("test_") and name.endswith(".py"):
            with open(os.path.join(tests, name), encoding="utf-8") as f:
                if marker in f.read():
                    found.append(f"tests/{name}")
    return found


def test_pure_only_files_are_found() -> None:
    assert "tests/test_switch_leadin.py" in pure_only() and "tests/test_core_build.py" not in pure_only()


def test_core_subset_passes_pure_too() -> None:
    """The suite runs on the compiled core where `make install` built it; a small core subset and the files
    that skip themselves compiled run here on the same .py files interpreted (RADIXKV_PURE_PYTHON=1), in a fresh
    process (~30 s of CPU)."""
    import radixkv

    if not radixkv.COMPILED_CORE:
        pytest.skip("the core runs as pure Python in this process already: the whole suite covers it")
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PURE_SUBSET, *pure_only()],
                         env=env, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-500:]
