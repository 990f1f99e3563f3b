"""The transformers Engine publishes its KV events over ZMQ with no loop of the caller's: a step hook
on the scheduler's thread drains the cache, the publisher's thread sends; a subscriber's index ends
equal to the engine's cache."""

from __future__ import annotations

import time

import pytest
import torch

from radixkv.cluster import InMemoryIndex, ZmqPublisher, ZmqSubscriber, kv_topic
from radixkv.events import BlockStored

transformers = pytest.importorskip("transformers")
from radixkv.integrations.transformers import Engine  # noqa: E402
from hf_helpers import build  # noqa: E402  (the tiny models of the engine tests)


def test_engine_step_hook_publishes_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    torch.set_num_threads(1)
    engine = Engine(build("llama"), num_slots=1024, page_size=4, kv_events=True, event_block_size=4,
                    max_context_len=256)
    pub = ZmqPublisher(engine.cache, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", topic=kv_topic("pod-0", "tiny"))
    pub.start(0.002)
    engine.step_hooks.append(pub.publish)
    index = InMemoryIndex()
    sub = ZmqSubscriber(index, sync_interval_s=0.2)
    sub.connect(pub.endpoint, pub.replay_endpoint)
    engine.generate([list(range(1, 30)), list(range(1, 20)) + [50] * 9], max_new_tokens=6)
    want = {(h, e.medium) for e in engine.cache.block_snapshot() if isinstance(e, BlockStored) for h in e.block_hashes}
    assert want and engine.last_stats.steps >= 6
    t0 = time.monotonic()
    while index.blocks_of("pod-0") != want:
        assert time.monotonic() - t0 < 5.0
        sub.poll(0.01)
    assert pub.sent >= 2  # the snapshot at the first step, then a batch per step that changed something
    sub.close()
    pub.close()
