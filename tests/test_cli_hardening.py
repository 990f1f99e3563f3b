"""The `radixkv` command as a new user meets it: every mistake is one line and exit status 2
(a malformed trace names file:line), `--version` answers without loading torch, vLLM's flag
meanings hold (--dtype, --quantization, --max-model-len), and the demo lists every victim."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from radixkv import __version__
from radixkv.cli import core_build, main
from radixkv.core_loader import CORE, NATIVE, SHARED, STAMP, source_digest, state
from radixkv.demo import PRESSURE, WordTokenizer
from radixkv.demo import main as demo
from radixkv.eviction import POLICIES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_line_exit_2(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and err[0].startswith("radixkv"), err
    return err[0]


@pytest.mark.parametrize("argv, message", [
    (["bench", "--fracs", "2"], "must lie in (0, 1]"),
    (["calc", "--dtype", "fp8"], "invalid choice: 'fp8'"),  # quantized weights are --quantization, as in vLLM
    (["calc", "--dtype", "int4"], "invalid choice: 'int4'"),
    (["calc", "llama-3-8b", "--max-model-len", "100000"], "above llama-3-8b's maximum 8192"),
    (["nonsense"], "invalid choice"),
])
def test_a_usage_error_is_one_line(argv: list[str], message: str, capsys) -> None:
    assert message in one_line_exit_2(argv, capsys)




def test_version_says_how_the_core_runs_without_loading_torch() -> None:
    code = ("import sys, time; t = time.perf_counter(); from radixkv.cli import main; main(['--version']); "
            "print(round(time.perf_counter() - t, 3), 'torch' in sys.modules, 'numpy' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    line, stats = run.stdout.strip().splitlines()
    assert line == f"radixkv {__version__} ({core_build()})"
    seconds, torch_loaded, numpy_loaded = stats.split()
    assert (torch_loaded, numpy_loaded) == ("False", "False") and float(seconds) < 0.5


def test_core_build_reads_the_module_files(tmp_path, monkeypatch) -> None:
    """A package whose core modules are extension files, built from the sources there now, reads as
    compiled (nothing is loaded); a source edited after the build, or RADIXKV_PURE_PYTHON=1, as pure."""
    monkeypatch.delenv("RADIXKV_PURE_PYTHON", raising=False)
    for module in CORE:
        path = tmp_path / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {module}\n")
    (tmp_path / f"{NATIVE}.c").write_text("/* the C beside the core */\n")
    assert core_build(str(tmp_path)) == "pure Python"
    for module in (*CORE, SHARED):
        (tmp_path / f"{module}.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
        (tmp_path / f"{module}.abi3.so").write_bytes(b"")
    (tmp_path / STAMP).write_text(source_digest(str(tmp_path)))
    assert core_build(str(tmp_path)) == "pure Python"  # no extension of NATIVE
    (tmp_path / f"{NATIVE}.abi3.so").write_bytes(b"")
    (tmp_path / STAMP).unlink()
    assert core_build(str(tmp_path)) == "pure Python"  # no build stamp
    (tmp_path / STAMP).write_text(source_digest(str(tmp_path)))
    assert core_build(str(tmp_path)) == "compiled core"
    assert state(str(tmp_path)) == (True, "")
    (tmp_path / f"{NATIVE}.c").write_text("/* edited after the build */\n")
    assert state(str(tmp_path)) == (False, f"stale: {NATIVE}.c changed after the build")
    (tmp_path / STAMP).write_text(source_digest(str(tmp_path)))
    (tmp_path / "radix/tree.py").write_text("# edited after the build\n")
    assert core_build(str(tmp_path)) == "pure Python"
    assert state(str(tmp_path)) == (False, "stale: radix/tree.py changed after the build")
    (tmp_path / STAMP).write_text(source_digest(str(tmp_path)))
    monkeypatch.setenv("RADIXKV_PURE_PYTHON", "1")
    assert core_build(str(tmp_path)) == "pure Python"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_demo_lists_every_token_it_evicts(policy: str) -> None:
    out = io.StringIO()
    cache = demo(policy=policy, console=Console(file=out, width=400))
    text = out.getvalue()
    free = int(re.search(r"needs \d+ slots, (\d+) free", text).group(1))
    listed = [int(m.group(1)) for m in re.finditer(r"^  - '.*' \((\d+)(?: of \d+)? tok", text, re.M)]
    need = len(WordTokenizer().encode(PRESSURE)) - free  # it shares no prefix: every token needs a slot
    assert sum(listed) == need, text
    cache.check_invariants()


def test_quantization_sizes_the_weights_and_not_the_kv(capsys) -> None:
    from radixkv.calc import PRESETS, size

    m = PRESETS["llama-3-8b"]
    want = size(m, context=4096, gpu_gib=80, dtype="bfloat16", weight_dtype="fp8", tp=1, page_size=16,
                max_len=8192, util=0.9)
    assert main(["calc", "llama-3-8b", "-q", "fp8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{want.bytes_per_token:,.0f}" in out and f"{want.weight_bytes / 2**30:,.1f}" in out
    assert main(["calc", "llama-3-8b", "--max-model-len", "8192"]) == 0  # the maximum itself is fine


def test_prometheus_text_without_its_extra_names_the_install(monkeypatch) -> None:
    from radixkv import CacheConfig, ConfigError, RadixCache
    from radixkv.metrics import prometheus_text

    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=16))
    assert "radixkv_prefix_cache_queries_total" in prometheus_text(cache)  # with the extra installed
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed: import fails
    with pytest.raises(ConfigError) as info:
        prometheus_text(cache)
    assert str(info.value) == "prometheus_text needs prometheus-client: pip install 'radixkv[metrics]'"
