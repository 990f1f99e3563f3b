"""Publisher -> RedisIndex -> Router against a real redis-server that misbehaves: out of memory under
maxmemory, a read-only replica after a failover, a value of the wrong type at a block key, TTLs
on blocks an instance still holds, ZMQ feeding Redis through an outage. In every case no exception
reaches the caller, the counters say what happened, and the index ends equal to the cache."""

from __future__ import annotations

import itertools
import time

import numpy as np
import torch
from redis_fixtures import RedisServer, own_redis, shared_redis  # noqa: F401  (fixtures)

from radixkv import CacheConfig, RadixCache
from radixkv.cluster import Publisher, Router, ZmqPublisher, ZmqSubscriber, kv_topic
from radixkv.cluster.redis_index import RedisIndex
from radixkv.events import BlockStored, block_hashes

BS = 16
_prefixes = itertools.count()


def make_cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=4096, page_size=16,
                                  kv_events=True, event_block_size=BS))


def serve(cache: RadixCache, toks: np.ndarray) -> None:
    r = cache.match_prefix(toks)
    cache.insert(toks, torch.cat([r.slots, cache.alloc(len(toks) - r.length)]))


def held(index: RedisIndex, cache: RadixCache, name: str) -> bool:
    """Every block the cache holds is in the index under `name`, and nothing else is."""
    want = {h for e in cache.block_snapshot() if isinstance(e, BlockStored) for h in e.block_hashes}
    members = index.client.smembers(f"{index.key_prefix}i:{name}")
    return {int(m.split(b":")[1], 16) for m in members} == want and all(name in x for x in index.holders(sorted(want)))


def test_out_of_memory_is_counted_and_resynced(own_redis: RedisServer) -> None:
    rng, cache = np.random.default_rng(0), make_cache()
    index = RedisIndex(own_redis.url, key_prefix="oom:")
    pub = Publisher("pod-0", cache, index)
    serve(cache, rng.integers(0, 32000, 320))
    assert pub.publish()
    used = index.client.info("memory")["used_memory"]
    index.client.config_set("maxmemory", used + 1024)  # noeviction: writes past this fail with OOM
    results = []
    for _ in range(5):  # no exception; a refused batch makes the next publish a resync (which may fit
        serve(cache, rng.integers(0, 32000, 1600))  # after its AllBlocksCleared freed memory)
        results.append(pub.publish())
    assert False in results and pub.failures == results.count(False) == index.stats().server_errors
    index.client.config_set("maxmemory", 0)
    assert pub.publish() and held(index, cache, "pod-0")


def test_a_read_only_replica_after_failover(own_redis: RedisServer) -> None:
    rng, cache = np.random.default_rng(1), make_cache()
    index = RedisIndex(own_redis.url, key_prefix="ro:")
    pub, router = Publisher("pod-0", cache, index), Router(index, block_size=BS)
    router.report_load("pod-0", 3)
    router.report_load("pod-1", 0)
    a = rng.integers(0, 32000, 320)
    serve(cache, a)
    assert pub.publish()
    index.client.execute_command("REPLICAOF", "127.0.0.1", "1")  # now a replica of nothing: READONLY
    try:
        serve(cache, rng.integers(0, 32000, 320))
        assert pub.publish() is False and pub.failures == 1
        assert router.route(a).instance == "pod-0"  # reads still work on a replica
    finally:
        index.client.execute_command("REPLICAOF", "NO", "ONE")
    assert pub.publish() and held(index, cache, "pod-0")


def test_a_wrong_type_at_a_block_key_neither_breaks_routing_nor_ingest(shared_redis: RedisServer) -> None:
    rng, cache = np.random.default_rng(2), make_cache()
    p = f"wt{next(_prefixes)}:"
    index = RedisIndex(shared_redis.url, key_prefix=p)
    router = Router(index, block_size=BS)
    router.report_load("pod-0", 0)
    a = rng.integers(0, 32000, 160)
    h = block_hashes(a, None, BS)
    index.client.set(f"{p}b:{h[0]:x}", "not a set")
    index.client.lpush(f"{p}i:pod-0", "nor this")
    assert router.route(a).by_load and router.stats.index_errors == 0
    pub = Publisher("pod-0", cache, index)
    serve(cache, a)
    assert pub.publish() and held(index, cache, "pod-0")
    assert router.route(a).score == 10


def test_blocks_still_held_never_expire_while_the_instance_publishes(shared_redis: RedisServer) -> None:
    rng, cache = np.random.default_rng(3), make_cache()
    index = RedisIndex(shared_redis.url, key_prefix=f"ttl{next(_prefixes)}:", ttl_s=1)
    pub = Publisher("pod-0", cache, index)
    hot = rng.integers(0, 32000, 320)  # a system prompt: stored once, then only hit
    serve(cache, hot)
    assert pub.publish()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.5:  # 2.5 TTLs of publishing without touching the hot blocks
        serve(cache, np.concatenate([hot, rng.integers(0, 32000, 16)]))
        assert pub.publish()
        time.sleep(0.05)  # the scheduler's step time; there is nothing to wait for
    assert index.lookup(block_hashes(hot, None, BS)) == {"pod-0": 20} and pub.resyncs == 1


def test_zmq_into_redis_through_a_server_restart(own_redis: RedisServer) -> None:
    rng, cache = np.random.default_rng(4), make_cache()
    index = RedisIndex(own_redis.url, key_prefix="zr:", socket_timeout_s=0.5)
    pub = ZmqPublisher(cache, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", topic=kv_topic("pod-0", "m"))
    pub.start(0.002)
    sub = ZmqSubscriber(index, sync_interval_s=0.2, replay_timeout_s=0.5)
    sub.connect(pub.endpoint, pub.replay_endpoint)
    own_redis.kill()
    for _ in range(5):
        serve(cache, rng.integers(0, 32000, 200))
        pub.publish()
        sub.poll(0.02)  # the index refuses: counted, the stream waits for a resync
    assert sub.stats.index_errors >= 1
    own_redis.start()
    t0 = time.monotonic()
    while not held(index, cache, "pod-0"):
        assert time.monotonic() - t0 < 5.0
        sub.poll(0.02)
    sub.close()
    pub.close()
