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
just before an instance went idle is recovered too. Replay never blocks: a request is sent and its
answers are read by later `poll` calls (one request in flight per connection; one unanswered within
`replay_timeout_s` counts as a failure). Bound: the index holds what a reachable publisher has sent
within `sync_interval_s` + one replay round trip.

Against a broken or hostile peer: `poll(timeout_s)` returns within timeout_s + 50 ms; a frame larger
than `max_message_bytes` is dropped unread and counted (`oversized`); a malformed payload (counted)
is never applied and its stream asks for a snapshot; sequence numbers at or above 2**63 - 1 are
malformed. A connection speaks for the instance it was connected for (`instance=`), or else for
the first `max_topics` instances its topics name that no other connection already speaks for;
other topics are dropped and counted (`foreign`), so one sender can neither clear another
instance's state nor grow the subscriber's memory without bound. An index that cannot be written
(IndexUnavailableError) leaves the stream unsynced until a later replay succeeds. No exception from
the network, the payloads or the index reaches the caller of `poll`; bad options raise ConfigError.
Not thread-safe: call `poll` from the thread that also reads an InMemoryIndex. Needs `events`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from radixkv.cluster.index import IndexUnavailableError, KVIndex, check_instance_id
from radixkv.cluster.subscriber_stats import SubscriberStats, stats_prometheus
from radixkv.cluster.zmq_replay import END_SEQ
from radixkv.cluster.zmq_streams import FUTURE, Stream, classify, instance_of
from radixkv.errors import ConfigError, InvalidArgumentError
from radixkv.events import AllBlocksCleared, EventFormatError

log = logging.getLogger(__name__)
_SLACK_S = 0.03  # poll() reads what is ready for at most this long past its timeout


@dataclass
class _Source:
    sub: Any
    dealer: Any
    instance: str | None
    streams: dict[bytes, Stream] = field(default_factory=dict)
    replay_deadline: float | None = None  # a replay request is in flight until this time


class ZmqSubscriber:
    """Subscribes to ZmqPublishers and applies their batches to `index` losslessly."""

    def __init__(self, index: KVIndex, *, replay_timeout_s: float = 1.0, sync_interval_s: float = 1.0,
                 topic_filter: str = "", rcvhwm: int = 100_000, max_message_bytes: int = 8 << 20,
                 max_topics: int = 8) -> None:
        """Args: `index` to feed; seconds a replay may take and between sync checks; the SUB
        `topic_filter` (a prefix) and high-water mark; the largest frame read (larger ones are
        dropped and counted); instances one connection may speak for. ConfigError naming the field."""
        for name, v in (("replay_timeout_s", replay_timeout_s), ("sync_interval_s", sync_interval_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
                raise ConfigError(f"ZmqSubscriber {name} must be a number of seconds in (0, 3600], got {v!r:.60}")
        for name, v in (("rcvhwm", rcvhwm), ("max_message_bytes", max_message_bytes), ("max_topics", max_topics)):
            if type(v) is not int or not 1 <= v <= 1 << 31:
                raise ConfigError(f"ZmqSubscriber {name} must be a positive int, got {v!r:.60}")
        if not isinstance(topic_filter, str):
            raise ConfigError(f"ZmqSubscriber topic_filter must be a str, got {topic_filter!r:.60}")
        if not callable(getattr(index, "ingest", None)):
            raise ConfigError("ZmqSubscriber index must be a KVIndex (InMemoryIndex, RedisIndex), "
                              f"got {type(index).__name__}")
        import zmq

        from radixkv.events.wire import decode_batch

        self._zmq, self._decode = zmq, decode_batch
        self.index, self.replay_timeout_s, self.sync_interval_s = index, replay_timeout_s, sync_interval_s
        self.topic_filter, self.rcvhwm = topic_filter.encode(), rcvhwm
        self.max_message_bytes, self.max_topics = max_message_bytes, max_topics
        self._ctx = zmq.Context.instance()
        self._poller = zmq.Poller()
        self._sources: dict[Any, _Source] = {}  # SUB or DEALER socket -> its connection
        self._speaker: dict[str, _Source] = {}  # instance -> the one connection that speaks for it
        self.stats = SubscriberStats()

    def connect(self, endpoint: str, replay_endpoint: str | None = None, instance: str | None = None) -> None:
        """Subscribe to one publisher (and its replay socket: without it, lost batches stay lost).
        `instance` names it when its topic does not (`kv@<instance>@<model>`). Asks for its state now.
        ConfigError for an endpoint ZMQ refuses; InvalidArgumentError for a bad instance id."""
        if instance is not None:
            check_instance_id(instance)
            if instance in self._speaker:
                raise InvalidArgumentError(f"instance {instance!r} is already connected")
        zmq = self._zmq
        sub = self._ctx.socket(zmq.SUB)
        dealer = self._ctx.socket(zmq.DEALER) if replay_endpoint is not None else None
        try:
            for sock, name, addr in ((sub, "endpoint", endpoint), (dealer, "replay_endpoint", replay_endpoint)):
                if sock is not None:
                    if not isinstance(addr, str) or "://" not in addr:
                        raise ConfigError(f"ZmqSubscriber.connect {name} must be a ZMQ address, got {addr!r:.60}")
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.setsockopt(zmq.RCVHWM, self.rcvhwm)
                    sock.connect(addr)
            sub.setsockopt(zmq.SUBSCRIBE, self.topic_filter)
        except (zmq.ZMQError, ConfigError) as e:
            for sock in (sub, dealer):
                if sock is not None:
                    sock.close(linger=0)
            raise (e if isinstance(e, ConfigError)
                   else ConfigError(f"ZmqSubscriber.connect {endpoint!r:.80}: {e}")) from None
        source = _Source(sub, dealer, instance)
        if instance is not None:
            self._speaker[instance] = source
        for sock in (sub, dealer):
            if sock is not None:
                self._sources[sock] = source
                self._poller.register(sock, zmq.POLLIN)
        self._replay(source, 0)

    def close(self) -> None:
        for sock in self._sources:
            sock.close(linger=0)
        self._sources.clear()
        self._speaker.clear()

    def poll(self, timeout_s: float = 0.0, max_messages: int = 10_000) -> int:
        """Apply what has arrived (waiting up to `timeout_s` for the first message), read replay
        answers, and run the periodic replay checks; returns within timeout_s + 50 ms. Returns the
        batches applied. Never raises for faults; InvalidArgumentError for a negative timeout."""
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 <= timeout_s <= 3600:
            raise InvalidArgumentError("poll timeout_s must be a number of seconds in [0, 3600], "
                                       f"got {timeout_s!r:.60}")
        if type(max_messages) is not int or max_messages < 1:
            raise InvalidArgumentError(f"poll max_messages must be a positive int, got {max_messages!r:.60}")
        applied = self.stats.batches
        deadline = time.monotonic() + timeout_s
        ready = dict(self._poller.poll(int(timeout_s * 1000)))
        stop = max(deadline, time.monotonic()) + _SLACK_S
        for sock, source in list(self._sources.items()):
            budget = max_messages if sock in ready else 0
            while budget and time.monotonic() < stop and sock.poll(0):
                budget -= 1
                frames = sock.recv_multipart(copy=False)
                if sum(len(f) for f in frames) > self.max_message_bytes:
                    self.stats.oversized += 1
                    continue
                frames = [f.bytes for f in frames]
                if sock is source.sub:
                    self._on_message(source, frames)
                else:
                    self._on_answer(source, frames)
        now = time.monotonic()
        for source in {id(s): s for s in self._sources.values()}.values():
            if source.replay_deadline is not None and now > source.replay_deadline:
                source.replay_deadline = None
                self.stats.replay_failures += 1
            for stream in list(source.streams.values()):
                if now >= stream.next_check:
                    self._replay(source, 0 if stream.expected is None else stream.expected)
        return self.stats.batches - applied

    def prometheus(self, model_name: str = "") -> str:
        """The counters of `stats` in Prometheus text, as `radixkv_kv_events_<name>_total`."""
        if not isinstance(model_name, str):
            raise InvalidArgumentError(f"model_name must be a str, got {model_name!r:.60}")
        return stats_prometheus(self.stats, model_name)

    def streams(self) -> dict[str, int | None]:
        """{instance: next sequence number wanted (None: not synced)}."""
        return {s.instance: s.expected for src in self._sources.values() for s in src.streams.values()}

    # ------------------------------------------------------------------ messages

    def _on_message(self, source: _Source, frames: list[bytes]) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self.stats.malformed += 1
            return
        stream = self._stream(source, frames[0])
        if stream is None:
            return
        outcome = self._accept(source, stream, int.from_bytes(frames[1], "big"), frames[2])
        if outcome == "gap":  # the replay's answer brings this batch too
            self._replay(source, stream.expected)  # type: ignore[arg-type]
        elif outcome == "unsynced":
            self._replay(source, 0)

    def _on_answer(self, source: _Source, frames: list[bytes]) -> None:
        """One frame of a replay answer: a batch (empty, topic, seq, payload) or the end marker."""
        if len(frames) == 4 and frames[0] == b"" and frames[1] == b"" and frames[2] == END_SEQ:
            source.replay_deadline = None
        elif len(frames) != 4 or frames[0] != b"" or len(frames[2]) != 8:
            self.stats.malformed += 1
        else:
            stream = self._stream(source, frames[1])
            if stream is not None:
                self._accept(source, stream, int.from_bytes(frames[2], "big"), frames[3])

    def _stream(self, source: _Source, topic: bytes) -> Stream | None:
        """The stream of `topic` on this connection; None (counted) for a topic it may not speak for."""
        stream = source.streams.get(topic)
        if stream is None:
            name = source.instance or instance_of(topic)
            if name is None:
                self.stats.malformed += 1
                return None
            if self._speaker.get(name, source) is not source or len(source.streams) >= self.max_topics:
                self.stats.foreign += 1
                return None
            self._speaker[name] = source
            stream = source.streams[topic] = Stream(name)
        return stream

    def _accept(self, source: _Source, stream: Stream, seq: int, payload: bytes) -> str:
        """Apply one batch if it is the next one (see the table in the module docstring)."""
        if seq >= FUTURE:
            self.stats.malformed += 1
            return "malformed"
        try:
            batch = self._decode(payload)
        except EventFormatError as e:
            self.stats.malformed += 1
            log.warning("instance %s: malformed KV event batch %d dropped, asking for a snapshot: %s",
                        stream.instance, seq, e)
            self._replay(source, FUTURE)
            return "malformed"
        snapshot = bool(batch.events) and isinstance(batch.events[0], AllBlocksCleared)
        outcome = classify(stream, seq, batch.publisher_id, snapshot, self.stats)
        if outcome is not None:
            return outcome
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

    def _replay(self, source: _Source, start: int) -> None:
        """Ask the publisher for every batch from `start`; `poll` reads the answers. One request in
        flight per connection: while one is, later asks wait for the next sync check."""
        for stream in source.streams.values():
            stream.next_check = time.monotonic() + self.sync_interval_s
        if source.dealer is None or source.replay_deadline is not None:
            return
        self.stats.replays += 1
        try:
            source.dealer.send_multipart((b"", start.to_bytes(8, "big")), flags=self._zmq.NOBLOCK)
        except self._zmq.ZMQError:
            self.stats.replay_failures += 1
            return
        source.replay_deadline = time.monotonic() + self.replay_timeout_s

