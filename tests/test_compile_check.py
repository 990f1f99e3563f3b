"""bench/compile_check.py: every kernel compiles ahead of time for sm_80 and sm_90 (no GPU needed),
with the launch configuration its launcher picks, and spills no register.

The check runs in a subprocess with TRITON_INTERPRET unset: under the interpreter `@triton.jit`
yields interpreted functions, which cannot be compiled. The suite runs `--quick` (one common and
one large shape per kernel, ~21 compiles); the script's default is the full grid.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "compile_check.py"
LINE = re.compile(r"^(\w+) (\S+) sm_(\d+) regs=(\d+) spill=(\d+) shared=(\d+)$")
KERNELS = {"_decode_split_kernel", "_decode_reduce_kernel", "_extend_kernel", "_cascade_kernel",
           "_merge_states_kernel", "_store_kv_kernel", "_gather_kv_kernel", "_write_req_to_token_kernel",
           "_build_kv_indices_kernel"}
# kernels with AttentionVariant switches (window/chunk mask, soft-capping, sinks): compiled both ways
VARIANT_KERNELS = {"_decode_split_kernel", "_decode_reduce_kernel", "_extend_kernel", "_cascade_kernel",
                   "_merge_states_kernel"}
JIT = re.compile(r"^@triton\.jit\b.*\n(?:@.*\n)*def (\w+)\(", re.M)


def test_the_check_knows_every_kernel_of_the_package() -> None:
    """A new `@triton.jit` kernel in radixkv/ (a jit function launched on a grid, `name[grid](...)`;
    device helpers such as extend's `_attend_block` compile inside their kernel) fails here until
    the compile check compiles it."""
    sources = "\n".join(path.read_text() for path in (SCRIPT.parent.parent / "radixkv").rglob("*.py"))
    found = {name for name in JIT.findall(sources) if re.search(rf"\b{name}\[", sources)}
    assert found == KERNELS, f"in radixkv/ but not checked: {found - KERNELS}; checked but gone: {KERNELS - found}"


def _run(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """The script with `args`; or `code` run with the script imported as `cc`."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if code is None:
        cmd = [sys.executable, str(SCRIPT), *args]
    else:
        cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); "
               f"import compile_check as cc; {code}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def test_every_kernel_compiles_for_sm80_and_sm90_without_spills() -> None:
    proc = _run("--quick")
    assert proc.returncode == 0, f"compile_check failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    rows = [LINE.match(line) for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert rows and all(rows), f"unexpected output lines:\n{proc.stdout}"
    seen = {(m.group(1), int(m.group(3))) for m in rows}
    assert seen == {(k, cap) for k in KERNELS for cap in (80, 90)}, f"missing: {proc.stdout}"
    for m in rows:
        kernel, config, regs, spill = m.group(1), m.group(2), int(m.group(4)), int(m.group(5))
        assert 0 < regs <= 255 and spill == 0, f"{kernel} {config}: {regs} registers, {spill} spilled bytes"
    variants = {(m.group(1), int(m.group(3)), "-var" in m.group(2).split("/")[0]) for m in rows}
    assert variants >= {(k, cap, var) for k in VARIANT_KERNELS for cap in (80, 90) for var in (False, True)}, (
        f"an attention kernel without its causal or its AttentionVariant compile: {proc.stdout}")
    attention = [m for m in rows if m.group(1) == "_decode_split_kernel"]
    assert all(int(m.group(6)) > 0 for m in attention), "tl.dot operands go through shared memory"


def test_help_and_bad_arguments() -> None:
    proc = _run("--help")
    assert proc.returncode == 0 and "regs=<n> spill=<bytes> shared=<bytes>" in proc.stdout
    proc = _run("--ops", "no_such_kernel")
    assert proc.returncode == 2 and "no_such_kernel" in proc.stderr


def test_compile_error_fails_the_check() -> None:
    """A configuration the kernel rejects at compile time (8 head rows: under tl.dot's 16, which
    its tl.static_assert catches) is an ERROR line and exit status 1, not a crash or a pass."""
    proc = _run(code="from radixkv.kernels.decode import DecodeConfig; "
                "cc.decode_config = lambda *a: DecodeConfig(8, 32, 4, 2); sys.exit(cc.main("
                "['--caps', '80', '--head-dims', '64', '--groups', '1', '--dtypes', 'fp16', "
                "'--ops', 'decode_split']))")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "_decode_split_kernel d64-g1-fp16 sm_80 ERROR" in proc.stdout, proc.stdout
