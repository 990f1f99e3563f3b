"""Fleet-wide KV-cache-aware routing: which instance holds which prefix, and where to send a request.

    index = InMemoryIndex()                    # or RedisIndex("redis://host:6379/0") shared by the fleet
    Publisher("pod-0", cache, index).publish() # each instance, after each step
    router = Router(index, block_size=16)      # block_size = the caches' event_block_size
    router.report_load("pod-0", open_requests=3)
    router.route(prompt_tokens).instance       # -> "pod-0"

RedisIndex needs the `redis` extra (redis-py); it is imported on first use, so the rest works
without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from radixkv.cluster.index import IndexStats, IndexUnavailableError, InMemoryIndex, KVIndex, longest_prefix
from radixkv.cluster.publisher import Publisher
from radixkv.cluster.router import SCORERS, RouteDecision, Router, RouterStats
from radixkv.cluster.zmq_publisher import ZmqPublisher, kv_topic
from radixkv.cluster.subscriber_stats import SubscriberStats
from radixkv.cluster.zmq_subscriber import ZmqSubscriber

if TYPE_CHECKING:
    from radixkv.cluster.redis_index import RedisIndex

__all__ = ["KVIndex", "InMemoryIndex", "RedisIndex", "IndexStats", "IndexUnavailableError", "Router",
           "RouteDecision", "RouterStats", "SCORERS", "Publisher", "longest_prefix", "ZmqPublisher", "ZmqSubscriber",
           "SubscriberStats", "kv_topic"]


def __getattr__(name: str) -> Any:
    if name == "RedisIndex":
        from radixkv.cluster.redis_index import RedisIndex

        return RedisIndex
    raise AttributeError(f"module 'radixkv.cluster' has no attribute {name!r}")
