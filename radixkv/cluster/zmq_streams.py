"""One (connection, topic) stream of a ZmqSubscriber: the next sequence number it needs, the
publisher it follows, and the rule that says what to do with a batch (the table in
zmq_subscriber.py's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field

from radixkv.cluster.index import check_instance_id
from radixkv.cluster.subscriber_stats import SubscriberStats
from radixkv.errors import InvalidArgumentError

FUTURE = (1 << 63) - 1  # a replay from here is always answered with a snapshot; no batch is numbered this high


@dataclass
class Stream:
    instance: str
    expected: int | None = None  # next sequence number wanted; None: not synced
    publisher_id: int | None = None
    retired: set[int] = field(default_factory=set)  # ids of publishers that restarted since
    next_check: float = 0.0


def classify(stream: Stream, seq: int, publisher_id: int | None, snapshot: bool, stats: SubscriberStats) -> str | None:
    """None when batch `seq` of `publisher_id` is to be applied now, else why not ("duplicate",
    "unsynced": wait for a snapshot, "gap": replay from `stream.expected`). Follows a publisher's
    restart (its numbers start again) and counts what it skips in `stats`."""
    if publisher_id in stream.retired:  # still in flight from before a restart
        stats.duplicates += 1
        return "duplicate"
    if publisher_id is not None and publisher_id != stream.publisher_id:
        if stream.publisher_id is not None:
            stats.restarts += 1
            stream.retired.add(stream.publisher_id)
            stream.expected = None
        stream.publisher_id = publisher_id
    if stream.expected is None and not snapshot:
        return "unsynced"
    if stream.expected is not None and seq < stream.expected:
        stats.duplicates += 1
        return "duplicate"
    if stream.expected is not None and seq > stream.expected and not snapshot:
        stats.gaps += 1
        stats.missed += seq - stream.expected
        return "gap"
    return None


def instance_of(topic: bytes) -> str | None:
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
