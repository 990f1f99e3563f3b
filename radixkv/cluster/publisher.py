"""Publisher: one instance's side of the fleet index. Drains the cache's KV events into a KVIndex.

    pub = Publisher("pod-3", cache, index)   # cache built with CacheConfig(kv_events=True, ...)
    ... serve requests ...
    pub.publish()                            # after each scheduler step, or on a timer

`publish` sends the events queued since the last call as one batch. When the index may have lost
this instance's state (first publish, a failed publish, an index that reports it did not know the
instance, e.g. a Redis server restarted empty or a TTL expired), it sends a resync instead: the
cache's `block_snapshot()` (AllBlocksCleared, then BlockStored for everything cached now). Events
drained by a failed publish are not replayed; the resync that follows covers them.
"""

from __future__ import annotations

import logging
from typing import Protocol

from radixkv.cluster.index import IndexUnavailableError, KVIndex, check_instance_id
from radixkv.events import EventFormatError, KVEvent

log = logging.getLogger(__name__)


class EventSource(Protocol):
    """What a RadixCache with kv_events=True provides."""

    def take_events(self) -> list[KVEvent]: ...

    def block_snapshot(self) -> list[KVEvent]: ...


class Publisher:
    """Moves one instance's KV events into an index and resyncs when continuity is lost."""

    def __init__(self, instance_id: str, source: EventSource, index: KVIndex) -> None:
        self.instance_id = check_instance_id(instance_id)
        self.source, self.index = source, index
        self.needs_resync = True  # the index knows nothing of us yet
        self.resyncs = 0
        self.failures = 0
        self._reachable = True  # for logging each outage once

    def publish(self) -> bool:
        """Send what changed (or a full resync); return False if the index was unreachable, in which
        case the next successful publish resyncs. EventFormatError (from a malformed event of our own
        source) propagates after marking a resync."""
        events = self.source.take_events()
        try:
            if self.needs_resync:
                self._resync()
            elif not self.index.ingest(self.instance_id, events):
                self._resync()  # the index had lost us: the delta just sent was applied to nothing
        except IndexUnavailableError as e:
            if self._reachable:
                log.warning("instance %s: KV index unavailable, will resync when it is back: %s",
                            self.instance_id, e)
            self._reachable = False
            self.needs_resync = True
            self.failures += 1
            return False
        except EventFormatError:
            self.needs_resync = True
            raise
        if not self._reachable:
            log.info("instance %s: KV index reachable again, resynced", self.instance_id)
            self._reachable = True
        return True

    def _resync(self) -> None:
        self.needs_resync = True
        self.index.ingest(self.instance_id, self.source.block_snapshot())
        self.needs_resync = False
        self.resyncs += 1
