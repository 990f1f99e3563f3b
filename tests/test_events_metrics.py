"""KV events (vLLM field names, chained sha256 hashes) and metrics."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.events import (AllBlocksCleared, BlockRemoved, BlockStored, EventFormatError, block_hashes,
                            event_from_dict, event_to_dict)
from radixkv.metrics import prometheus_text
from state_machine_model import cached_blocks, replay


def make(page_size: int = 4, block: int = 6, host_slots: int = 0, events: bool = True) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=64, page_size=page_size,
                                  dtype=torch.float32, kv_events=events, event_block_size=block,
                                  host_slots=host_slots))


def put(cache: RadixCache, tokens: list[int], namespace: object = None) -> None:
    r = cache.match_prefix(tokens, namespace)
    cache.insert(tokens, torch.cat([r.slots, cache.alloc(len(tokens) - r.length)]), namespace)


def test_hash_is_stable_across_processes() -> None:
    code = "from radixkv.events import block_hashes; print(block_hashes(list(range(50)), 'ns', 16))"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2")}
    assert outs == {str(block_hashes(list(range(50)), "ns", 16)) + "\n"}


def test_hash_chains_and_separates_namespaces() -> None:
    full = block_hashes(list(range(48)), None, 16)
    assert len(full) == 3 and len(set(full)) == 3
    assert block_hashes(list(range(16, 48)), None, 16, parent_hash=full[0]) == full[1:]
    assert block_hashes(list(range(48)), "lora", 16) != full
    assert block_hashes([1] * 16 + [2] * 16, None, 16)[1] != block_hashes([3] * 16 + [2] * 16, None, 16)[1]


def test_blocks_are_independent_of_page_size() -> None:
    tokens = list(range(100, 130))
    for ps in (1, 2, 4):
        cache = make(page_size=ps, block=6)
        put(cache, tokens)
        stored = [e for e in cache.take_events() if isinstance(e, BlockStored)]
        assert [h for e in stored for h in e.block_hashes] == block_hashes(tokens[:len(tokens) // ps * ps], None, 6)
        assert stored[0].parent_block_hash is None and stored[0].medium == "GPU" and stored[0].block_size == 6


def test_split_and_trim_report_exactly_the_blocks_that_go() -> None:
    cache = make(page_size=2, block=4)
    put(cache, list(range(16)))
    put(cache, list(range(6)) + [99, 98, 97, 96])  # splits the first edge mid-block
    cache.take_events()
    assert cache.evict(2) == 2  # LRU trims the older leaf [6, 16) by one page: block [12, 16) goes
    assert cache.take_events() == [BlockRemoved([block_hashes(list(range(16)), None, 4)[3]], "GPU")]
    assert cache.evict(4) == 4  # the rest of that leaf's tail, [10, 14): block [8, 12) goes
    assert cache.take_events() == [BlockRemoved([block_hashes(list(range(16)), None, 4)[2]], "GPU")]


def test_replay_and_snapshot_reproduce_the_cache() -> None:
    cache = make(page_size=2, block=3, host_slots=16)
    seen: set[tuple[int, str]] = set()
    for i in range(12):
        put(cache, [i % 3, 1, 2, 3, i, i + 1, i % 2, 7], namespace=i % 2)
        cache.evict(3)
        replay(cache.take_events(), seen)
        assert seen == cached_blocks(cache.tree, 3)
    assert any(medium == "CPU" for _, medium in seen)
    snap = cache.block_snapshot()
    assert isinstance(snap[0], AllBlocksCleared)
    fresh: set[tuple[int, str]] = {(0, "stale")}
    replay(snap, fresh)
    assert fresh == seen


def test_events_off_records_nothing() -> None:
    cache = make(events=False)
    put(cache, list(range(20)))
    cache.evict(20)
    assert cache.events is None and cache.take_events() == []


def test_event_round_trip_and_rejects_malformed() -> None:
    e = BlockStored([1, 2], None, [5] * 8, 4, medium="CPU")
    assert event_from_dict(event_to_dict(e)) == e
    assert event_from_dict({"type": "BlockRemoved", "block_hashes": [3]}) == BlockRemoved([3], "GPU")
    for bad in ({"type": "Nope"}, "BlockStored", {"type": "BlockRemoved", "block_hashes": ["x"]},
                {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1],
                 "block_size": 4},
                {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1] * 4,
                 "block_size": 4, "medium": "disk"},
                {"type": "AllBlocksCleared", "extra": 1}):
        with pytest.raises(EventFormatError):
            event_from_dict(bad)


def test_metrics_count_queries_hits_and_evictions() -> None:
    cache = make(host_slots=32)
    put(cache, list(range(16)))
    cache.match_prefix(list(range(8)) + [50] * 8)
    m = cache.metrics()
    assert m["radixkv_prefix_cache_queries_total"] == 32 and m["radixkv_prefix_cache_hits_total"] == 8
    assert m["radixkv_prefix_cache_hit_rate"] == 0.25
    cache.evict(16)
    m = cache.metrics()
    assert m["radixkv_evicted_tokens_total"] == 16 and m["radixkv_host_cached_tokens"] == 16
    assert m["radixkv_kv_cache_usage_perc"] == 0.0 and m["radixkv_host_cache_usage_perc"] == 0.5
    text = prometheus_text(cache)
    assert "radixkv_evicted_tokens_total 16.0" in text and "# TYPE radixkv_evicted_tokens_total counter" in text
    assert "radixkv_host_cache_usage_perc 0.5" in text


def test_usage_counts_what_requests_hold_as_vllm_does_and_cached_tokens_have_their_own_gauge() -> None:
    """vLLM's kv_cache_usage_perc counts blocks in use by requests: a cached prefix nobody holds is
    reclaimable, so it is not usage (issue 19 item 18: it used to stay at 1.0 on a warm cache)."""
    cache = make(page_size=4)  # 64 slots
    put(cache, list(range(48)))
    m = cache.metrics()
    assert m["radixkv_kv_cache_usage_perc"] == 0.0 and m["radixkv_cached_tokens"] == 48
    seq = cache.open(list(range(32)) + [99] * 4)  # locks 32 cached tokens, then reserves 4 more
    cache.reserve(seq, 4)
    s = cache.sizes()
    assert (s.protected, s.private) == (32, 4)
    assert cache.metrics()["radixkv_kv_cache_usage_perc"] == (32 + 4) / 64
    cache.close(seq)
    assert cache.metrics()["radixkv_kv_cache_usage_perc"] == 0.0
