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
the cache); a replay from a sequence number it no longer holds, or never sent, or more than
`replay_max_batches` back, is answered with one snapshot batch built from that shadow, numbered as
the last batch sent. A subscriber that lost anything therefore converges after one replay round trip.

Threads: a RadixCache raises ThreadOwnershipError from any thread but its owner, so only
`publish()` touches the cache, on the caller's (scheduler's) thread: it drains the events and,
with `start()`, only enqueues them; the sender thread encodes, sends and keeps the ring and shadow,
never calling the cache. Replay is served by a thread of its own (cluster/zmq_replay.py, bounded
per client), with or without `start()`, so live batches never wait behind a replay flood. PUB sends
never block (ZMQ drops at the high-water mark, which subscribers see as a gap and replay). If the
queue to the sender is full, the batch is dropped and counted, and the next publish() sends a
fresh snapshot instead. A thread that died raises PublisherError at the next publish() or close().
Bad options or endpoints raise ConfigError naming the field. Needs the `events` extra.
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
from radixkv.cluster.zmq_replay import ReplayServer
from radixkv.errors import ConfigError, InvalidArgumentError, RadixKVError
from radixkv.events import KVEvent

log = logging.getLogger(__name__)
_STOP = object()


class PublisherError(RadixKVError):
    """A ZmqPublisher's sender or replay thread died; the publisher is closed. Make a new one."""


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
                 max_queue: int = 10_000, replay_max_batches: int = 64) -> None:
        """Args:
            cache: a RadixCache built with CacheConfig(kv_events=True) (ConfigError otherwise).
            endpoint / replay_endpoint: ZMQ addresses; as vLLM does, an endpoint with '*' or an
                ipc/inproc one is bound, any other connected to. The replay socket is always bound.
                `self.endpoint` / `self.replay_endpoint` hold the bound addresses (ports from '*').
            topic: the first frame of every message (llm-d expects `kv_topic(instance, model)`).
            buffer_steps: batches kept for replay.
            data_parallel_rank: written into every batch (vLLM always sets it; llm-d expects it): an
                int in [0, 2**31).
            hwm: the PUB socket's high-water mark.
            max_queue: batches the sender thread may lag behind before publish() drops and resyncs.
            replay_max_batches: the most batches one replay answer carries (more: one snapshot).
        Raises ConfigError naming the field for any bad option or an endpoint ZMQ refuses.
        """
        from radixkv.events.wire import MAX_RANK, encode_batch, is_rank

        config = getattr(cache, "config", None)
        if not getattr(config, "kv_events", False) or not callable(getattr(cache, "take_events", None)):
            raise ConfigError("ZmqPublisher needs a RadixCache built with CacheConfig(kv_events=True): "
                              "without it the cache records no events and the fleet would never learn of its blocks")
        for name, v in (("buffer_steps", buffer_steps), ("hwm", hwm), ("max_queue", max_queue),
                        ("replay_max_batches", replay_max_batches)):
            if type(v) is not int or not 1 <= v <= 1 << 30:
                raise ConfigError(f"ZmqPublisher {name} must be a positive int, got {v!r:.60}")
        if not isinstance(topic, str):
            raise ConfigError(f"ZmqPublisher topic must be a str, got {topic!r:.60}")
        if not is_rank(data_parallel_rank):
            raise ConfigError(f"ZmqPublisher data_parallel_rank must be an int in [0, {MAX_RANK}], "
                              f"got {data_parallel_rank!r:.60} ({type(data_parallel_rank).__name__})")
        import zmq

        self._zmq, self._encode = zmq, encode_batch
        self.cache, self.topic, self.data_parallel_rank = cache, topic.encode(), data_parallel_rank
        self.publisher_id = int.from_bytes(os.urandom(8), "big")
        ctx = zmq.Context.instance()
        self._pub = ctx.socket(zmq.PUB)
        self._pub.set_hwm(hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = _open(self._pub, endpoint, zmq, "endpoint", bind_only=False)
        # written by the sender only (this thread before start(), the sender thread after), under _lock
        self._lock = threading.Lock()
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._shadow = Shadow()
        self._next_seq = 0
        self.sent = self.send_failures = 0
        self._replay: ReplayServer | None = None
        self.replay_endpoint = None
        if replay_endpoint is not None:
            sock = ctx.socket(zmq.ROUTER)
            sock.setsockopt(zmq.LINGER, 0)
            try:
                self.replay_endpoint = _open(sock, replay_endpoint, zmq, "replay_endpoint", bind_only=True)
            except ConfigError:
                sock.close(linger=0)
                self._pub.close(linger=0)
                raise
            self._replay = ReplayServer(sock, zmq, self.topic, self._ring, self._shadow, self._lock,
                                        lambda: self._next_seq, self._encode_now, max_batches=replay_max_batches)
        # written by publish() only
        self._snapshot_due = True  # the first batch is the whole cache
        self.dropped = 0
        self.max_queue = max_queue
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._closed = False

    @property
    def replays(self) -> int:
        return 0 if self._replay is None else self._replay.replays

    @property
    def snapshots_served(self) -> int:
        return 0 if self._replay is None else self._replay.snapshots_served

    # ------------------------------------------------------------------ the scheduler's side

    def publish(self) -> int:
        """Drain the cache's events into one batch and send it (or hand it to the sender thread).
        Call on the cache's thread, e.g. after every scheduler step. Returns the events published
        (0 when nothing changed). Never raises for a network problem; PublisherError when a
        thread of this publisher died (or it was closed)."""
        self._check()
        events = self.cache.take_events()
        if self._snapshot_due:
            events = self.cache.block_snapshot()  # covers whatever was drained before
            self._snapshot_due = False
        if not events:
            return 0
        if self._thread is None:
            self._send(time.time(), events)
        elif self._queue.qsize() >= self.max_queue:
            self.dropped += 1
            self._snapshot_due = True  # the next batch restates everything
            return 0
        else:
            self._queue.put((time.time(), events))
        return len(events)

    def start(self, interval_s: float = 0.01) -> None:
        """Run the sender on a daemon thread: it sends queued batches as they come; publish() then
        only enqueues. (`interval_s`, in (0, 60], is accepted for compatibility: the thread wakes on
        each batch.)"""
        self._check()
        if self._thread is not None:
            return
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not 0 < interval_s <= 60:
            raise InvalidArgumentError(f"interval_s must be in (0, 60], got {interval_s!r:.60}")
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="radixkv-zmq-publisher")
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (for at most `timeout_s`), stop both threads, close the sockets. Each
        socket is closed by the thread that uses it, after that thread ends, never under it.
        PublisherError afterwards if a thread had died or did not end in time."""
        if self._closed:
            return
        self._closed = True
        stuck = []
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                stuck.append("sender")  # it closes the PUB socket itself when it ends
        if not stuck:
            self._pub.close(linger=0)
        if self._replay is not None and not self._replay.stop(timeout_s):
            stuck.append("replay")
        failure = self._failure or (self._replay.failure if self._replay is not None else None)
        if failure is not None or stuck:
            raise PublisherError(f"ZmqPublisher closed with {'a failed thread: ' + repr(failure) if failure else ''}"
                                 f"{' threads still running: ' + ', '.join(stuck) if stuck else ''}")

    def _check(self) -> None:
        if self._closed:
            raise PublisherError("ZmqPublisher is closed")
        failure = self._failure or (self._replay.failure if self._replay is not None else None)
        if failure is None and self._thread is not None and not self._thread.is_alive():
            failure = RuntimeError("the sender thread ended")
        if failure is None and self._replay is not None and not self._replay.alive():
            failure = RuntimeError("the replay thread ended")
        if failure is not None:
            self._failure = failure
            raise PublisherError(f"ZmqPublisher's thread died ({failure!r:.200}); close it and make a new one")

    def __enter__(self) -> ZmqPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the sender's side

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                self._send(*item)
        except BaseException as e:  # noqa: BLE001 (raised at the next publish() or close())
            self._failure = e
            log.error("KV event sender thread failed: %r", e)
        finally:
            if self._closed:
                self._pub.close(linger=0)

    def _encode_now(self, events: list[KVEvent]) -> bytes:
        return self._encode(events, time.time(), self.data_parallel_rank, self.publisher_id)

    def _send(self, ts: float, events: list[KVEvent]) -> None:
        zmq, seq = self._zmq, self._next_seq
        try:
            payload = self._encode(events, ts, self.data_parallel_rank, self.publisher_id)
        except Exception as e:  # an event the wire cannot carry: never expected; log and resync
            log.error("KV event batch could not be encoded, sending a snapshot instead: %s", e)
            with self._lock:
                blocks = dict(self._shadow.blocks)
            payload = self._encode(Shadow.snapshot_of(blocks), ts, self.data_parallel_rank, self.publisher_id)
        with self._lock:
            self._shadow.apply(events)
            self._ring.append((seq, payload))
            self._next_seq += 1
        try:
            self._pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
            self.sent += 1
        except zmq.ZMQError as e:  # kept in the ring: subscribers see the gap and replay it
            self.send_failures += 1
            log.warning("KV event batch %d not sent (%s); it stays available for replay", seq, e)


def _open(sock: Any, endpoint: object, zmq: Any, field: str, bind_only: bool) -> str:
    """Bind (an address with '*' or '::', ipc, inproc, or always when `bind_only`) or connect; the
    address in use. ConfigError naming `field` for anything ZMQ refuses."""
    if not isinstance(endpoint, str) or "://" not in endpoint:
        raise ConfigError(f"ZmqPublisher {field} must be a ZMQ address such as 'tcp://*:5557', got {endpoint!r:.60}")
    try:
        if bind_only or "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
            _bind(sock, endpoint, zmq)
            return sock.getsockopt_string(zmq.LAST_ENDPOINT)
        sock.connect(endpoint)
    except zmq.ZMQError as e:
        raise ConfigError(f"ZmqPublisher {field} {endpoint!r:.80}: {e}") from None
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
