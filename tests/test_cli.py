"""The `radixkv` command end to end on tiny settings: what it prints agrees with the library."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from radixkv.bench.opt import opt_hit_rate
from radixkv.bench.runner import replay
from radixkv.bench.workloads import make_workload
from radixkv import __version__
from radixkv.cli import core_build, main


@pytest.fixture(autouse=True)
def _wide(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps tables to the terminal; keep rows on one line


def test_calc_prints_hand_computed_bytes(capsys) -> None:
    assert main(["calc", "llama-2-70b", "--kv-cache-dtype", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "327,680" in out  # 2 x 80 x 8 x 128 x 2
    assert main(["calc", "all", "--tensor-parallel-size", "8", "--gpu-gib", "141"]) == 0
    out = capsys.readouterr().out
    assert "deepseek-v3" in out and "MLA" in out and "qwen2.5-72b" in out
    assert "qwen2.5-7b: tp 8 does not divide the 28 attention heads" in " ".join(out.split())


def test_calc_weights_larger_than_memory_is_a_message_not_a_negative(capsys) -> None:
    assert main(["calc", "deepseek-v3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "-1," not in out and " -" not in out.replace(" -tp", "")  # no negative GiB anywhere
    assert "624.9 GiB per rank" in out and "no room for KV" in out  # 671e9 fp8 bytes
    assert "The smallest -tp that leaves room is 16" in out


def test_calc_tp_above_kv_heads_replicates_whole_heads(capsys) -> None:
    assert main(["calc", "llama-3-8b", "-tp", "16"]) == 0
    out = capsys.readouterr().out
    assert "8 KV heads / tp 16: 1 per rank (each replicated 2x)" in out
    assert "16,384" in out  # 2 x 32 layers x 1 head x 128 x 2 bytes per rank


def test_calc_reads_a_model_folder(tmp_path, capsys) -> None:
    cfg = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584,
           "intermediate_size": 18944, "vocab_size": 152064, "torch_dtype": "bfloat16"}
    (tmp_path / "my-qwen").mkdir()
    (tmp_path / "my-qwen" / "config.json").write_text(json.dumps(cfg))
    assert main(["calc", str(tmp_path / "my-qwen"), "-tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "my-qwen" in out and f"{2 * 28 * 2 * 128 * 2:,}" in out  # 2 KV heads per rank, bf16


@pytest.mark.parametrize("argv, message", [
    (["calc", "meta-llama/Llama-3.1-8B"], "reads no network"),
    (["calc", "llama-3-8b", "-tp", "3"], "tp 3 does not divide the 32 attention heads"),
    (["calc", "--gpu-memory-utilization", "1.5"], "must lie in (0, 1]"),
    (["calc", "--context", "9000", "--max-model-len", "4096"], "exceeds --max-model-len"),
    (["calc", "--tp", "2"], "unrecognized arguments: --tp"),  # vLLM's -tp / --tensor-parallel-size
    (["bench", "--fracs", "2"], "must lie in (0, 1]"),  # once accepted as 200%
    (["bench", "--policies", "bogus"], "unknown 'bogus'"),
    (["bench", "--workloads", "gsp,nope"], "unknown 'nope'"),
    (["bench", "--page-size", "0"], "must be >= 1"),
    (["bench", "--sglang", "--sglang-harness", "no/such/harness.py"], "no SGLang harness at no/such/harness.py"),
    (["demo", "--capacity", "8"], "must be >= 25"),
    (["demo", "--policy", "bogus"], "invalid choice"),
])
def test_user_mistakes_are_one_line_and_exit_2(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("radixkv") and ": error: " in err[-1] and message in err[-1], err
    assert not any("Traceback" in line for line in err)


def test_sglang_peer_failing_at_run_time_exits_1(tmp_path, capsys) -> None:
    harness = tmp_path / "harness.py"
    harness.write_text("import sys\nsys.exit('sglang exploded')\n")
    with pytest.raises(SystemExit) as info:
        main(["bench", "--workloads", "gsp", "--fracs", "0.5", "--policies", "lru", "--scale", "0.05",
              "--sglang", "--sglang-harness", str(harness), "--sglang-python", sys.executable,
              "--out", str(tmp_path / "out"), "--no-plots"])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "SGLang peer failed" in err and "sglang exploded" in err  # the harness's own stderr


def test_bench_without_matplotlib_writes_tables_and_json(tmp_path, capsys, monkeypatch) -> None:
    """The base install (no `plots` extra) still runs `radixkv bench`, and says how to get the PNGs."""
    import radixkv.cli

    monkeypatch.setattr(radixkv.cli, "_installed", lambda module: module != "matplotlib")
    out_dir = tmp_path / "out"
    assert main(["bench", "--workloads", "fewshot", "--fracs", "0.5", "--policies", "lru", "--scale", "0.05",
                 "--out", str(out_dir)]) == 0
    assert "pip install 'radixkv[plots]'" in capsys.readouterr().out
    assert sorted(p.name for p in out_dir.iterdir()) == ["bench.json"]


def test_help_shows_defaults_and_version(capsys) -> None:
    for argv in (["calc", "--help"], ["bench", "--help"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
    assert main(["--version"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--tensor-parallel-size" in out and "(default: 0.9)" in out and "(default: lru,lfu" in out
    assert f"radixkv {__version__}" in out


def test_python_dash_m_runs_the_same_command() -> None:
    out = subprocess.run([sys.executable, "-m", "radixkv", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"radixkv {__version__} ({core_build()})"  # the build this suite runs on


def test_demo_shares_and_evicts(capsys) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "sharing saved 20" in out  # 42 prompt tokens in 22 cached (see radixkv/demo.py PROMPTS)
    assert "'Answer in one word .' (5 tok)" in out  # least recently used leaf goes first under LRU
    assert "Germany" in out.split("after eviction")[1]  # the locked in-flight path survived


def test_bench_tiny_run_matches_the_library(tmp_path, capsys) -> None:
    out_dir = str(tmp_path / "out")
    assert main(["bench", "--workloads", "gsp,chat", "--fracs", "0.1", "--policies", "lru,adaptive",
                 "--scale", "0.1", "--out", out_dir]) == 0
    text = capsys.readouterr().out
    assert "token hit rate" in text and "bookkeeping throughput" in text and "load average" in text
    rep = json.load(open(os.path.join(out_dir, "bench.json")))
    assert len(rep["load_average_1min"]) == 2
    for f in ("hit_rate.png", "latency.png", "memory.png"):
        assert os.path.getsize(os.path.join(out_dir, f)) > 10_000
    assert len(rep["cells"]) == 2
    for cell in rep["cells"]:
        reqs = make_workload(cell["workload"], scale=0.1)
        assert cell["opt"] == pytest.approx(opt_hit_rate(reqs, cell["capacity"]).hit_rate)
        assert cell["policies"]["lru"]["hit_rate"] == pytest.approx(replay(reqs, cell["capacity"], "lru").hit_rate)
        assert all(p["hit_rate"] <= cell["opt"] + 1e-12 for p in cell["policies"].values())
