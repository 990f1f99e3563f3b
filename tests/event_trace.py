"""A deterministic event trace of one-group caches (test_event_groups.py pins its bytes).

Drives RadixCaches through inserts that share prefixes, split edges, evict (device and host tier),
use namespaces, LoRA, a cache salt and multimodal items, with every block size / page size pairing
the recorder treats differently (blocks a multiple of the page, and not: counted holders), under
XXH3 and vLLM's sha256_cbor, and returns the sha256 of every msgpack batch of events in order,
resync snapshots included."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.events.wire import encode_batch

CASES = [(1, 16, "xxh3", 0), (16, 16, "xxh3", 0), (4, 6, "xxh3", 64), (1, 16, "sha256_cbor", 0),
         (4, 8, "sha256_cbor", 64)]  # (page size, block size, event_hash, host slots)


def trace_digest() -> str:
    out = hashlib.sha256()
    for ps, block, scheme, host in CASES:
        for payload in _payloads(ps, block, scheme, host):
            out.update(payload)
    return out.hexdigest()


def _payloads(ps: int, block: int, scheme: str, host: int) -> list[bytes]:
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=192, page_size=ps,
                                   eviction="lru", kv_events=True, event_block_size=block, event_hash=scheme,
                                   host_slots=host))
    rng = np.random.default_rng(7)
    base = rng.integers(0, 50_000, 96).tolist()
    keys = [None, {"lora_name": "sql", "cache_salt": "t"}, {"mm": [("sha-cat", 8, 8)]}]
    out = []
    for i in range(40):
        n = int(rng.integers(8, 90))
        toks = base[:int(rng.integers(0, 60))] + rng.integers(0, 50_000, n).tolist()
        extra, ns = keys[i % 3], ("tenant" if i % 5 == 4 else None)
        if extra is not None and "mm" in extra and len(toks) < 16:
            extra = None
        r = cache.match_prefix(toks, ns, extra_keys=extra)
        cache.insert(toks, torch.cat([r.slots, cache.alloc(len(toks) - r.length)]), ns, extra_keys=extra)
        out.append(encode_batch(cache.take_events(), float(i)))
        if i % 13 == 12:
            out.append(encode_batch(cache.block_snapshot(), float(i)))
    cache.evict(cache.sizes().cached)
    out.append(encode_batch(cache.take_events(), 99.0))
    return out
