"""No ValueError, TypeError, IndexError, AttributeError or assert escapes a public call of
radixkv.cluster (issue 19 item 14): every public method, given each hostile argument, either works or
raises a RadixKVError, and a failed call leaves the index as it was."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from redis_fixtures import RedisServer, shared_redis  # noqa: F401  (fixtures)

from radixkv import CacheConfig, RadixCache
from radixkv.cluster import InMemoryIndex, Publisher, Router, ZmqSubscriber
from radixkv.cluster.redis_index import RedisIndex
from radixkv.errors import RadixKVError
from radixkv.events import BlockStored, block_hashes

BAD: list[Any] = [None, "", "x", -1, 1.5, True, 2**70, [1], [[1]], ["x"], {"a": 1}, b"x", object(), (1, "a"),
                  np.int64(3), [-1], [2**64], "pod,1", float("nan")]
TOKENS = list(range(1, 33))


def calls(index: Any) -> dict[str, Callable[[Any], Any]]:
    router = Router(index, block_size=4)
    router.report_load("pod-0", 0)
    sub = ZmqSubscriber(index)
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=64, page_size=4,
                                   kv_events=True, event_block_size=4))
    return {
        "index.ingest(x, [])": lambda x: index.ingest(x, []),
        "index.ingest(pod, x)": lambda x: index.ingest("pod-0", x),
        "index.ingest(pod, [x])": lambda x: index.ingest("pod-0", [x]),
        "index.holders(x)": index.holders,
        "index.lookup(x)": index.lookup,
        "index.drop_instance(x)": index.drop_instance,
        "Router(index, block_size=x)": lambda x: Router(index, block_size=x),
        "Router(index, scorer=x)": lambda x: Router(index, scorer=x),
        "Router(index, load_slack=x)": lambda x: Router(index, load_slack=x),
        "Router(index, event_hash=x)": lambda x: Router(index, event_hash=x),
        "Router(x)": Router,
        "router.report_load(x, 0)": lambda x: router.report_load(x, 0),
        "router.report_load(pod, x)": lambda x: router.report_load("pod-0", x),
        "router.remove_instance(x)": router.remove_instance,
        "router.route(x)": router.route,
        "router.route(tokens, x)": lambda x: router.route(TOKENS, x),
        "router.route(tokens, extra_keys=x)": lambda x: router.route(TOKENS, extra_keys=x),
        "router.report_hit(x, 1)": lambda x: router.report_hit(x, 1),
        "router.report_hit(1, x)": lambda x: router.report_hit(1, x),
        "router.prometheus(x)": router.prometheus,
        "Publisher(x, cache, index)": lambda x: Publisher(x, cache, index),
        "Publisher(pod, x, index)": lambda x: Publisher("pod-0", x, index),
        "Publisher(pod, cache, x)": lambda x: Publisher("pod-0", cache, x),
        "sub.poll(x)": sub.poll,
        "sub.poll(0, x)": lambda x: sub.poll(0, x),
        "sub.prometheus(x)": sub.prometheus,
        "ZmqSubscriber(index, replay_timeout_s=x)": lambda x: ZmqSubscriber(index, replay_timeout_s=x),
        "ZmqSubscriber(index, max_topics=x)": lambda x: ZmqSubscriber(index, max_topics=x),
    }


def check_all(index: Any) -> None:
    h = block_hashes(TOKENS, None, 4)
    index.ingest("pod-0", [BlockStored(h, None, TOKENS, 4)])
    before = index.lookup(h)
    escaped = []
    for name, call in calls(index).items():
        for x in BAD:
            try:
                call(x)
            except RadixKVError:
                pass
            except Exception as e:  # noqa: BLE001 (what the test is looking for)
                escaped.append(f"{name} with {x!r:.30}: {type(e).__name__}: {e}"[:160])
            if name != "index.drop_instance(x)" and not name.startswith("index.ingest"):
                assert index.lookup(h) == before, name
    assert not escaped, "\n".join(escaped)


def test_in_memory_index_and_router() -> None:
    check_all(InMemoryIndex())


def test_redis_index_and_router(shared_redis: RedisServer) -> None:
    check_all(RedisIndex(shared_redis.url, key_prefix="fuzz:"))
