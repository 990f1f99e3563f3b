"""Which core runs: the compiled one (radixkv/build.py) or the same .py files, interpreted.

The bookkeeping core (CORE) may be compiled by mypyc into extension files beside its sources.
They are used only when all of these hold; otherwise every CORE module loads from its .py file:

    RADIXKV_PURE_PYTHON is not "1"
    every CORE module has its extension file, and so do the shared library (SHARED) and NATIVE
    the build stamp (STAMP) names the sources' current SHA-256: a .py (or NATIVE's .c) edited after
    the build makes the whole core run interpreted, with one line on stderr saying so, never a stale .so

NATIVE is C written by hand (radixkv/_runs_native.c: the runs' expansion), built with the core; runs.py
uses it only while the compiled core runs (`choose` hides it otherwise) and its own numpy form else.

Imports nothing of the core; `radixkv/__init__.py` calls `choose()` before any core module loads.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

# Compiled by mypyc. The policies' base allows interpreted subclasses (users register their own) and
# declares its flags ClassVar, so that a subclass's class attributes override them. keys.py reads what callers give
# through Any, so its own checks raise the typed error before a compiled field read's TypeError.
# Not the layer-group and host-tier halves of the facade (cache_groups, cache_windows, cache_host):
# off the common path, they run interpreted.
CORE = ("tokens", "results", "pools/allocator", "pools/ledger", "eviction/index", "eviction/view", "eviction/history",
        "eviction/policies", "eviction/ghosts", "eviction/duty", "eviction/evidence", "eviction/prior",
        "eviction/adaptive", "eviction/lrfu",
        "radix/types", "radix/core", "radix/idle_roots", "radix/node", "radix/components", "radix/shadow_keys",
        "radix/shadow_heap", "radix/shadow", "radix/windows", "radix/residency", "radix/device_path", "radix/tree",
        "radix/lookup", "radix/locks", "radix/evict", "radix/pins", "radix/check", "runs", "sequences", "cache_thread",
        "insert_slots", "cache_base", "cache_requests", "cache", "events/records", "events/holders",
        "events/hashing", "events/recorder", "keys")
NATIVE = "_runs_native"  # C beside the core (radixkv/_runs_native.c), built with it, used only with it
SHARED = "core__mypyc"  # mypyc's shared library of the whole group (radixkv/core__mypyc.*.so)
STAMP = "_core_build.txt"  # written by a successful build: one "sha256 path" line per CORE source
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def source_digest(package_dir: str = PACKAGE_DIR) -> str:
    """The stamp's text for the CORE sources as they are now."""
    lines = []
    for source in [m + ".py" for m in CORE] + [NATIVE + ".c"]:
        with open(os.path.join(package_dir, source), "rb") as f:
            lines.append(f"{hashlib.sha256(f.read()).hexdigest()} {source}\n")
    return "".join(lines)


def _extension(package_dir: str, module: str) -> str | None:
    folder, name = os.path.split(module)
    spec = importlib.machinery.PathFinder.find_spec(name, [os.path.join(package_dir, folder)])
    if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return None
    return spec.origin


def state(package_dir: str = PACKAGE_DIR) -> tuple[bool, str]:
    """(whether the compiled core would run, why not). Reads files only."""
    if os.environ.get("RADIXKV_PURE_PYTHON") == "1":
        return False, "RADIXKV_PURE_PYTHON=1"
    if any(_extension(package_dir, m) is None for m in (SHARED, NATIVE, *CORE)):
        return False, "not built"
    try:
        with open(os.path.join(package_dir, STAMP)) as f:
            stamp = f.read()
        current = source_digest(package_dir)
    except OSError:
        return False, "no build stamp"
    if stamp != current:
        changed = sorted(set(current.splitlines()) - set(stamp.splitlines()))
        return False, f"stale: {changed[0].split()[1] if changed else 'the core'} changed after the build"
    return True, ""


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads CORE modules from their .py files even where extension files sit beside them."""

    def __init__(self, package_dir: str) -> None:
        self.paths = {"radixkv." + m.replace("/", "."): os.path.join(package_dir, m + ".py") for m in CORE}

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201 - the finder protocol
        origin = self.paths.get(fullname)
        return None if origin is None else importlib.util.spec_from_file_location(fullname, origin)


def choose(package_dir: str = PACKAGE_DIR) -> bool:
    """Route the core's imports; True when the compiled core will run. Where extension files exist
    but cannot be used (stale, or RADIXKV_PURE_PYTHON=1), the .py files are loaded instead, and NATIVE
    cannot be imported (runs.py then expands with numpy)."""
    compiled, why = state(package_dir)
    if not compiled:
        sys.modules["radixkv." + NATIVE] = None  # type: ignore[assignment]  # (an import of it raises ImportError)
    if not compiled and any(_extension(package_dir, m) is not None for m in (SHARED, NATIVE, *CORE)):
        if why.startswith("stale") and "radixkv.build" not in getattr(sys, "orig_argv", ()):  # (not while rebuilding)
            print(f"radixkv: compiled core {why}; running pure Python (rebuild: make install)", file=sys.stderr)
        sys.meta_path.insert(0, _SourceFirst(package_dir))
    return compiled


def native(name: str) -> Any:
    """NATIVE's function `name` while the compiled core runs; None otherwise (`choose` hides the module): then the
    caller runs its own Python form, which gives the same. Read once, at a core module's import, into a Final."""
    try:
        module = importlib.import_module("radixkv." + NATIVE)
    except ImportError:
        return None
    return getattr(module, name)
