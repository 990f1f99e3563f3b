"""Publisher: one instance's side of a shared KVIndex (in memory or Redis). Drains the cache's KV
events into the index and resyncs whenever continuity may have been lost.

    pub = Publisher("pod-3", cache, index)   # cache built with CacheConfig(kv_events=True, ...)
    ... serve requests ...
    pub.publish()                            # after each scheduler step, on the cache's thread

`publish` sends the events queued since the last call as one batch. When the index may have lost
this instance's state (first publish, a failed publish, an index that reports it did not know the
instance, e.g. a Redis server restarted empty or a TTL expired), it sends a resync instead: the
cache's `block_snapshot()` (AllBlocksCleared, then BlockStored for everything cached now). Events
drained by a failed publish are not replayed; the resync that follows covers them.

Nothing reaches the caller: an unreachable index or one that refuses writes (Redis OOM under
maxmemory, READONLY after a failover) is counted in `failures` and logged once per outage, and the
next publish resyncs; an event batch the index rejects as malformed (a bug) is counted in
`rejected` and resynced. With an index TTL (RedisIndex(ttl_s=...)), the instance's keys get their
TTL again at least every ttl_s / 3 seconds of publishing, so blocks it still holds never expire.
Bound: the index equals the cache after the first successful publish that follows the fault.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from radixkv.cluster.index import IndexUnavailableError, KVIndex, check_instance_id
from radixkv.errors import ConfigError
from radixkv.events import EventFormatError, KVEvent

log = logging.getLogger(__name__)


class EventSource(Protocol):
    """What a RadixCache with kv_events=True provides."""

    def take_events(self) -> list[KVEvent]: ...

    def block_snapshot(self) -> list[KVEvent]: ...


class Publisher:
    """Moves one instance's KV events into an index and resyncs when continuity is lost."""

    def __init__(self, instance_id: str, source: EventSource, index: KVIndex) -> None:
        config = getattr(source, "config", None)
        if config is not None and not getattr(config, "kv_events", False):
            raise ConfigError(f"instance {instance_id!r}: the cache was built without kv_events=True, so it "
                              "records no events and the index would never learn of its blocks")
        self.instance_id = check_instance_id(instance_id)
        if not all(callable(getattr(source, m, None)) for m in ("take_events", "block_snapshot")):
            raise ConfigError(f"Publisher source must be a RadixCache with kv_events=True, got {type(source).__name__}")
        if not callable(getattr(index, "ingest", None)):
            raise ConfigError("Publisher index must be a KVIndex (InMemoryIndex, RedisIndex), "
                              f"got {type(index).__name__}")
        self.source, self.index = source, index
        self.needs_resync = True  # the index knows nothing of us yet
        self.resyncs = self.failures = self.rejected = 0
        self._reachable = True  # for logging each outage once
        ttl = getattr(index, "ttl_s", None)
        self._refresh_every = ttl / 3 if ttl else None
        self._refreshed = time.monotonic()

    def publish(self) -> bool:
        """Send what changed (or a full resync); return False if the index did not take it, in which
        case the next publish resyncs. Never raises for an index fault."""
        events = self.source.take_events()
        try:
            if self.needs_resync:
                self._resync()
            elif not self.index.ingest(self.instance_id, events):
                self._resync()  # the index had lost us: the delta just sent was applied to nothing
            self._refresh_ttl()
        except IndexUnavailableError as e:
            if self._reachable:
                log.warning("instance %s: KV index unavailable, will resync when it is back: %s", self.instance_id, e)
            self._reachable = False
            self.needs_resync = True
            self.failures += 1
            return False
        except EventFormatError as e:
            log.error("instance %s: the index rejected our own events (%s); resyncing", self.instance_id, e)
            self.needs_resync = True
            self.rejected += 1
            return False
        if not self._reachable:
            log.info("instance %s: KV index reachable again, resynced", self.instance_id)
            self._reachable = True
        return True

    def _resync(self) -> None:
        self.needs_resync = True
        self.index.ingest(self.instance_id, self.source.block_snapshot())
        self.needs_resync = False
        self.resyncs += 1
        self._refreshed = time.monotonic()  # every key was just written with a fresh TTL

    def _refresh_ttl(self) -> None:
        if self._refresh_every is not None and time.monotonic() - self._refreshed >= self._refresh_every:
            self.index.refresh(self.instance_id)  # type: ignore[attr-defined]  (RedisIndex)
            self._refreshed = time.monotonic()
