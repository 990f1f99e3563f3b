"""The scripts in bench/ as a user meets them: `--help` prints usage with defaults and runs nothing;
the small ones run end to end and agree with the library. (bench/kernels.py belongs to the kernel
tests.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from scripts import ROOT, load_script

from radixkv.bench.opt import opt_hit_rate
from radixkv.bench.workloads import make_workload

SCRIPTS = ["calls_per_request", "compile_gain", "e2e", "fleet", "host_tier", "opt", "peer_spread",
           "policy_cost", "policy_grid", "policy_long", "policy_margins", "policy_memory", "policy_switches",
           "recurrent_reuse", "sched_overhead", "sched_sweep", "sched_tail", "sched_traces", "shadow_overlap",
           "shadow_work", "switch_features", "switch_leadin", "switch_scout", "switch_transient", "workloads"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_usage_and_defaults(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    if name in ("e2e", "recurrent_reuse"):
        pytest.importorskip("transformers")
    module = load_script(ROOT / "bench" / f"{name}.py")
    with pytest.raises(SystemExit) as info:
        module.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "(default:" in out, out[:500]


def test_workloads_then_opt_agree_with_the_library(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "gsp.jsonl"
    load_script(ROOT / "bench" / "workloads.py").main(["gsp", "-o", str(trace), "--scale", "0.02"])
    load_script(ROOT / "bench" / "opt.py").main([str(trace), "--capacity", "20000"])
    want = opt_hit_rate(make_workload("gsp", scale=0.02), 20000)
    assert f"OPT token hit rate {want.hit_rate:.4f} ({want.hit_tokens}/{want.prompt_tokens}" in capsys.readouterr().out


def test_calls_per_request_counts_the_lifecycle() -> None:
    """Counted on the interpreted core (a compiled one's functions are invisible to sys.setprofile)."""
    env = {**os.environ, "RADIXKV_PURE_PYTHON": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "calls_per_request.py"), "--cells", "gsp:0.25:16",
                          "--requests", "20", "--top", "1000"], capture_output=True, text=True, check=True, env=env,
                         cwd=ROOT).stdout
    lines = out.splitlines()
    assert lines[0] == "pure Python"
    per_request = {line.split()[1]: float(line.split()[0]) for line in lines[3:]}
    assert per_request["cache.py:match_prefix"] == 1.0 and per_request["cache.py:insert"] == 1.0, out
    python_calls, c_calls = map(float, lines[2].split()[1:])
    assert python_calls > 0 and c_calls > 0, out


def test_policy_cost_times_both_policies_on_the_same_requests(capsys: pytest.CaptureFixture[str]) -> None:
    module = load_script(ROOT / "bench" / "policy_cost.py")
    module.main(["--cells", "chat:0.25:1", "--requests", "40", "--rounds", "1"])
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| chat:0.25:1 |") and out[-1].startswith("adaptive / lru CPU time: median")


def test_policy_memory_bounds_the_adaptive_policys_state() -> None:
    """The default policy's metadata is the index's plus one shadow: at most its key bytes (4 per
    cached token, fewer where it shares the index's) and its nodes and heap (under 2 bytes per token
    on this trace's long edges), measured by tracemalloc after the cache has turned over twice."""
    module = load_script(ROOT / "bench" / "policy_memory.py")  # each policy in a process of its own
    got = {p: module.fresh("tools", p, 16, 1 << 16, 2, "traced") for p in ("lru", "adaptive")}
    assert got["lru"]["cached"] == got["adaptive"]["cached"] > 0.9 * (1 << 16)
    assert got["lru"]["bytes_per_token"] <= got["adaptive"]["bytes_per_token"] <= got["lru"]["bytes_per_token"] + 6, got


def test_sched_sweep_fresh_halves_are_held_on_seeds_of_their_own() -> None:
    """The out-of-sample halves (fresh, fresh2): held's shapes, trace by trace, with seeds no other half draws."""
    halves = load_script(ROOT / "bench" / "sched_sweep.py").TRACES
    shape = lambda spec: {k: v for k, v in spec.items() if k != "seed"}  # noqa: E731
    for half in ("fresh", "fresh2"):
        assert [shape(s) for s in halves[half].values()] == [shape(s) for s in halves["held"].values()]
    seeds = [s["seed"] for half in halves.values() for s in half.values()]
    assert len(seeds) == len(set(seeds)) == 32


def test_sched_sweep_judges_another_schedule_in_autos_place(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--schedule hrrn`: the "auto" columns are hrrn's runs (cached beside fcfs's and lpm's), not auto's."""
    sweep = load_script(ROOT / "bench" / "sched_sweep.py")
    args = ["--half", "tune", "--only", "short-s12", "--requests", "60", "--capacities", "1/4", "--loads", "1.2",
            "--jobs", "1", "--traces-dir", str(tmp_path), "--cache", str(tmp_path / "cache.json")]
    for schedule in ("hrrn", "auto"):
        sweep.main(args + ["--schedule", schedule, "--json", str(tmp_path / f"{schedule}.json")])
    cache = json.loads((tmp_path / "cache.json").read_text())
    assert cache.pop("code") == sweep.code_version()
    assert sorted(k.rsplit("|", 1)[1] for k in cache) == ["fcfs", "hrrn", "lpm"]
    cells = {s: json.loads((tmp_path / f"{s}.json").read_text()) for s in ("hrrn", "auto")}
    assert cells["hrrn"]["schedule"] == "hrrn" and cells["auto"]["schedule"] == "auto"
    hrrn, auto = (cells[s]["cells"][0]["auto"] for s in ("hrrn", "auto"))
    assert hrrn["ttft_mean_s"] == cache["short-s12|1/4|1.2|60|hrrn"]["ttft_mean_s"] != auto["ttft_mean_s"]
    assert "judged: hrrn" in capsys.readouterr().out


def test_sched_sweep_drops_baselines_of_other_sources(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cache made by other radixkv sources (or by none named) is not used: its runs are made again."""
    sweep = load_script(ROOT / "bench" / "sched_sweep.py")
    version = sweep.code_version()
    assert version == sweep.code_version() and len(version) == 16
    changed = tmp_path / "pkg"
    (changed / "sub").mkdir(parents=True)
    (changed / "sub" / "a.py").write_text("x = 1\n")
    before = sweep.code_version(str(changed))
    (changed / "sub" / "a.py").write_text("x = 2\n")
    assert sweep.code_version(str(changed)) != before
    path = tmp_path / "cache.json"
    stale = {"short-s12|1/4|1.2|60|fcfs": {"ttft_mean_s": -1.0}}
    for cached in (stale, {**stale, "code": "0" * 16}):
        path.write_text(json.dumps(cached))
        assert sweep.load_cache(str(path), version) == {"code": version}
        assert "rebuilt" in capsys.readouterr().err
    path.write_text(json.dumps({**stale, "code": version}))
    assert sweep.load_cache(str(path), version) == {**stale, "code": version}


def test_sched_tail_counts_the_later_arrivals_admitted_first(tmp_path) -> None:
    """Under fcfs nobody is passed; under lpm the tail's requests were passed by later arrivals, counted right."""
    tail = load_script(ROOT / "bench" / "sched_tail.py")
    for schedule in ("fcfs", "lpm"):
        sim, out = tail.simulate("short-s12", "1/4", 1.2, schedule, 80, str(tmp_path))
        rows = tail.tail(sim, out, 5)
        assert [r["ttft_s"] for r in rows] == sorted(out.ttft_s.tolist(), reverse=True)[:5]
        for r in rows:
            me = sim.reqs[r["request"]]
            later = [q for q in sim.reqs[r["request"] + 1:] if q.admitted_s < me.admitted_s]
            assert r["passed_by"] == len(later)  # admitted in the same step: not counted as passing
        if schedule == "fcfs":
            assert all(r["passed_by"] == 0 for r in rows)
        else:
            assert any(r["passed_by"] > 0 for r in rows)
