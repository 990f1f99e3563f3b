"""Real RadixCaches publishing their KV events into both index backends: the router's scores must
equal what each engine would actually reuse, through eviction, namespaces, and Redis restarts."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import torch
from redis_fixtures import RedisServer, own_redis, shared_redis  # noqa: F401  (fixtures)

from radixkv import CacheConfig, RadixCache
from radixkv.cluster import InMemoryIndex, KVIndex, Publisher, Router
from radixkv.cluster.redis_index import RedisIndex
from radixkv.events import AllBlocksCleared, BlockStored, block_hashes

BLOCK = 16
_prefixes = itertools.count()


def make_cache(num_slots: int, page_size: int) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=num_slots, page_size=page_size,
                                  max_requests=4, max_context_len=1024, kv_events=True, event_block_size=BLOCK))


def serve(cache: RadixCache, tokens: np.ndarray, namespace: object = None) -> int:
    r = cache.match_prefix(tokens, namespace)
    cache.lock(r.node)
    new = cache.alloc(len(tokens) - r.length)
    cache.insert(tokens, torch.cat([r.slots, new]), namespace)
    cache.unlock(r.node)
    return r.length


def make_index(kind: str, request: pytest.FixtureRequest) -> KVIndex:
    if kind == "memory":
        return InMemoryIndex()
    server: RedisServer = request.getfixturevalue("shared_redis")
    return RedisIndex(server.url, key_prefix=f"pub{next(_prefixes)}:")


def snapshot_blocks(cache: RadixCache) -> set[int]:
    snap = cache.block_snapshot()
    assert isinstance(snap[0], AllBlocksCleared)
    return {h for ev in snap[1:] if isinstance(ev, BlockStored) for h in ev.block_hashes}


@pytest.mark.parametrize("kind", ["memory", "redis"])
@pytest.mark.parametrize("page_size", [16, 4])
def test_router_scores_equal_each_engines_real_match(kind: str, page_size: int, request: pytest.FixtureRequest) -> None:
    rng = np.random.default_rng(page_size)
    index = make_index(kind, request)
    caches = {f"pod-{i}": make_cache(512, page_size) for i in range(3)}  # small: evicts constantly
    pubs = {name: Publisher(name, cache, index) for name, cache in caches.items()}
    router = Router(index, block_size=BLOCK)
    for name in caches:
        router.report_load(name, 0)
    stems = [rng.integers(0, 32000, 160) for _ in range(4)]  # shared prefixes of 10 blocks
    namespaces = [None, "adapter-1"]
    for step in range(60):
        stem = stems[int(rng.integers(4))]
        tokens = np.concatenate([stem[: int(rng.integers(0, 161))], rng.integers(0, 32000, int(rng.integers(1, 80)))])
        ns = namespaces[int(rng.integers(2))]
        name = router.route(tokens, ns).instance if step % 3 else f"pod-{int(rng.integers(3))}"
        serve(caches[name], tokens, ns)
        pubs[name].publish()
        probe = np.concatenate([stems[step % 4], [1, 2, 3]])
        want = {}
        for n, cache in caches.items():
            held = cache.match_prefix(probe, ns).length // BLOCK
            if held:
                want[n] = held
        assert index.lookup(block_hashes(probe, ns, BLOCK)) == want, f"step {step}"
        d = router.route(probe, ns)  # the router hashes the prompt itself, namespace included
        assert d.score == max(want.values(), default=0) and (d.by_load or want[d.instance] == d.score)
    for name, cache in caches.items():  # every block an engine holds is in the index under its name
        blocks = sorted(snapshot_blocks(cache))
        assert all(name in held for held in index.holders(blocks))
    assert all(p.resyncs == 1 and p.failures == 0 for p in pubs.values())


def test_publisher_resyncs_after_a_killed_and_restarted_server(own_redis: RedisServer,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rng = np.random.default_rng(0)
    index = RedisIndex(own_redis.url, key_prefix="pr:", socket_timeout_s=0.5)
    cache = make_cache(1024, 16)
    pub = Publisher("pod-0", cache, index)
    router = Router(index, block_size=BLOCK)
    router.report_load("pod-0", 5)
    router.report_load("pod-1", 0)
    a, b = rng.integers(0, 32000, 320), rng.integers(0, 32000, 320)
    serve(cache, a)
    assert pub.publish() and router.route(a).instance == "pod-0"

    own_redis.kill()
    serve(cache, b)  # its BlockStored events are drained by a publish that fails
    assert pub.publish() is False and pub.needs_resync and pub.failures == 1
    assert pub.publish() is False and pub.failures == 2
    assert router.route(b).instance == "pod-1"  # least loaded while the index is down
    assert sum("pod-0: KV index unavailable" in r.getMessage() for r in caplog.records) == 1

    own_redis.start()
    assert pub.publish() and not pub.needs_resync and pub.resyncs == 2
    assert index.lookup(block_hashes(b, None, BLOCK)) == {"pod-0": 20}  # recovered from the snapshot
    assert router.route(b).instance == "pod-0"

    own_redis.kill()  # a restart the publisher never saw fail: the index says it does not know pod-0
    own_redis.start()
    serve(cache, rng.integers(0, 32000, 64))
    assert pub.publish() and pub.resyncs == 3
    assert index.lookup(block_hashes(a, None, BLOCK)) == {"pod-0": 20}


def test_fleet_keeps_serving_through_an_outage_mid_run(own_redis: RedisServer,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="radixkv.cluster.router")
    rng = np.random.default_rng(1)
    index = RedisIndex(own_redis.url, key_prefix="mid:", socket_timeout_s=0.5)
    caches = {f"pod-{i}": make_cache(1024, 16) for i in range(3)}
    pubs = {name: Publisher(name, cache, index) for name, cache in caches.items()}
    router = Router(index, block_size=BLOCK)
    for name in caches:
        router.report_load(name, 0)
    stems = [rng.integers(0, 32000, 128) for _ in range(3)]
    by_load = []
    for step in range(45):
        if step == 15:
            own_redis.kill()
        if step == 30:
            own_redis.start()
        tokens = np.concatenate([stems[step % 3], rng.integers(0, 32000, 40)])
        d = router.route(tokens)
        by_load.append(d.by_load)
        serve(caches[d.instance], tokens)
        pubs[d.instance].publish()
        router.report_load(d.instance, 0)  # instantly done: only the cache decides
    assert not any(by_load[3:15]) and all(by_load[15:30])  # affinity, then load alone while down
    assert not any(by_load[33:])  # each stem's owner has published again by then
    router_logs = [r for r in caplog.records if r.name == "radixkv.cluster.router"]
    assert [r.levelno for r in router_logs] == [logging.WARNING, logging.INFO]  # outage once, recovery once
    for name, pub in pubs.items():  # idle instances resync on their next publish
        pub.publish()
        assert not pub.needs_resync
        blocks = sorted(snapshot_blocks(caches[name]))
        assert all(name in held for held in index.holders(blocks))
    for stem in stems:
        want = {n: c.match_prefix(stem).length // BLOCK for n, c in caches.items()
                if c.match_prefix(stem).length >= BLOCK}
        assert index.lookup(block_hashes(stem, None, BLOCK)) == want
