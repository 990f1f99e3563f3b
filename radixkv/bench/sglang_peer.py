"""SGLang's own RadixCache on the same trace, through the peer harness radixkv/bench/sglang_harness.py.

The harness replays a JSON-lines trace (`{"tokens": [...], "prompt_len": n}` per line) with the same
lifecycle as radixkv.bench.runner (match, lock, alloc with evict-on-shortfall, insert, unlock) and
prints a JSON report. It ships with radixkv; `radixkv bench --sglang-harness PATH` or the
environment variable RADIXKV_SGLANG_HARNESS may name another. It runs in this process when
`import sglang` works here, else in a subprocess of a separate venv's interpreter
(`--sglang-python`, RADIXKV_SGLANG_PYTHON, default `.venv-sglang/bin/python`, which `make sglang`
builds: SGLang from PyPI with --no-deps). Nothing from SGLang is copied into radixkv. The speed
comparison keeps the harness alive instead (radixkv.bench.peer_session).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
from typing import NamedTuple

from radixkv.errors import RadixKVError

HARNESS_ENV, PYTHON_ENV = "RADIXKV_SGLANG_HARNESS", "RADIXKV_SGLANG_PYTHON"
DEFAULT_HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang_harness.py")
DEFAULT_PYTHON = os.path.join(".venv-sglang", "bin", "python")


class PeerError(RadixKVError, RuntimeError):
    """The SGLang harness could not run, failed, or printed no report."""


class PeerResult(NamedTuple):
    capacity: int
    hit_rate: float
    requests_per_s: float  # requests / seconds inside the cache's calls (radixkv's runner counts the same)
    backend: str = "radix"  # "radix": RadixCache (Python); "unified-rust": UnifiedRadixCache, Rust TreeCore


class PeerRun(NamedTuple):
    version: str  # SGLang's version as the harness reported it
    where: str  # "in-process" or the interpreter path
    results: list[PeerResult]


class Peer(NamedTuple):
    """Where the harness and the interpreter that can import SGLang are."""
    harness: str
    python: str

    @classmethod
    def from_env(cls) -> Peer:
        return cls(os.environ.get(HARNESS_ENV, DEFAULT_HARNESS), os.environ.get(PYTHON_ENV, DEFAULT_PYTHON))

    @staticmethod
    def in_process() -> bool:
        return importlib.util.find_spec("sglang") is not None

    def problem(self) -> str | None:
        """Why the peer cannot run, or None when it can (harness present, SGLang importable somewhere)."""
        if not os.path.isfile(self.harness):
            return f"no SGLang harness at {self.harness} (pass --sglang-harness or set {HARNESS_ENV})"
        if not self.in_process() and not os.path.isfile(self.python):
            return (f"sglang is not importable here and there is no interpreter at {self.python} "
                    f"(pass --sglang-python or set {PYTHON_ENV})")
        return None

    def run(self, trace: str, capacities: list[int], page_size: int = 1, policy: str = "lru",
            backends: tuple[str, ...] = ("radix",), timeout: float = 600.0) -> PeerRun:
        """Replay `trace` in each SGLang backend at each capacity (tokens) with `policy`; results
        are backend-major, then capacity. Raises PeerError."""
        if (why := self.problem()) is not None:
            raise PeerError(why)
        args = [trace, "--backend", ",".join(backends), "--capacity", ",".join(map(str, capacities)),
                "--page-size", str(page_size), "--eviction-policy", policy]
        text, where = self._in_process(args) if self.in_process() else self._subprocess(args, timeout)
        try:
            return parse(text, where)
        except (ValueError, KeyError) as e:
            raise PeerError(f"the SGLang harness printed no readable report ({e}): {text[-500:]!r}") from e

    def load(self):  # noqa: ANN201 - the harness, a module
        """The harness, imported into this interpreter (which imports SGLang)."""
        spec = importlib.util.spec_from_file_location("sglang_radix_harness", self.harness)
        if spec is None or spec.loader is None:
            raise PeerError(f"{self.harness} is not a Python file")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    def _in_process(self, args: list[str]) -> tuple[str, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.load().main(args)
        return out.getvalue(), "in-process"

    def _subprocess(self, args: list[str], timeout: float) -> tuple[str, str]:
        try:
            proc = subprocess.run([self.python, self.harness, *args], capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PeerError(f"{self.python} {self.harness}: {e}") from e
        if proc.returncode:
            raise PeerError(f"SGLang harness exited with {proc.returncode}: {proc.stderr[-2000:]}")
        return proc.stdout, self.python


def parse(text: str, where: str) -> PeerRun:
    """Read the harness's JSON report (stdout). Requests/s is counted as radixkv's runner counts its
    own: requests over the time inside the cache's calls (the harness's per-op totals), not the
    harness's wall clock, which also holds its loop, its torch.cat and its bookkeeping of timings."""
    return report_of(json.loads(text[text.index("{"):]), where)


def report_of(rep: dict, where: str) -> PeerRun:
    """parse() of a report already read from JSON."""
    results = []
    for r in rep["results"]:
        inside = sum(op.get("total_s", 0.0) for op in r["per_op"].values())
        rate = r["requests"] / inside if inside else float(r["requests_per_s"])
        results.append(PeerResult(int(r["capacity_tokens"]), r["hit_tokens"] / max(1, r["prompt_tokens"]),
                                  rate, r.get("backend", "radix")))
    return PeerRun(str(rep["sglang_version"]), where, results)
