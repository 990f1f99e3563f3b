"""SubscriberStats: what a ZmqSubscriber counts, and those counters in Prometheus text."""

from __future__ import annotations

from dataclasses import dataclass, fields

from radixkv.metrics import prometheus_family


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
    oversized: int = 0  # frames over max_message_bytes, dropped unread
    foreign: int = 0  # messages for an instance this connection may not speak for


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
    "oversized": "Frames larger than max_message_bytes, dropped unread.",
    "foreign": "Messages for an instance their connection may not speak for (dropped).",
}


def stats_prometheus(stats: SubscriberStats, model_name: str) -> str:
    """Every counter as `radixkv_kv_events_<name>_total{model_name=...}`, with HELP and TYPE."""
    return "".join(prometheus_family(f"radixkv_kv_events_{f.name}_total", "counter", _HELP[f.name],
                                     [({"model_name": model_name}, getattr(stats, f.name))])
                   for f in fields(SubscriberStats))
