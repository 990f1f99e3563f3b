"""Recorded traces (radixkv/bench/traces.py) and `radixkv bench --trace`: block-hash ids become
deterministic token blocks that share exactly what the ids share; the bench replays a trace file
with every policy and OPT and agrees with the library run on the same requests."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from radixkv.bench.opt import opt_hit_rate
from radixkv.bench.runner import replay
from radixkv.bench.traces import TraceFormatError, hash_block_tokens, read_trace
from radixkv.bench.workloads import make_workload, write_jsonl
from radixkv.cli import main

LINES = [{"hash_ids": [1, 2, 3], "input_length": 40, "block_size": 16},
         {"hash_ids": [1, 2, 4, 5], "input_length": 64, "block_size": 16},
         {"hash_ids": [1, 2, 3, 6], "input_length": 50, "block_size": 16, "timestamp": 7},
         {"hash_ids": [9], "input_length": 10, "block_size": 16}]


def _write(tmp_path, lines: list) -> str:
    path = str(tmp_path / "trace.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_hash_ids_map_to_blocks_shared_exactly_as_the_ids() -> None:
    a, b = hash_block_tokens([1, 2, 3], 16), hash_block_tokens([1, 2, 4], 16)
    assert a.dtype == np.int32 and len(a) == 48 and np.array_equal(a, hash_block_tokens([1, 2, 3], 16))
    assert np.array_equal(a[:32], b[:32]) and not np.array_equal(a[32:], b[32:])
    blocks = hash_block_tokens(list(range(500)), 16).reshape(500, 16)
    assert len({blk.tobytes() for blk in blocks}) == 500  # no two ids give the same block
    assert not np.array_equal(hash_block_tokens([7], 4), hash_block_tokens([7], 8)[:4])  # block size matters


def test_read_trace_both_formats(tmp_path) -> None:
    reqs = read_trace(_write(tmp_path, LINES))
    assert [r.prompt_len for r in reqs] == [40, 64, 50, 10] and [len(r.tokens) for r in reqs] == [40, 64, 50, 10]
    assert np.array_equal(reqs[0].tokens[:32], reqs[1].tokens[:32])  # blocks 1, 2 shared
    assert np.array_equal(reqs[0].tokens, reqs[2].tokens[:40])  # 1, 2, 3 shared
    tok = make_workload("tot", scale=0.02)
    path = str(tmp_path / "tokens.jsonl")
    write_jsonl(tok, path)
    back = read_trace(path)
    assert all(np.array_equal(a.tokens, b.tokens) and a.prompt_len == b.prompt_len for a, b in zip(back, tok))


@pytest.mark.parametrize("bad", ['{"hash_ids": [1, -2], "input_length": 3}', '{"hash_ids": [1], "input_length": 999}',
                                 '{"tokens": [1, 2], "prompt_len": 3}', '{"other": 1}', '[1, 2]', 'not json'])
def test_bad_lines_name_the_line(tmp_path, bad: str) -> None:
    path = str(tmp_path / "bad.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(LINES[0]) + "\n" + bad + "\n")
    with pytest.raises(TraceFormatError, match=":2"):
        read_trace(path)


def test_bench_replays_a_trace_file(tmp_path, capsys) -> None:
    path = _write(tmp_path, LINES * 6)
    out_dir = str(tmp_path / "out")
    assert main(["bench", "--trace", path, "--fracs", "0.5", "--policies", "lru,lfu,adaptive", "--page-size", "16",
                 "--no-plots", "--out", out_dir]) == 0
    assert "trace" in capsys.readouterr().out
    rep = json.load(open(os.path.join(out_dir, "bench.json")))
    reqs = read_trace(path)
    (cell,) = rep["cells"]
    assert cell["workload"] == "trace"
    assert cell["opt"] == pytest.approx(opt_hit_rate(reqs, cell["capacity"], 16).hit_rate)
    for p in ("lru", "lfu", "adaptive"):
        assert cell["policies"][p]["hit_rate"] == pytest.approx(replay(reqs, cell["capacity"], p, 16).hit_rate)
