"""The router-engine loop: predicted vs delivered cached tokens, stale misses, Prometheus text."""

from __future__ import annotations

import numpy as np
import pytest

from radixkv import CacheConfig, RadixCache
from radixkv.cluster import InMemoryIndex, Publisher, Router
from radixkv.errors import InvalidArgumentError
from radixkv.metrics import prometheus_family

BS = 16


def make_cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=4096, page_size=16,
                                  kv_events=True, event_block_size=BS))


def open_close(cache: RadixCache, toks: np.ndarray) -> int:
    seq = cache.open(toks, max_reuse=len(toks) - 1)
    matched = seq.cached_len
    cache.reserve(seq, len(toks) - seq.kv_len)
    cache.commit(seq, toks[seq.committed_len:])
    cache.close(seq)
    return matched


def test_predicted_delivered_and_stale_tokens_per_instance() -> None:
    rng = np.random.default_rng(0)
    caches = {"pod-0": make_cache(), "pod-1": make_cache()}
    index = InMemoryIndex()
    pubs = {n: Publisher(n, c, index) for n, c in caches.items()}
    router = Router(index, block_size=BS)
    for n in caches:
        router.report_load(n, 0)
    stem = rng.integers(0, 32000, 320)
    prompts = [np.concatenate([stem, rng.integers(0, 32000, 40)]) for _ in range(4)]
    for i, p in enumerate(prompts):
        d = router.route(p)
        assert router.report_hit(d, open_close(caches[d.instance], p))
        pubs[d.instance].publish()
        router.report_load(d.instance, 0)
    owner = router.route(prompts[0]).instance  # the stem's instance
    caches[owner].evict(10_000)  # evicted, not yet published: the index is stale
    d = router.route(prompts[1])
    assert d.instance == owner and d.predicted_tokens == 352  # it served prompts[1] itself: 22 blocks
    assert router.report_hit(d, open_close(caches[owner], prompts[1])) and not router.report_hit(d, 0)
    st = router.loop.by_instance[owner]
    assert st.stale_miss_tokens == 352 and st.delivered_hit_tokens == 3 * 320
    assert st.predicted_hit_tokens == st.delivered_hit_tokens + st.stale_miss_tokens - st.unpredicted_hit_tokens
    text = router.prometheus("llama")
    assert "# HELP radixkv_router_stale_miss_tokens_total Predicted cached tokens" in text
    assert "# TYPE radixkv_router_delivered_hit_tokens_total counter" in text
    assert f'radixkv_router_stale_miss_tokens_total{{model_name="llama",instance="{owner}"}} 352.0' in text
    with pytest.raises(InvalidArgumentError):
        router.report_hit("x", 3)  # type: ignore[arg-type]


def test_prometheus_family_escapes_labels() -> None:
    text = prometheus_family("m_total", "counter", "a\\b", [({"instance": 'a"b\nc'}, 2)])
    assert text == '# HELP m_total a\\\\b\n# TYPE m_total counter\nm_total{instance="a\\"b\\nc"} 2.0\n'
