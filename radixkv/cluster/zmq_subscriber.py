"""ZmqSubscriber: the router's side of the wire. Feeds a KVIndex from ZmqPublishers (or vLLM's).

    sub = ZmqSubscriber(index)
    sub.connect("tcp://10.0.0.3:5557", "tcp://10.0.0.3:5558")   # one call per instance
    while serving: sub.poll(timeout_s=0.01); router.route(...)

Each message's topic names the instance (`kv@<instance>@<model>`, or `connect(..., instance=...)`).
Per (connection, topic) the subscriber keeps the next sequence number it needs and the
publisher's id, and converges to what the publisher has sent:

    seq == expected            apply, expected += 1
    seq <  expected            a duplicate (replayed already): skipped
    seq >  expected            a gap (batches dropped): replay from `expected` over the DEALER
    another publisher id       the publisher restarted (its numbers restart at 0): replay from 0;
                               batches of the old id still in flight are skipped from then on
    a batch that starts with   a snapshot (the publisher's seq 0, or its answer to a replay it
      AllBlocksCleared         could not serve from its ring): applied whatever its number

`connect` asks for a replay from 0 at once, so a subscriber that joins late learns everything the
instance holds without waiting for traffic, and every `sync_interval_s` each stream asks for a
replay from `expected` (answered by just the end marker when nothing is missing), so a batch lost
just before an instance went idle is recovered too. Bound: the index holds what a reachable
publisher has sent within `sync_interval_s` + one replay round trip (`replay_timeout_s` at most).
A malformed payload (counted) is never applied; its stream asks for a snapshot. An index that cannot
be written (IndexUnavailableError) leaves the stream unsynced until a later replay succeeds.
No exception from the network, the payloads or the index reaches the caller of `poll`.
Not thread-safe: call `poll` from the thread that also reads an InMemoryIndex. Needs `events`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, fields
from typing import Any

from radixkv.cluster.index import IndexUnavailableError, KVIndex, check_instance_id
from radixkv.cluster.zmq_replay import END_SEQ
from radixkv.errors import InvalidArgumentError
from radixkv.events import AllBlocksCleared, EventFormatError
from radixkv.metrics import prometheus_family

log = logging.getLogger(__name__)
_FUTURE = (1 << 63) - 1  # a replay from here is always answered with a snapshot


@dataclass
class SubscriberStats:
    batches: int = 0  # batches applied to the index
    duplicates: int = 0  # batches skipped, already applied
    gaps: int = 0  # times a sequence gap was seen
    missed: int = 0  # batches those gaps skipped over
    replays: int = 0  # replay requests sent
    replay_failures: int = 0  # replays with no end marker within replay_timeout_s
    snapshots: int = 0  # snapshot batches applied (resyncs)
    restarts: int = 0  # publisher restarts seen (a new publisher id)
    malformed: int = 0  # messages or payloads rejected
    index_errors: int = 0  # batches the index could not take


_HELP = {
    "batches": "KV event batches applied to the index.",
    "duplicates": "Batches skipped because they were already applied.",
    "gaps": "Sequence gaps seen (batches dropped on the way).",
    "missed": "Batches skipped over by those gaps (recovered by replay).",
    "replays": "Replay requests sent to publishers.",
    "replay_failures": "Replays that got no end marker in time.",
    "snapshots": "Snapshot batches applied (full resyncs of an instance).",
    "restarts": "Publisher restarts seen (a new publisher id).",
    "malformed": "Messages or payloads rejected as malformed (never applied).",
    "index_errors": "Batches the index could not take (the stream resyncs later).",
}


@dataclass
class _Stream:
    instance: str
    expected: int | None = None  # next sequence number wanted; None: not synced
    publisher_id: int | None = None
    retired: set[int] = field(default_factory=set)  # ids of publishers that restarted since
    next_check: float = 0.0


@dataclass
class _Source:
    sub: Any
    dealer: Any
    instance: str | None
    streams: dict[bytes, _Stream] = field(default_factory=dict)


class ZmqSubscriber:
    """Subscribes to ZmqPublishers and applies their batches to `index` losslessly."""

    def __init__(self, index: KVIndex, *, replay_timeout_s: float = 1.0, sync_interval_s: float = 1.0,
                 topic_filter: str = "", rcvhwm: int = 100_000) -> None:
        for name, v in (("replay_timeout_s", replay_timeout_s), ("sync_interval_s", sync_interval_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
                raise InvalidArgumentError(f"{name} must be a number of seconds in (0, 3600], got {v!r}")
        import zmq

        from radixkv.events.wire import decode_batch

        self._zmq, self._decode = zmq, decode_batch
        self.index, self.replay_timeout_s, self.sync_interval_s = index, replay_timeout_s, sync_interval_s
        self.topic_filter, self.rcvhwm = topic_filter.encode(), rcvhwm
        self._ctx = zmq.Context.instance()
        self._poller = zmq.Poller()
        self._sources: dict[Any, _Source] = {}
        self.stats = SubscriberStats()

    def connect(self, endpoint: str, replay_endpoint: str | None = None, instance: str | None = None) -> None:
        """Subscribe to one publisher (and its replay socket: without it, lost batches stay lost).
        `instance` names it when its topic does not (`kv@<instance>@<model>`). Asks for its state now."""
        if instance is not None:
            check_instance_id(instance)
        zmq = self._zmq
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, self.topic_filter)
        sub.setsockopt(zmq.RCVHWM, self.rcvhwm)
        sub.connect(endpoint)
        dealer = None
        if replay_endpoint is not None:
            dealer = self._ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(replay_endpoint)
        source = self._sources[sub] = _Source(sub, dealer, instance)
        self._poller.register(sub, zmq.POLLIN)
        self._replay(source, 0)

    def close(self) -> None:
        for source in self._sources.values():
            source.sub.close(linger=0)
            if source.dealer is not None:
                source.dealer.close(linger=0)
        self._sources.clear()

    def poll(self, timeout_s: float = 0.0, max_messages: int = 10_000) -> int:
        """Apply what has arrived (waiting up to `timeout_s` for the first message), and run the
        periodic replay checks. Returns the batches applied. Never raises for faults."""
        applied = self.stats.batches
        ready = dict(self._poller.poll(int(timeout_s * 1000)))
        for sub, source in list(self._sources.items()):
            budget = max_messages if sub in ready else 0
            while budget and sub.poll(0):
                budget -= 1
                self._on_message(source, sub.recv_multipart())
        now = time.monotonic()
        for source in self._sources.values():
            for stream in list(source.streams.values()):
                if now >= stream.next_check:
                    self._replay(source, 0 if stream.expected is None else stream.expected)
        return self.stats.batches - applied

    def prometheus(self, model_name: str = "") -> str:
        """The counters of `stats` in Prometheus text, as `radixkv_kv_events_<name>_total`."""
        return "".join(prometheus_family(f"radixkv_kv_events_{f.name}_total", "counter", _HELP[f.name],
                                         [({"model_name": model_name}, getattr(self.stats, f.name))])
                       for f in fields(SubscriberStats))

    def streams(self) -> dict[str, int | None]:
        """{instance: next sequence number wanted (None: not synced)}."""
        return {s.instance: s.expected for src in self._sources.values() for s in src.streams.values()}

    # ------------------------------------------------------------------ messages

    def _on_message(self, source: _Source, frames: list[bytes]) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self.stats.malformed += 1
            return
        topic, seq, payload = frames[0], int.from_bytes(frames[1], "big"), frames[2]
        stream = self._stream(source, topic)
        if stream is None:
            return
        outcome = self._accept(source, stream, seq, payload)
        if outcome == "gap":
            self._replay(source, stream.expected)
            self._accept(source, stream, seq, payload)  # usually a duplicate by now
        elif outcome == "unsynced":
            self._replay(source, 0)
            self._accept(source, stream, seq, payload)

    def _stream(self, source: _Source, topic: bytes) -> _Stream | None:
        stream = source.streams.get(topic)
        if stream is None:
            name = source.instance or _instance_of(topic)
            if name is None:
                self.stats.malformed += 1
                return None
            stream = source.streams[topic] = _Stream(name)
        return stream

    def _accept(self, source: _Source, stream: _Stream, seq: int, payload: bytes) -> str:
        """Apply one batch if it is the next one (see the table in the module docstring)."""
        try:
            batch = self._decode(payload)
        except EventFormatError as e:
            self.stats.malformed += 1
            log.warning("instance %s: malformed KV event batch %d dropped, asking for a snapshot: %s",
                        stream.instance, seq, e)
            self._replay(source, _FUTURE)
            return "malformed"
        if batch.publisher_id in stream.retired:  # still in flight from before a restart
            self.stats.duplicates += 1
            return "duplicate"
        if batch.publisher_id is not None and batch.publisher_id != stream.publisher_id:
            if stream.publisher_id is not None:
                self.stats.restarts += 1
                stream.retired.add(stream.publisher_id)
                stream.expected = None
            stream.publisher_id = batch.publisher_id
        snapshot = bool(batch.events) and isinstance(batch.events[0], AllBlocksCleared)
        if stream.expected is None and not snapshot:
            return "unsynced"
        if stream.expected is not None and seq < stream.expected:
            self.stats.duplicates += 1
            return "duplicate"
        if stream.expected is not None and seq > stream.expected and not snapshot:
            self.stats.gaps += 1
            self.stats.missed += seq - stream.expected
            return "gap"
        try:
            self.index.ingest(stream.instance, batch.events)
        except IndexUnavailableError as e:
            self.stats.index_errors += 1
            stream.expected = None  # resync from a snapshot once the index takes writes again
            log.warning("instance %s: KV index did not take batch %d, will resync: %s", stream.instance, seq, e)
            return "index_error"
        except EventFormatError:  # validated above; an index with stricter rules
            self.stats.malformed += 1
            return "malformed"
        self.stats.batches += 1
        self.stats.snapshots += snapshot
        stream.expected = seq + 1
        return "applied"

    # ------------------------------------------------------------------ replay

    def _replay(self, source: _Source, start: int) -> bool:
        """Ask the publisher for every batch from `start` and apply the answers; bounded in time."""
        for stream in source.streams.values():
            stream.next_check = time.monotonic() + self.sync_interval_s
        if source.dealer is None:
            return False
        zmq, dealer = self._zmq, source.dealer
        while dealer.poll(0):  # late answers to an earlier replay
            dealer.recv_multipart()
        self.stats.replays += 1
        try:
            dealer.send_multipart((b"", start.to_bytes(8, "big")), flags=zmq.NOBLOCK)
        except zmq.ZMQError:
            self.stats.replay_failures += 1
            return False
        deadline = time.monotonic() + self.replay_timeout_s
        while dealer.poll(max(0, int((deadline - time.monotonic()) * 1000))):
            frames = dealer.recv_multipart()
            if len(frames) == 4 and frames[1] == b"" and frames[2] == END_SEQ:
                return True
            if len(frames) != 4 or frames[0] != b"" or len(frames[2]) != 8:
                self.stats.malformed += 1
                continue
            stream = self._stream(source, frames[1])
            if stream is not None:
                self._accept(source, stream, int.from_bytes(frames[2], "big"), frames[3])
        self.stats.replay_failures += 1
        return False


def _instance_of(topic: bytes) -> str | None:
    """The instance of an llm-d topic `kv@<instance>@<model>`, else the topic itself if it is a valid id."""
    try:
        text = topic.decode()
    except UnicodeDecodeError:
        return None
    parts = text.split("@")
    name = parts[1] if len(parts) == 3 and parts[0] == "kv" else text
    try:
        return check_instance_id(name)
    except InvalidArgumentError:
        return None
