"""Host tier: device -> host -> device round trips, write policies, and clean fallbacks."""

from __future__ import annotations

import pytest
import torch

from radixkv import CacheConfig, RadixCache


def make(page_size: int = 4, num_slots: int = 32, host_slots: int = 64, policy: str = "write_through",
         dtype: torch.dtype = torch.float32) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=2, num_kv_heads=2, head_dim=8, num_slots=num_slots,
                                  page_size=page_size, max_requests=4, max_context_len=64, dtype=dtype,
                                  host_slots=host_slots, host_write_policy=policy))


def fill(cache: RadixCache, tokens: list[int]) -> dict[str, torch.Tensor]:
    """Insert `tokens` with random K/V (never zero) written into their slots; return that K/V."""
    slots = cache.alloc(len(tokens))
    shape = (len(tokens), 2, 8)
    kv = {f"{kind}{layer}": torch.rand(shape).add_(0.5).to(cache.config.dtype)
          for kind in "kv" for layer in range(2)}
    for layer in range(2):
        cache.kv_pool.k_buffer[layer][slots] = kv[f"k{layer}"]
        cache.kv_pool.v_buffer[layer][slots] = kv[f"v{layer}"]
    cache.insert(tokens, slots)
    return kv


def read(cache: RadixCache, slots: torch.Tensor) -> dict[str, torch.Tensor]:
    pool = cache.kv_pool
    return {f"{kind}{layer}": (pool.k_buffer if kind == "k" else pool.v_buffer)[layer][slots]
            for kind in "kv" for layer in range(2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_round_trip_is_bit_exact(dtype: torch.dtype, policy: str) -> None:
    cache = make(dtype=dtype, policy=policy)
    tokens = list(range(100, 124))
    kv = fill(cache, tokens)
    assert cache.tree.host_size == (24 if policy == "write_through" else 0)
    assert cache.evict(24) == 24  # every device copy goes; the nodes stay, host-only
    assert cache.tree.host_size == 24 and cache.sizes().cached == 0
    r = cache.match_prefix(tokens)
    assert (r.length, r.host_length) == (0, 24)
    seq = cache.open(tokens)  # promotes the host part into fresh device pages
    assert seq.cached_len == 24 and cache.sizes().cached == 24
    back = read(cache, torch.from_numpy(seq.slots().copy()))
    for name in kv:
        assert torch.equal(back[name], kv[name]), f"{name} changed on the round trip"
    assert cache.metrics()["radixkv_host_promoted_tokens_total"] == 24
    cache.close(seq)
    cache.check_invariants()


def test_partial_device_eviction_leaves_a_host_continuation() -> None:
    cache = make()
    tokens = list(range(20))
    kv = fill(cache, tokens)
    cache.evict(8)  # the tail two pages leave the device
    r = cache.match_prefix(tokens + [7])
    assert (r.length, r.host_length) == (12, 8)
    seq = cache.open(tokens)
    assert seq.cached_len == 20
    assert torch.equal(read(cache, torch.from_numpy(seq.slots().copy()))["v1"], kv["v1"])
    cache.close(seq)
    cache.check_invariants()


def test_a_full_host_tier_falls_back_to_plain_eviction() -> None:
    cache = make(host_slots=8)  # 2 host pages
    fill(cache, list(range(8)))  # 2 pages: copied to the host
    fill(cache, list(range(50, 66)))  # 4 pages: no room even after host eviction, so no copy
    assert cache.tree.host_size == 8
    cache.evict(24)
    cache.check_invariants()
    assert cache.match_prefix(list(range(8))).host_length == 8  # kept on the host
    assert cache.match_prefix(list(range(50, 66))).host_length == 0  # gone from both tiers
    assert cache.sizes().free == 32


def test_promotion_without_device_room_uses_the_device_part() -> None:
    cache = make(num_slots=16)
    tokens = list(range(16))
    fill(cache, tokens)
    cache.evict(8)
    hog = cache.alloc(cache.sizes().free)  # nothing free, the cached 8 tokens get locked by open
    seq = cache.open(tokens)
    assert seq.cached_len == 8  # the host part could not come back; no error
    cache.close(seq)
    cache.free(hog)
    cache.check_invariants()


def test_insert_over_host_only_nodes_brings_them_back() -> None:
    cache = make()
    fill(cache, list(range(12)))
    cache.evict(12)
    kv = fill(cache, list(range(16)))  # recomputed KV for the same tokens, plus one page
    assert cache.match_prefix(list(range(16))).length == 16 and cache.sizes().cached == 16
    assert cache.tree.host_size == 16
    cache.check_invariants()
    assert kv  # the new KV is what the device holds now
    assert torch.equal(read(cache, cache.match_prefix(list(range(16))).slots)["k0"], kv["k0"])


def test_host_eviction_takes_host_only_leaves_first() -> None:
    cache = make(num_slots=16, host_slots=16)
    fill(cache, [1] * 8)  # A: 2 pages, host copy
    cache.evict(8)  # A host-only
    fill(cache, [2] * 8)  # B: device + host; host is now full (16 slots)
    fill(cache, [3] * 4)  # C needs a host page: host-only A goes (whole) before B's host copy
    assert cache.match_prefix([1] * 8).host_length == 0
    assert cache.tree.host_size == 12 and cache.match_prefix([2] * 8).length == 8
    cache.check_invariants()
