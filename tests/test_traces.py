"""Recorded traces (radixkv/bench/traces.py) and `radixkv bench --trace`: block-hash ids become
deterministic token blocks that share exactly what the ids share; the bench replays a trace file
with every policy and OPT and agrees with the library run on the same requests."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from radixkv.bench.opt import opt_hit_rate
from radixkv.bench.runner import replay
from radixkv.bench import traces
from radixkv.bench.traces import (TraceFormatError, hash_block_tokens, parse_trace,
                                  read_trace, read_traces)
from radixkv.bench.workloads import gsp, longchat, make_workload, rag, write_jsonl
from radixkv.errors import RadixKVError
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


# ---------------------------------------------------------------- malformed files: one line, exit 2

BAD_LINES = [
    ('{"hash_ids": [1], "input_length": 16, "block_size": 1099511627776}', "block_size"),  # 2**40: 29.8 GiB asked
    ('{"hash_ids": [1, 2], "block_size": 65536}', "input_length"),  # 128 Ki tokens is fine; the default length too
    ('{"tokens": []}', "'tokens' must be a non-empty list"),
    ('{"tokens": [1.5, 2]}', "'tokens' must hold ints"),
    ('{"tokens": [true, 2]}', "'tokens' must hold ints"),
    ('{"tokens": ["7"]}', "'tokens' must hold ints"),
    ('{"tokens": [2147483648]}', "'tokens' must hold ints"),
    ('{"tokens": [1, 2], "prompt_len": 0}', "'prompt_len' must be an int in [1, 2]"),
    ('{"tokens": [1, 2], "prompt_len": 1.0}', "'prompt_len'"),
    ('{"tokens": [1, 2], "prompt_len": true}', "'prompt_len'"),
    ('{"tokens": [1, 2], "timestamp": "noon"}', "'timestamp'"),
    ('{"tokens": [1, 2], "timestamp": NaN}', "'timestamp'"),
    ('{"tokens": [1, 2], "output_len": -1}', "'output_len'"),
    ('{"tokens": [1], "hash_ids": [1]}', "exactly one of"),
    ('{"hash_ids": []}', "'hash_ids' must be a non-empty list"),
    ('{"hash_ids": [false]}', "'hash_ids' must hold ints"),
    ('{"hash_ids": [18446744073709551616]}', "'hash_ids' must hold ints"),
    ('{"hash_ids": [1], "input_length": "16"}', "'input_length'"),
    ('{"hash_ids": [1], "block_size": 0}', "'block_size'"),
    ('{"tokens": [' + "9" * 5000 + "]}", "not JSON"),
    ("[" * 100000 + "]" * 100000, "not JSON"),
]


@pytest.mark.parametrize("bad, message", BAD_LINES, ids=[str(i) for i in range(len(BAD_LINES))])
def test_a_malformed_line_is_one_line_naming_file_and_line(tmp_path, capsys, bad: str, message: str) -> None:
    path = str(tmp_path / "bad.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(LINES[0]) + "\n\n" + bad + "\n")
    if "65536" in bad:  # the valid one: 2 blocks of 64 Ki tokens
        assert read_trace(path)[1].prompt_len == 2 * 65536
        return
    with pytest.raises(TraceFormatError, match=f"{path}:3: .*{re.escape(message)}"):
        read_trace(path)
    with pytest.raises(SystemExit) as info:
        main(["bench", "--trace", path, "--no-plots", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and f"{path}:3: " in err[0] and message in err[0], err


def test_the_memory_bound_is_computed_before_allocating(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "huge.jsonl")
    with open(path, "w") as f:  # 60 bytes asking for 2**40 tokens of one block (29.8 GiB before this check)
        f.write('{"hash_ids": [1], "input_length": 16, "block_size": 1099511627776}\n')
    # In a fresh process: tracemalloc counts every thread's allocations, and in the full suite a thread
    # an earlier test left running (128 MB once) is not this parser's doing.
    code = ("import sys, tracemalloc\n"
            "from radixkv.bench.traces import TraceFormatError, parse_trace\n"
            "tracemalloc.start()\n"
            "try:\n    parse_trace(sys.argv[1])\nexcept TraceFormatError as e:\n    print(e)\n"
            "print(tracemalloc.get_traced_memory()[1])\n")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True).stdout
    message, peak = out.strip().rsplit("\n", 1)
    assert ":1: 'block_size'" in message and int(peak) < 1 << 20, out
    monkeypatch.setattr(traces, "MAX_TRACE_TOKENS", 100)  # the whole trace's bound, checked line by line
    with open(path, "w") as f:
        f.write('{"hash_ids": [1, 2], "block_size": 16}\n' * 4)
    with pytest.raises(TraceFormatError, match=":4: the trace holds more than 100 tokens"):
        parse_trace(path)


@pytest.mark.parametrize("content, message", [
    (b"BZh91AY&SY", "compressed with bzip2"), (b"\xfd7zXZ\x00", "compressed with xz"),
    (b"\xff\xfe{\x00", "not UTF-8"), (b"", "no requests"), (b"\x1f\x8b\x08\x00garbage", "cannot read it"),
])
def test_unreadable_files_are_one_line(tmp_path, content: bytes, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=re.escape(message)):
        read_trace(str(path))
    for missing in (tmp_path / "nope.jsonl", tmp_path):
        with pytest.raises(TraceFormatError, match="cannot read it"):
            read_trace(str(missing))


def test_a_gzipped_trace_reads_as_the_plain_one(tmp_path) -> None:
    plain = _write(tmp_path, LINES)
    zipped = str(tmp_path / "trace.jsonl.gz")
    with open(plain, "rb") as f, gzip.open(zipped, "wb") as g:
        g.write(f.read())
    a, b = read_trace(plain), read_trace(zipped)
    assert len(a) == len(b) and all(np.array_equal(x.tokens, y.tokens) and x.prompt_len == y.prompt_len
                                    for x, y in zip(a, b))
    stamps = [r.timestamp_ms for r in parse_trace(zipped)]
    assert stamps == [None, None, 7.0, None]


def test_traces_with_one_file_name_or_a_workloads_name_all_run(tmp_path, capsys) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _write(tmp_path / "a", LINES)
    second = _write(tmp_path / "b", LINES[:2] * 3)
    gsp = str(tmp_path / "gsp.jsonl")
    os.rename(_write(tmp_path, LINES[1:] * 2), gsp)
    names = read_traces([first, second, gsp], taken=["gsp"])
    assert list(names) == ["trace", second, gsp] and len(names[second]) == 6 and len(names[gsp]) == 6
    with pytest.raises(TraceFormatError, match="given twice"):
        read_traces([first, first])
    out = str(tmp_path / "out")
    assert main(["bench", "--workloads", "gsp", "--scale", "0.02", "--trace", first, "--trace", second,
                 "--trace", gsp, "--fracs", "0.5", "--policies", "lru", "--no-plots", "--out", out]) == 0
    rep = json.load(open(os.path.join(out, "bench.json")))
    assert [c["workload"] for c in rep["cells"]] == ["gsp", "trace", second, gsp]


def test_library_calls_raise_only_typed_errors() -> None:
    for call in (lambda: hash_block_tokens([1, -1], 4), lambda: hash_block_tokens([1], 2**40),
                 lambda: hash_block_tokens("12", 4), lambda: make_workload("nope"),
                 lambda: make_workload("gsp", scale=0), lambda: make_workload("gsp", scale="1"),
                 lambda: gsp(num_groups=True), lambda: gsp(range_ratio=2.0), lambda: rag(k=9, num_docs=3),
                 lambda: longchat(first_len=(5, 1)), lambda: write_jsonl([(np.zeros(2), 1)], os.devnull)):
        with pytest.raises(RadixKVError):
            call()
