"""ReplayServer: a publisher's replay socket, answered on a thread of its own, within fixed bounds.

vLLM's ZmqEventPublisher answers replay on a ROUTER socket: a DEALER sends (empty, 8-byte start
sequence) and gets every batch still held from there as (empty, topic, seq, payload), then
(empty, empty, seq -1, empty). Here:

- The live path never waits on replay: the publisher's sender appends to the ring and the shadow
  under `lock`, and this thread takes the lock only to copy references (the ring's tail, the
  shadow's dict); encoding and sending happen outside it.
- A replay that would take more than `max_batches` batches is answered with one snapshot batch
  (the shadow restated, numbered as the last batch sent), so no request costs more than
  `max_batches + 2` messages, and a client that never reads holds at most that many in its pipe
  (the ROUTER's per-peer high-water mark; ZMQ drops the rest and the client asks again).
- Each client is answered at most once per `min_interval_s`; requests in between are dropped and
  counted. The table of clients is bounded (`max_clients`, the oldest forgotten first).
- It serves whether or not the publisher ever sends again (an idle inline-mode publisher still
  answers a late subscriber), and `stop()` joins it; it closes its socket on the way out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from typing import Any, Callable

from radixkv.cluster.shadow import Shadow

log = logging.getLogger(__name__)
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class ReplayServer:
    def __init__(self, sock: Any, zmq: Any, topic: bytes, ring: deque[tuple[int, bytes]], shadow: Shadow,
                 lock: threading.Lock, next_seq: Callable[[], int], encode: Callable[[list], bytes], *,
                 max_batches: int = 64, min_interval_s: float = 0.05, max_clients: int = 1024) -> None:
        self._sock, self._zmq, self.topic = sock, zmq, topic
        self._ring, self._shadow, self._lock, self._next_seq, self._encode = ring, shadow, lock, next_seq, encode
        self.max_batches, self.min_interval_s, self.max_clients = max_batches, min_interval_s, max_clients
        sock.setsockopt(zmq.SNDHWM, max_batches + 2)  # one whole answer per client, no more
        self._last: OrderedDict[bytes, float] = OrderedDict()  # client -> when it was last answered
        self.replays = self.snapshots_served = self.throttled = self.malformed = 0
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="radixkv-zmq-replay")
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float) -> bool:
        """Stop serving and close the socket; False when the thread did not end within `timeout_s`."""
        self._stop.set()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._sock.poll(20):  # wake at least every 20 ms to see stop()
                    self._serve(self._sock.recv_multipart())
        except BaseException as e:  # noqa: BLE001 (kept for the publisher to raise at its next call)
            self.failure = e
            log.error("KV event replay thread failed: %r", e)
        finally:
            self._sock.close(linger=0)

    def _serve(self, frames: list[bytes]) -> None:
        if len(frames) != 3 or frames[1] or len(frames[2]) != 8:
            self.malformed += 1
            return
        client, start = frames[0], int.from_bytes(frames[2], "big")
        now = time.monotonic()
        if now - self._last.get(client, -1e9) < self.min_interval_s:
            self.throttled += 1
            return
        self._last[client] = now
        self._last.move_to_end(client)
        while len(self._last) > self.max_clients:
            self._last.popitem(last=False)
        self.replays += 1
        with self._lock:  # references only: the sender waits at most this long
            last = self._next_seq()
            tail = ([x for x in self._ring if x[0] >= start]
                    if self._ring and self._ring[0][0] <= start <= last else None)
            blocks = dict(self._shadow.blocks) if (tail is None or len(tail) > self.max_batches) and last else None
        out: list[tuple[int, bytes]] = []
        if blocks is not None:
            out = [(last - 1, self._encode(Shadow.snapshot_of(blocks)))]
            self.snapshots_served += 1
        elif tail:
            out = tail
        send, flags = self._sock.send_multipart, self._zmq.NOBLOCK
        try:
            for seq, payload in out:
                send((client, b"", self.topic, seq.to_bytes(8, "big"), payload), flags=flags)
            send((client, b"", b"", END_SEQ, b""), flags=flags)
        except self._zmq.ZMQError as e:  # the requester is gone or too slow; it will ask again
            log.warning("replay to a subscriber failed: %s", e)
