"""ZmqPublisher: one instance's KV events on the wire, framed exactly as vLLM's ZmqEventPublisher.

    pub = ZmqPublisher(cache, "tcp://*:5557", replay_endpoint="tcp://*:5558", topic=kv_topic("pod-3", "llama"))
    pub.start(interval_s=0.01)   # optional: a sender thread; without it publish() sends inline
    ... each scheduler step: pub.publish()   # on the cache's own thread: drains take_events()
    pub.close()

Wire (vLLM 0.33): the PUB socket sends (topic, 8-byte big-endian sequence number from 0, payload),
one message per batch, the payload a msgpack `KVEventBatch` (radixkv.events.wire) with one extra
trailing element, this publisher's random 64-bit id (vLLM's and llm-d's decoders skip trailing
batch elements; our subscriber uses it to tell a restarted publisher from a late one). The ROUTER
replay socket takes (empty, 8-byte start sequence) from a DEALER and answers each batch it still
holds from there as (empty, topic, seq, payload), then (empty, empty, seq -1, empty).

Lossless by construction: the first batch (seq 0) is the cache's `block_snapshot()` (AllBlocksCleared
and every cached block). The sender keeps the last `buffer_steps` batches for replay and a shadow of
what the stream has said the instance holds (applied from the batches it sends, so it never reads
the cache); a replay from a sequence number it no longer holds, or never sent, is answered with
one snapshot batch built from that shadow, numbered as the last batch sent. A subscriber that lost
anything therefore converges after one replay round trip.

Threads: a RadixCache raises ThreadOwnershipError from any thread but its owner, so only
`publish()` touches the cache, on the caller's (scheduler's) thread: it drains the events and,
with `start()`, only enqueues them; the sender thread encodes, sends, keeps the ring and shadow
and serves replay, never calling the cache. PUB sends never block (ZMQ drops at the high-water mark,
which subscribers see as a gap and replay). If the queue to the sender is full, the batch is dropped
and counted, and the next publish() sends a fresh snapshot instead. Needs the `events` extra.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from typing import Any

from radixkv.cluster.shadow import Shadow
from radixkv.errors import ConfigError, InvalidArgumentError
from radixkv.events import KVEvent

log = logging.getLogger(__name__)
END_SEQ = (-1).to_bytes(8, "big", signed=True)
_STOP = object()


def kv_topic(instance_id: str, model: str) -> str:
    """llm-d's topic: `kv@<instance>@<model>` (neither part may contain '@')."""
    for part in (instance_id, model):
        if not isinstance(part, str) or not part or "@" in part:
            raise InvalidArgumentError(f"kv_topic parts must be non-empty strs without '@', got {part!r:.60}")
    return f"kv@{instance_id}@{model}"


class ZmqPublisher:
    """Publishes one cache's KV events over ZMQ (see the module docstring)."""

    def __init__(self, cache: Any, endpoint: str, replay_endpoint: str | None = None, topic: str = "",
                 buffer_steps: int = 10_000, *, data_parallel_rank: int = 0, hwm: int = 100_000,
                 max_queue: int = 10_000) -> None:
        """Args:
            cache: a RadixCache built with CacheConfig(kv_events=True) (ConfigError otherwise).
            endpoint / replay_endpoint: ZMQ addresses; as vLLM does, an endpoint with '*' or an
                ipc/inproc one is bound, any other connected to. The replay socket is always bound.
                `self.endpoint` / `self.replay_endpoint` hold the bound addresses (ports from '*').
            topic: the first frame of every message (llm-d expects `kv_topic(instance, model)`).
            buffer_steps: batches kept for replay.
            data_parallel_rank: written into every batch (vLLM always sets it; llm-d expects it).
            hwm: the PUB socket's high-water mark.
            max_queue: batches the sender thread may lag behind before publish() drops and resyncs.
        """
        config = getattr(cache, "config", None)
        if not getattr(config, "kv_events", False):
            raise ConfigError("ZmqPublisher needs a RadixCache built with CacheConfig(kv_events=True): "
                              "without it the cache records no events and the fleet would never learn of its blocks")
        for name, v in (("buffer_steps", buffer_steps), ("hwm", hwm), ("max_queue", max_queue)):
            if type(v) is not int or v < 1:
                raise InvalidArgumentError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(topic, str):
            raise InvalidArgumentError(f"topic must be a str, got {topic!r:.60}")
        import zmq

        from radixkv.events.wire import encode_batch

        self._zmq, self._encode = zmq, encode_batch
        self.cache, self.topic, self.data_parallel_rank = cache, topic.encode(), data_parallel_rank
        self.publisher_id = int.from_bytes(os.urandom(8), "big")
        ctx = zmq.Context.instance()
        self._pub = ctx.socket(zmq.PUB)
        self._pub.set_hwm(hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = _bind_or_connect(self._pub, endpoint, zmq)
        self._replay = None
        self.replay_endpoint = None
        if replay_endpoint is not None:
            self._replay = ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))  # a whole replay and its end marker
            self._replay.setsockopt(zmq.LINGER, 0)
            _bind(self._replay, replay_endpoint, zmq)
            self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        # written by the sender only (this thread before start(), the sender thread after)
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._shadow = Shadow()
        self._next_seq = 0
        self.sent = self.send_failures = self.replays = self.snapshots_served = 0
        # written by publish() only
        self._snapshot_due = True  # the first batch is the whole cache
        self.dropped = 0
        self.max_queue = max_queue
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the scheduler's side

    def publish(self) -> int:
        """Drain the cache's events into one batch and send it (or hand it to the sender thread).
        Call on the cache's thread, e.g. after every scheduler step. Returns the events published
        (0 when nothing changed). Never raises for a network problem."""
        events = self.cache.take_events()
        if self._snapshot_due:
            events = self.cache.block_snapshot()  # covers whatever was drained before
            self._snapshot_due = False
        if not events:
            return 0
        if self._thread is None:
            self._send(time.time(), events)
            self._serve_replay()
        elif self._queue.qsize() >= self.max_queue:
            self.dropped += 1
            self._snapshot_due = True  # the next batch restates everything
            return 0
        else:
            self._queue.put((time.time(), events))
        return len(events)

    def start(self, interval_s: float = 0.01) -> None:
        """Run the sender on a daemon thread: it sends queued batches as they come and answers
        replay requests within `interval_s`. publish() then only enqueues."""
        if self._thread is not None:
            return
        if not isinstance(interval_s, (int, float)) or not 0 < interval_s <= 60:
            raise InvalidArgumentError(f"interval_s must be in (0, 60], got {interval_s!r}")
        self._thread = threading.Thread(target=self._run, args=(float(interval_s),), daemon=True,
                                        name="radixkv-zmq-publisher")
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (for at most `timeout_s`), stop the thread, close the sockets."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout_s)
            self._thread = None
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)

    def __enter__(self) -> ZmqPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the sender's side

    def _run(self, interval_s: float) -> None:
        while True:
            try:
                item = self._queue.get(timeout=interval_s)
            except queue.Empty:
                item = None
            while item is not None:
                if item is _STOP:
                    self._serve_replay()
                    return
                self._send(*item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            self._serve_replay()

    def _send(self, ts: float, events: list[KVEvent]) -> None:
        zmq, seq = self._zmq, self._next_seq
        try:
            payload = self._encode(events, ts, self.data_parallel_rank, self.publisher_id)
        except Exception as e:  # an event the wire cannot carry: never expected; log and resync
            log.error("KV event batch could not be encoded, sending a snapshot instead: %s", e)
            payload = self._encode(self._shadow.snapshot(), ts, self.data_parallel_rank, self.publisher_id)
        self._shadow.apply(events)
        self._ring.append((seq, payload))
        self._next_seq += 1
        try:
            self._pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
            self.sent += 1
        except zmq.ZMQError as e:  # kept in the ring: subscribers see the gap and replay it
            self.send_failures += 1
            log.warning("KV event batch %d not sent (%s); it stays available for replay", seq, e)

    def _serve_replay(self) -> None:
        if self._replay is None:
            return
        zmq = self._zmq
        while self._replay.poll(0):
            frames = self._replay.recv_multipart()
            if len(frames) != 3 or frames[1] or len(frames[2]) != 8:
                log.warning("ignored a malformed replay request of %d frames", len(frames))
                continue
            client, start = frames[0], int.from_bytes(frames[2], "big")
            self.replays += 1
            try:
                if self._ring and self._ring[0][0] <= start <= self._next_seq:
                    for seq, payload in self._ring:
                        if seq >= start:
                            self._replay.send_multipart((client, b"", self.topic, seq.to_bytes(8, "big"), payload),
                                                        flags=zmq.NOBLOCK)
                elif self._next_seq:  # lost from the ring, or never sent by this publisher: restate all
                    payload = self._encode(self._shadow.snapshot(), time.time(), self.data_parallel_rank,
                                           self.publisher_id)
                    self._replay.send_multipart((client, b"", self.topic, (self._next_seq - 1).to_bytes(8, "big"),
                                                 payload), flags=zmq.NOBLOCK)
                    self.snapshots_served += 1
                self._replay.send_multipart((client, b"", b"", END_SEQ, b""), flags=zmq.NOBLOCK)
            except zmq.ZMQError as e:  # the requester is gone or too slow; it will ask again
                log.warning("replay to a subscriber failed: %s", e)


def _bind_or_connect(sock: Any, endpoint: str, zmq: Any) -> str:
    if not isinstance(endpoint, str) or "://" not in endpoint:
        raise InvalidArgumentError(f"endpoint must be a ZMQ address such as 'tcp://*:5557', got {endpoint!r:.60}")
    if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
        _bind(sock, endpoint, zmq)
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)
    sock.connect(endpoint)
    return endpoint


def _bind(sock: Any, endpoint: str, zmq: Any, timeout_s: float = 2.0) -> None:
    """Bind, retrying for up to `timeout_s` while the address is in use: ZMQ releases a closed
    socket's port asynchronously, so a publisher restarted in the same process may find it taken."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock.bind(endpoint)
            return
        except zmq.ZMQError as e:
            if e.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # nothing to wait on: the port is freed by ZMQ's I/O thread
