"""Redis index and router against bad ids and foreign data on a real redis-server (issue 19 item 12):
instance ids are validated with their allowed characters, members that are not "medium:instance"
are skipped and counted (a route never fails on them), and dropping an instance is one atomic call."""

from __future__ import annotations

import numpy as np
import pytest
from redis_fixtures import RedisServer, shared_redis  # noqa: F401  (fixtures)

from radixkv.cluster import Router
from radixkv.cluster.redis_index import RedisIndex
from radixkv.errors import ConfigError, InvalidArgumentError
from radixkv.events import BlockStored, block_hashes

BS = 4
TOKENS = np.random.default_rng(3).integers(0, 32000, 5 * BS).tolist()


def stored(tokens: list[int]) -> BlockStored:
    h = block_hashes(tokens, None, BS)
    return BlockStored(h, None, tokens[: len(h) * BS], BS)


@pytest.mark.parametrize("bad", ["pod,1", "pod:1", "kv@pod", "pod 1", "pöd", "", "x" * 254, 7, None])
def test_instance_ids_outside_the_allowed_characters_are_refused(shared_redis: RedisServer, bad: object) -> None:
    index = RedisIndex(shared_redis.url, key_prefix="ids:")
    with pytest.raises(InvalidArgumentError, match="instance_id"):
        index.ingest(bad, [stored(TOKENS)])  # type: ignore[arg-type]
    router = Router(index, block_size=BS)
    with pytest.raises(InvalidArgumentError, match="instance_id"):
        router.report_load(bad, 0)  # type: ignore[arg-type]
    ok = "pod-1.zone_a/b"
    index.ingest(ok, [stored(TOKENS)])
    router.report_load(ok, 0)
    assert router.route(TOKENS).instance == ok and index.lookup(block_hashes(TOKENS, None, BS)) == {ok: 5}


def test_malformed_members_are_skipped_and_counted_never_failing_a_route(shared_redis: RedisServer) -> None:
    index = RedisIndex(shared_redis.url, key_prefix="junk:")
    index.ingest("pod-0", [stored(TOKENS)])
    h = block_hashes(TOKENS, None, BS)
    for junk in ("garbage", "GPU:pod,1", "XPU:pod-9", ":pod-9", "GPU:"):
        index.client.sadd(f"junk:b:{h[0]:x}", junk)  # written by something that is not this index
    index.client.sadd("junk:i:pod-0", "no-colon")
    router = Router(index, block_size=BS)
    router.report_load("pod-0", 5)
    router.report_load("pod-1", 0)
    d = router.route(TOKENS)
    assert (d.instance, d.score) == ("pod-0", 5)
    assert index.stats().malformed_members == 5  # "GPU:pod,1" reads as a holder "pod" and a malformed "1"
    index.ingest("pod-0", [stored(TOKENS[:BS])])  # publish and resync keep working over the junk
    index.drop_instance("pod-0")
    assert index.lookup(h) == {"pod": 1}  # only the foreign member is left


def test_dropping_an_instance_is_one_atomic_call(shared_redis: RedisServer) -> None:
    index = RedisIndex(shared_redis.url, key_prefix="drop:")
    assert index.ingest("pod-0", [stored(TOKENS)]) is False
    calls = lambda: index.client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)  # noqa: E731
    before = calls()
    index.drop_instance("pod-0")
    assert calls() - before == 1  # blocks and marker in one script: never a marker over cleared state
    assert index.lookup(block_hashes(TOKENS, None, BS)) == {}
    assert index.ingest("pod-0", [stored(TOKENS)]) is False  # told to resync: the marker went too
    assert not [k for k in index.client.scan_iter(match="drop:*")
                if not k.startswith((b"drop:b:", b"drop:i:", b"drop:k:"))]


@pytest.mark.parametrize("kw", [{"ttl_s": 0}, {"max_hashes_per_call": "8"}, {"key_prefix": 3},
                                {"socket_timeout_s": -1}, {"url": "http://x"}, {"url": 5}])
def test_bad_options_are_config_errors(kw: dict) -> None:
    with pytest.raises(ConfigError):
        RedisIndex(**kw)
