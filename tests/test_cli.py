"""The `radixkv` command end to end on tiny settings: what it prints agrees with the library."""

from __future__ import annotations

import json
import os

import pytest

from radixkv.bench.opt import opt_hit_rate
from radixkv.bench.runner import replay
from radixkv.bench.workloads import make_workload
from radixkv.cli import main


@pytest.fixture(autouse=True)
def _wide(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps tables to the terminal; keep rows on one line


def test_calc_prints_hand_computed_bytes(capsys) -> None:
    assert main(["calc", "llama-2-70b", "--dtype", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "327,680" in out  # 2 x 80 x 8 x 128 x 2
    assert main(["calc", "all", "--tp", "8", "--gpu-gib", "141"]) == 0
    out = capsys.readouterr().out
    assert "deepseek-v3" in out and "MLA" in out and "qwen2.5-72b" in out


def test_demo_shares_and_evicts(capsys) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "sharing saved 20" in out  # 42 prompt tokens in 22 cached (see radixkv/demo.py PROMPTS)
    assert "'Answer in one word .' (5 tok)" in out  # least recently used leaf goes first under LRU
    assert "Germany" in out.split("after eviction")[1]  # the locked in-flight path survived


def test_bench_tiny_run_matches_the_library(tmp_path, capsys) -> None:
    out_dir = str(tmp_path / "out")
    assert main(["bench", "--workloads", "gsp,chat", "--fracs", "0.1", "--policies", "lru,adaptive",
                 "--scale", "0.1", "--no-sglang", "--out", out_dir]) == 0
    text = capsys.readouterr().out
    assert "token hit rate" in text and "bookkeeping throughput" in text
    rep = json.load(open(os.path.join(out_dir, "bench.json")))
    for f in ("hit_rate.png", "latency.png", "memory.png"):
        assert os.path.getsize(os.path.join(out_dir, f)) > 10_000
    assert len(rep["cells"]) == 2
    for cell in rep["cells"]:
        reqs = make_workload(cell["workload"], scale=0.1)
        assert cell["opt"] == pytest.approx(opt_hit_rate(reqs, cell["capacity"]).hit_rate)
        assert cell["policies"]["lru"]["hit_rate"] == pytest.approx(replay(reqs, cell["capacity"], "lru").hit_rate)
        assert all(p["hit_rate"] <= cell["opt"] + 1e-12 for p in cell["policies"].values())
