"""Compile the bookkeeping core with mypyc, in place, from its own .py files (issue 23).

    python -m radixkv.build           build; one line on stdout, exit status 0 even when it cannot
    python -m radixkv.build --clean   remove the extension files, the stamp and build/core

mypyc compiles the CORE modules (radixkv/core_loader.py) into one shared library
(radixkv/core__mypyc.*.so) and one small extension file beside each .py, and the C compiler builds
NATIVE (radixkv/_runs_native.c, against numpy's headers) beside them; the stamp records the
sources' SHA-256 so that core_loader runs the .py files when any was edited after the build.
Needs the `build` extra (mypy, setuptools), a C compiler and the Python headers; without them it
says which is missing and the same .py files run interpreted. Type-checking uses pyproject's
[tool.mypy] (torch and triton are skipped: the core never needs their types).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time

from radixkv.core_loader import CORE, NATIVE, PACKAGE_DIR, SHARED, STAMP, source_digest

ROOT = os.path.dirname(PACKAGE_DIR)
BUILD_DIR = os.path.join(ROOT, "build", "core")
EXTENSION = os.path.splitext(sysconfig.get_config_var("EXT_SUFFIX") or ".so")[1]  # ".so" (".pyd" on Windows)


def missing() -> str | None:
    """What the build lacks (None: nothing): the `build` extra, a C compiler that runs, Python.h."""
    if importlib.util.find_spec("mypyc") is None or importlib.util.find_spec("setuptools") is None:
        return "mypy/setuptools are not installed (pip install -e '.[build]')"
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return "no Python headers (Python.h)"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        return f"no C compiler ({' '.join(cc) or 'CC is empty'})"
    try:  # the compiler must run and find the headers: preprocess one include (milliseconds)
        probe = subprocess.run([*cc, "-E", "-I", include, "-"], input="#include <Python.h>\n", text=True,
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the C compiler ({' '.join(cc)}) does not run ({e})"
    if probe.returncode != 0:
        return f"the C compiler ({' '.join(cc)}) cannot compile against Python.h (exit {probe.returncode})"
    return None


def artefacts(package_dir: str = PACKAGE_DIR) -> list[str]:
    """What a build leaves in the package: the stamp, the shared library and every extension file
    beside a .py or a .c (a module compiled by an earlier build whose list differed included)."""
    found = [os.path.join(package_dir, STAMP)] if os.path.exists(os.path.join(package_dir, STAMP)) else []
    for folder, _, files in os.walk(package_dir):
        for name in files:
            stem = name.split(".")[0]
            if name.endswith(EXTENSION) and (stem == SHARED or stem + ".py" in files or stem + ".c" in files):
                found.append(os.path.join(folder, name))
    return found


def clean() -> None:
    for path in artefacts():
        os.remove(path)
    shutil.rmtree(BUILD_DIR, ignore_errors=True)


def compile_core() -> None:
    """mypyc + the C compiler; raises on any failure (the caller reports it)."""
    import numpy as np
    from mypyc.build import mypycify
    from setuptools import Distribution, Extension

    config = os.path.join(ROOT, "pyproject.toml")
    args = [f"--config-file={config}"] if os.path.exists(config) else []
    sources = [os.path.join("radixkv", m + ".py") for m in CORE]
    cwd = os.getcwd()
    os.chdir(ROOT)  # module names come from paths relative to the project root
    try:
        extensions = mypycify(args + sources, opt_level="3", group_name="radixkv." + SHARED.removesuffix("__mypyc"),
                              target_dir=BUILD_DIR)
        if os.name != "nt":  # i64 arithmetic wraps (eviction/ghosts.py) whatever the interpreter's own CFLAGS say
            for ext in extensions:
                ext.extra_compile_args.append("-fwrapv")
        extensions.append(Extension("radixkv." + NATIVE, [os.path.join("radixkv", NATIVE + ".c")],
                                    include_dirs=[np.get_include()]))
        dist = Distribution({"name": "radixkv-core", "ext_modules": extensions})
        cmd = dist.get_command_obj("build_ext")
        cmd.inplace, cmd.build_temp = True, os.path.join(BUILD_DIR, "temp")
        dist.run_command("build_ext")
    finally:
        os.chdir(cwd)


def build() -> str:
    """Build the compiled core if possible; the one line to print."""
    if os.environ.get("RADIXKV_PURE_PYTHON") == "1":
        return "radixkv: RADIXKV_PURE_PYTHON=1: the core runs as pure Python (nothing compiled)"
    lack = missing()
    if lack is not None:  # (an earlier build, if any, stays: core_loader uses it only while its stamp holds)
        return f"radixkv: {lack}: the core runs as pure Python"
    clean()
    t0, log = time.perf_counter(), io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            compile_core()
    except (Exception, SystemExit) as e:  # mypy errors exit; a compiler error raises: both fall back
        clean()
        last = [line for line in log.getvalue().splitlines() if "error" in line.lower()][:1] or [repr(e)]
        return f"radixkv: compiling the core failed ({last[0][:160]}): the core runs as pure Python"
    with open(os.path.join(PACKAGE_DIR, STAMP), "w") as f:
        f.write(source_digest())
    return f"radixkv: compiled core built ({len(CORE)} modules, {time.perf_counter() - t0:.0f} s)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clean", action="store_true", help="remove the compiled core")
    if p.parse_args(argv).clean:
        clean()
        print("radixkv: compiled core removed")
    else:
        print(build())
    return 0


if __name__ == "__main__":
    sys.exit(main())
