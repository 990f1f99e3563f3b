"""SGLang's replays kept alive and stepped chunk by chunk: the peer side of radixkv.bench.speed's lockstep.

`open_session(peer, trace, ...)` starts the harness (radixkv/bench/sglang_harness.py) in its --serve
mode, in a subprocess of SGLang's interpreter, or in this process when `import sglang` works here;
either way its own `command()` answers (one JSON line a command in the subprocess). `step(count,
which)` serves the next `count` requests of the trace in the listed replays and returns the
nanoseconds each spent inside its cache's calls. Every answer from the subprocess must come within
`timeout` seconds and be the JSON it should be; else the harness is killed and PeerError says what
went wrong (it died: its exit status and the end of its stderr; it hung; it printed something else).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import subprocess
import tempfile
import time

from radixkv.bench.sglang_peer import Peer, PeerError, PeerRun, report_of


class Session:
    """The harness's replays (backend-major, then capacity), as `replays` lists them."""

    def __init__(self, ask, close, where: str) -> None:  # noqa: ANN001 - callables
        self._ask, self._close, self.where = ask, close, where
        first = self._checked("(start)", self._ask(None), "replays")
        self.version = str(first["sglang_version"])
        self.replays: list[tuple[str, int]] = [(str(b), int(c)) for b, c in first["replays"]]

    def _checked(self, cmd: str | None, reply: object, key: str) -> dict:
        if not isinstance(reply, dict) or key not in reply:
            raise PeerError(f"the SGLang harness answered {cmd!r} with {str(reply)[:300]!r}, not a JSON object "
                            f"with {key!r}")
        return reply

    def new(self) -> None:
        """Fresh replays (empty caches, zero times)."""
        self._checked("new", self._ask("new"), "replays")

    def step(self, count: int, which: list[int]) -> list[int]:
        """Serve the next `count` requests in each replay of `which`: nanoseconds inside the cache's calls."""
        cmd = f"step {count} " + " ".join(map(str, which))
        ns = self._checked(cmd, self._ask(cmd), "ns")["ns"]
        if not isinstance(ns, list) or len(ns) != len(which) or not all(type(x) is int and x >= 0 for x in ns):
            raise PeerError(f"the SGLang harness answered {cmd!r} with {str(ns)[:300]!r}, not {len(which)} "
                            "nanosecond counts")
        return ns

    def report(self) -> PeerRun:
        """Each replay's hit rate and requests/s so far, after the harness's leak check; `new` before
        the next step."""
        rep = self._checked("report", self._ask("report"), "results")
        try:
            run = report_of(rep, self.where)
        except (ValueError, KeyError, TypeError) as e:
            raise PeerError(f"the SGLang harness printed no readable report ({e}): {str(rep)[:300]!r}") from e
        if not all(r.get("leak_free", False) for r in rep["results"]):
            raise PeerError("the SGLang harness leaked slots (the harness is wrong)")
        return run

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_session(peer: Peer, trace: str, capacities: list[int], page_size: int = 1, policy: str = "lru",
                 backends: tuple[str, ...] = ("radix",), timeout: float = 600.0, clock: str = "wall") -> Session:
    """SGLang's `backends` at each of `capacities` on `trace`, kept alive; a Session (close it). `clock`:
    what the harness times its calls with, "wall" (time.perf_counter_ns) or "cpu" (time.thread_time_ns).
    Raises PeerError."""
    if (why := peer.problem()) is not None:
        raise PeerError(why)
    if peer.in_process():
        mod = peer.load()
        with contextlib.redirect_stdout(io.StringIO()):
            ns = mod.import_sglang()
        stepper = mod.Stepper(ns, *mod.load_trace(trace), list(backends), list(capacities), page_size, policy,
                              clock)

        def ask(cmd: str | None) -> dict:
            try:
                return mod.command(stepper, cmd or "new")
            except ValueError as e:
                raise PeerError(f"the SGLang harness refused {cmd!r}: {e}") from e

        return Session(ask, lambda: None, "in-process")
    argv = [peer.python, peer.harness, trace, "--serve", "--backend", ",".join(backends), "--capacity",
            ",".join(map(str, capacities)), "--page-size", str(page_size), "--eviction-policy", policy,
            "--clock", clock]
    pipe = _Pipe(argv, timeout)
    try:
        return Session(pipe.ask, pipe.close, peer.python)
    except BaseException:
        pipe.close()
        raise


class _Pipe:
    """The harness in a subprocess: a command a line on its stdin, one JSON line back on its stdout."""

    def __init__(self, argv: list[str], timeout: float) -> None:
        self.timeout, self.buf = timeout, b""
        self.err = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        except OSError as e:
            self.err.close()
            raise PeerError(f"{' '.join(argv[:2])}: {e}") from e

    def ask(self, cmd: str | None) -> dict:
        if cmd is not None:
            try:
                self.proc.stdin.write(cmd.encode() + b"\n")
                self.proc.stdin.flush()
            except OSError:
                self._died(cmd)
        line = self._line(cmd)
        try:
            return json.loads(line)
        except ValueError:
            self.close(kill=True)
            raise PeerError(f"the SGLang harness answered {cmd or '(start)'!r} with {line[:300]!r}, not JSON") from None

    def _line(self, cmd: str | None) -> bytes:
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + self.timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close(kill=True)
                raise PeerError(f"the SGLang harness did not answer {cmd or '(start)'!r} within {self.timeout:g} s; "
                                "killed it")
            got = os.read(fd, 1 << 16)
            if not got:
                self._died(cmd)
            self.buf += got
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _died(self, cmd: str | None) -> None:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        self.err.seek(0)
        tail = self.err.read().decode(errors="replace")[-2000:]
        self.close(kill=True)
        raise PeerError(f"the SGLang harness exited with {rc} before answering {cmd or '(start)'!r}: {tail}")

    def close(self, kill: bool = False) -> None:
        """End of input ends the harness; `kill`, or no exit within 10 s, kills it."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=0 if kill else 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.err):
            with contextlib.suppress(OSError):
                f.close()
