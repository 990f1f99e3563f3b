"""The SGLang peer from a fresh clone: the harness ships with radixkv (no file outside the
repository), imports nothing of radixkv (it runs in SGLang's own venv), and where SGLang is
installed (`make sglang`) it replays a trace to the same hit rate as OPT and radixkv when nothing
must be evicted, and leaks no slot."""

from __future__ import annotations

import ast
import os
import sys

import pytest

from radixkv.bench.opt import opt_hit_rate
from radixkv.bench.runner import replay
from radixkv.bench.sglang_peer import DEFAULT_PYTHON, Peer
from radixkv.bench.workloads import make_workload, write_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "radixkv", "bench", "sglang_harness.py")


def test_the_default_harness_is_inside_the_package(monkeypatch) -> None:
    monkeypatch.delenv("RADIXKV_SGLANG_HARNESS", raising=False)
    assert os.path.samefile(Peer.from_env().harness, HARNESS)


def test_the_harness_imports_only_the_standard_library_torch_and_sglang() -> None:
    tree = ast.parse(open(HARNESS).read())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert roots - set(sys.stdlib_module_names) == {"torch", "sglang"}


def _peer() -> Peer:
    python = os.path.join(ROOT, DEFAULT_PYTHON)
    peer = Peer(HARNESS, python)
    if peer.problem() is not None:
        pytest.skip(f"SGLang is not installed here ({peer.problem()}); `make sglang` builds it")
    return peer


def test_sglang_replays_a_trace_like_opt_when_nothing_is_evicted(tmp_path) -> None:
    peer = _peer()
    reqs = make_workload("chat", scale=0.05)
    path = str(tmp_path / "chat.jsonl")
    write_jsonl(reqs, path)
    roomy = sum(len(r.tokens) for r in reqs) + 16  # every token fits: no policy evicts
    run = peer.run(path, [roomy, 2048], 1, "lru", backends=("radix", "unified-rust"))
    (big, small, rust_big, rust_small) = run.results
    want = opt_hit_rate(reqs, roomy, 1).hit_rate
    assert (big.hit_rate == rust_big.hit_rate == pytest.approx(want)
            == pytest.approx(replay(reqs, roomy, "lru", 1).hit_rate))
    assert small.hit_rate <= opt_hit_rate(reqs, 2048, 1).hit_rate and small.hit_rate == rust_small.hit_rate


def test_speed_ratios_are_taken_round_by_round(tmp_path) -> None:
    from radixkv.bench import speed

    assert speed.spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    peer = _peer()
    reqs = make_workload("chat", scale=0.05)
    path = str(tmp_path / "chat.jsonl")
    write_jsonl(reqs, path)
    version, best, ratios = speed.compare(peer, reqs, path, [2048], 1, ("lru",), 3)
    assert version and set(best[0]) == {"radixkv lru", "SGLang RadixCache", "SGLang Rust core"}
    for backend in speed.PEER_BACKENDS:
        s = ratios[0][speed.ratio_name("lru", backend)]
        assert 0 < s.low <= s.median <= s.high
        # the round where SGLang was fastest has a ratio <= the best-of ratio; where radixkv was fastest, >=
        of_bests = best[0]["radixkv lru"] / best[0][speed.PEER_NAMES[backend]]
        assert s.low <= of_bests * (1 + 1e-12) and s.high >= of_bests * (1 - 1e-12)
