"""SGLang's own RadixCache on the same trace, through the peer harness `sglang_radix.py`.

The harness (by default /work/shared/peers/sglang_radix.py, or $RADIXKV_SGLANG_HARNESS) replays a
make_trace.py JSON-lines trace with the same lifecycle as radixkv.bench.runner (match, lock,
alloc with evict-on-shortfall, insert, unlock) and prints a JSON report. It runs in this process
when `import sglang` works here, else in a subprocess of the interpreter of a separate venv
(default `.venv-sglang/bin/python`, or $RADIXKV_SGLANG_PYTHON), installed as the harness's
docstring says. Nothing from SGLang is copied into radixkv.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
from typing import NamedTuple

DEFAULT_HARNESS = "/work/shared/peers/sglang_radix.py"
DEFAULT_PYTHON = ".venv-sglang/bin/python"


class PeerResult(NamedTuple):
    capacity: int
    hit_rate: float
    requests_per_s: float


class PeerRun(NamedTuple):
    version: str  # SGLang's version as the harness reported it
    where: str  # "in-process" or the interpreter path
    results: list[PeerResult]


def harness_path() -> str:
    return os.environ.get("RADIXKV_SGLANG_HARNESS", DEFAULT_HARNESS)


def peer_python() -> str:
    return os.environ.get("RADIXKV_SGLANG_PYTHON", DEFAULT_PYTHON)


def available() -> str | None:
    """Why the peer cannot run, or None when it can (harness present and SGLang importable)."""
    if not os.path.exists(harness_path()):
        return f"no harness at {harness_path()} (set RADIXKV_SGLANG_HARNESS)"
    if importlib.util.find_spec("sglang") is None and not os.path.exists(peer_python()):
        return f"sglang is not importable and {peer_python()} does not exist (set RADIXKV_SGLANG_PYTHON)"
    return None


def _args(trace: str, capacities: list[int], page_size: int, policy: str) -> list[str]:
    return [trace, "--backend", "radix", "--capacity", ",".join(map(str, capacities)),
            "--page-size", str(page_size), "--eviction-policy", policy]


def run(trace: str, capacities: list[int], page_size: int = 1, policy: str = "lru",
        timeout: float = 600.0) -> PeerRun:
    """Replay `trace` in SGLang's RadixCache at each capacity (tokens) with `policy`."""
    args = _args(trace, capacities, page_size, policy)
    if importlib.util.find_spec("sglang") is not None:
        spec = importlib.util.spec_from_file_location("sglang_radix_harness", harness_path())
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            mod.main(args)
        text, where = out.getvalue(), "in-process"
    else:
        proc = subprocess.run([peer_python(), harness_path(), *args], capture_output=True, text=True,
                              timeout=timeout, check=False)
        if proc.returncode:
            raise RuntimeError(f"SGLang harness failed ({proc.returncode}): {proc.stderr[-2000:]}")
        text, where = proc.stdout, peer_python()
    return parse(text, where)


def parse(text: str, where: str) -> PeerRun:
    """Read the harness's JSON report (stdout)."""
    rep = json.loads(text[text.index("{"):])
    results = [PeerResult(int(r["capacity_tokens"]), r["hit_tokens"] / max(1, r["prompt_tokens"]),
                          float(r["requests_per_s"])) for r in rep["results"]]  # unrounded rate
    return PeerRun(str(rep["sglang_version"]), where, results)
