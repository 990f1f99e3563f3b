"""The lockstep comparison's moving parts: radixkv's replay stepped chunk by chunk is the replay run
whole; SGLang's harness in --serve mode (where `make sglang` built it) steps its replays to the same
report as a whole run; and a harness that dies, hangs, or answers wrongly is a PeerError with a
clear message, in seconds, its process gone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from radixkv.bench import speed
from radixkv.bench.peer_session import open_session
from radixkv.bench.runner import Replay, replay
from radixkv.bench.sglang_peer import DEFAULT_PYTHON, Peer, PeerError
from radixkv.bench.workloads import make_workload, write_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "radixkv", "bench", "sglang_harness.py")
READY = ('{"sglang_version": "0.0-fake", "torch_version": "0", "requests": 3, '
         '"replays": [["radix", 64], ["unified-rust", 64]]}')


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> tuple[list, str]:
    reqs = make_workload("chat", scale=0.05)
    path = str(tmp_path_factory.mktemp("trace") / "chat.jsonl")
    write_jsonl(reqs, path)
    return reqs, path


@pytest.mark.parametrize(("policy", "page_size"), [("lru", 1), ("adaptive", 16)])
def test_a_replay_stepped_in_chunks_is_the_replay_run_whole(trace, policy: str, page_size: int) -> None:
    reqs, _ = trace
    whole = replay(reqs, 2048, policy, page_size)
    run = Replay(reqs, 2048, policy, page_size)
    spent = [run.step(7) for _ in range(-(-len(reqs) // 7))]
    assert run.done and run.step(7) == 0
    got = run.finish()
    assert (got.requests, got.hit_tokens, got.computed_tokens, got.oom) == (
        len(reqs), whole.hit_tokens, whole.computed_tokens, whole.oom)
    assert got.wall_s == pytest.approx(sum(spent) / 1e9) and all(s > 0 for s in spent)
    assert got.metrics == whole.metrics


def _real_peer() -> Peer:
    peer = Peer(HARNESS, os.path.join(ROOT, DEFAULT_PYTHON))
    if peer.problem() is not None:
        pytest.skip(f"SGLang is not installed here ({peer.problem()}); `make sglang` builds it")
    return peer


def test_the_real_harness_steps_its_replays_to_the_whole_runs_report(trace) -> None:
    reqs, path = trace
    peer = _real_peer()
    backends = speed.PEER_BACKENDS
    whole = peer.run(path, [2048, 4096], 1, "lru", backends=backends)
    with open_session(peer, path, [2048, 4096], 1, "lru", backends, timeout=120) as s:
        assert s.version == whole.version and s.replays == [(b, c) for b in backends for c in (2048, 4096)]
        for _ in range(2):  # a second round after `new` starts from empty caches
            for k in range(-(-len(reqs) // 10)):
                which = [0, 1, 2, 3] if k % 2 else [3, 1]
                ns = s.step(10, which)
                assert len(ns) == len(which) and all(x >= 0 for x in ns)
            s.step(10, [0, 2])  # the replays that skipped chunks are behind: 10 more each
            rest = -(-len(reqs) // 10) // 2 * 10
            s.step(rest, [0, 2])
            got = s.report()
            assert [(r.backend, r.capacity, r.hit_rate) for r in got.results] == [
                (r.backend, r.capacity, r.hit_rate) for r in whole.results]
            s.new()
        with pytest.raises(PeerError, match="no replay 9"):
            s.step(1, [9])


def test_lockstep_gives_every_name_a_rate_and_a_ratio_per_capacity(trace) -> None:
    reqs, path = trace
    version, rounds = speed.lockstep(_real_peer(), reqs, path, [2048, 4096], 1, ("lru", "adaptive"), 2, chunk=8)
    assert version and len(rounds) == 2 and all(len(r) == 2 for r in rounds)
    names = {"radixkv lru", "radixkv adaptive", "SGLang RadixCache", "SGLang Rust core"}
    assert all(set(row) == names and min(row.values()) > 0 for r in rounds for row in r)


def _fake(tmp_path, body: str) -> Peer:
    """A harness script that speaks the --serve protocol wrongly, run by this interpreter."""
    script = tmp_path / "fake_harness.py"
    script.write_text(textwrap.dedent(f"""\
        import sys, time
        print({READY!r}, flush=True)
        for line in sys.stdin:
        {textwrap.indent(textwrap.dedent(body), '    ')}
        """))
    return Peer(str(script), sys.executable)


@pytest.fixture(autouse=True)
def _subprocess_only(request, monkeypatch) -> None:
    if "fake" in request.node.name:  # the fakes run as a subprocess even where sglang imports here
        monkeypatch.setattr(Peer, "in_process", staticmethod(lambda: False))


@pytest.mark.parametrize(("body", "message"), [
    ("sys.exit('the fake blew up')", r"exited with 1 before answering 'step 5 0 1'.*the fake blew up"),
    ("print('hello there', flush=True)", r"answered 'step 5 0 1' with b?'hello there', not JSON"),
    ("print('{\"ns\": [5]}', flush=True)", r"answered 'step 5 0 1' with '\[5\]', not 2 nanosecond counts"),
    ("print('{\"ns\": [5, -1]}', flush=True)", r"not 2 nanosecond counts"),
    ("print('[1, 2]', flush=True)", r"not a JSON object with 'ns'"),
    ("time.sleep(60)", r"did not answer 'step 5 0 1' within 2 s; killed it"),
])
def test_a_fake_harness_that_misbehaves_is_a_peer_error_in_seconds(tmp_path, trace, body: str, message: str) -> None:
    peer = _fake(tmp_path, body)
    t0 = time.monotonic()
    with open_session(peer, trace[1], [64], 1, "lru", speed.PEER_BACKENDS, timeout=2) as s:
        assert s.version == "0.0-fake"
        with pytest.raises(PeerError, match=message):
            s.step(5, [0, 1])
    assert time.monotonic() - t0 < 15


def test_a_fake_harness_that_never_starts_or_dies_at_once_is_a_peer_error(tmp_path, trace) -> None:
    script = tmp_path / "fake_harness.py"
    script.write_text("import time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    with pytest.raises(PeerError, match=r"did not answer '\(start\)' within 1 s"):
        open_session(Peer(str(script), sys.executable), trace[1], [64], timeout=1)
    script.write_text("import sys\nsys.exit('no sglang in this one')\n")
    with pytest.raises(PeerError, match=r"exited with 1 before answering '\(start\)'.*no sglang in this one"):
        open_session(Peer(str(script), sys.executable), trace[1], [64], timeout=5)
    assert time.monotonic() - t0 < 15
    with pytest.raises(PeerError, match="no-such-python"):
        open_session(Peer(str(script), str(tmp_path / "no-such-python")), trace[1], [64])


def test_a_fake_harness_dying_mid_comparison_fails_speed_compare(tmp_path, trace) -> None:
    reqs, path = trace
    peer = _fake(tmp_path, "sys.exit('died in the middle')")
    with pytest.raises(PeerError, match="died in the middle"):
        speed.compare(peer, reqs, path, [64], 1, ("lru",), 2, timeout=5)


def test_the_in_process_path_steps_the_same_harness(tmp_path, trace) -> None:
    """Where `import sglang` works in radixkv's own interpreter the session runs the harness in-process:
    simulated by putting .venv-sglang's packages behind this interpreter's (same Python and torch)."""
    _real_peer()
    py = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = os.path.join(ROOT, ".venv-sglang", "lib", py, "site-packages")
    if not os.path.isdir(site):
        pytest.skip(f".venv-sglang is not a {py} venv")
    script = tmp_path / "in_process.py"
    script.write_text(textwrap.dedent(f"""\
        from radixkv.bench import speed
        from radixkv.bench.peer_session import open_session
        from radixkv.bench.sglang_peer import Peer
        from radixkv.bench.workloads import make_workload
        peer = Peer({HARNESS!r}, "no-interpreter-needed")
        assert Peer.in_process() and peer.problem() is None
        with open_session(peer, {trace[1]!r}, [2048], 1, "lru", speed.PEER_BACKENDS) as s:
            assert s.where == "in-process" and len(s.step(10, [0, 1])) == 2
        _, rounds = speed.lockstep(peer, make_workload("chat", scale=0.05), {trace[1]!r}, [2048], 1, ("lru",), 1)
        print("in-process ok", sorted(rounds[0][0]))
        """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, site]))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert "in-process ok" in out.stdout, out.stderr[-3000:]
