"""Pins with a time to live, on a fake clock: what survives eviction against an unpinned cache run
side by side, expiry, the budget, and argument checks (typed errors, nothing changed)."""

from __future__ import annotations

import math

import pytest
import torch

from radixkv import CacheConfig, ConfigError, InvalidArgumentError, PinBudgetError, RadixCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cache(clock: Clock, budget: int = 8, policy: str = "lru", page_size: int = 1) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=16, page_size=page_size,
                                  max_requests=4, max_context_len=64, dtype=torch.float32, eviction=policy,
                                  pin_budget_tokens=budget), clock=clock)


def _put(cache: RadixCache, toks: list[int], **kw) -> None:
    m = cache.match_prefix(toks)
    cache.insert(toks, torch.cat([m.slots, cache.alloc(len(toks) - m.length)]), **kw)


SYSTEM, A, B, C = [1] * 4 + [2] * 4, [3] * 8, [4] * 8, [5] * 8


def _survivors(pin: bool, advance: float = 0.0, policy: str = "lru") -> list[bool]:
    """Cache SYSTEM (oldest), A, then B, C under pressure; which of SYSTEM, A, B survive."""
    clock = Clock()
    cache = _cache(clock, policy=policy)
    _put(cache, SYSTEM)
    if pin:
        assert cache.pin(SYSTEM, ttl=10) == 8 and cache.pinned_tokens() == 8
    _put(cache, A)
    clock.now += advance
    _put(cache, B)  # the pool (16) is full: one of SYSTEM, A goes
    cache.check_invariants()
    return [cache.match_prefix(t).length == 8 for t in (SYSTEM, A, B)]


@pytest.mark.parametrize("policy", ["lru", "lfu", "adaptive"])
def test_a_pinned_prefix_outlives_unpinned_ones_until_its_ttl(policy: str) -> None:
    assert _survivors(pin=False, policy=policy) == [False, True, True]  # without a pin the oldest goes
    assert _survivors(pin=True, policy=policy) == [True, False, True]  # pinned: the unpinned one goes
    assert _survivors(pin=True, advance=10.0, policy=policy) == [False, True, True]  # expired: as unpinned


def test_pinned_pages_go_when_nothing_unpinned_is_evictable() -> None:
    clock = Clock()
    cache = _cache(clock, budget=16)
    _put(cache, SYSTEM)
    _put(cache, A)
    cache.pin(SYSTEM, ttl=5)
    cache.pin(A, ttl=5)
    assert cache.pinned_tokens() == 16
    slots = cache.alloc(4)  # everything is pinned: eviction still serves, trimming a pinned leaf
    assert cache.pinned_tokens() == 12 and cache.sizes().cached == 12
    cache.free(slots)
    cache.check_invariants()


def test_budget_is_enforced_with_nothing_changed() -> None:
    clock = Clock()
    cache = _cache(clock, budget=10)
    _put(cache, SYSTEM)
    _put(cache, A)
    cache.pin(SYSTEM, ttl=5)
    before = cache.sizes()
    with pytest.raises(PinBudgetError):
        cache.pin(A, ttl=5)  # 8 + 8 > 10
    assert cache.pinned_tokens() == 8 and cache.sizes() == before
    assert cache.pin(SYSTEM[:4], ttl=50) == 4 and cache.pinned_tokens() == 8  # no new tokens, a later deadline
    clock.now += 6
    assert cache.pinned_tokens() == 4  # the rest of SYSTEM expired at 105; its first half lives to 150
    assert cache.pin(A[:4], ttl=5) == 4 and cache.pinned_tokens() == 8
    new = cache.alloc(8)
    before = cache.sizes()
    with pytest.raises(PinBudgetError):
        cache.insert(B, new, pin_ttl=5)  # 8 more would make 16 > 10
    assert cache.sizes() == before and cache.pinned_tokens() == 8
    cache.free(new)
    cache.check_invariants()


def test_pin_ttl_on_insert_and_open() -> None:
    clock = Clock()
    cache = _cache(clock, budget=12, page_size=4)
    _put(cache, SYSTEM, pin_ttl=3)
    assert cache.pinned_tokens() == 8
    seq = cache.open(SYSTEM + A, pin_ttl=20)  # re-pins the reused prefix until 120
    cache.reserve(seq, 8)
    cache.commit(seq, A[:6])  # one new whole page: pinned too (8 + 4 <= 12)
    assert cache.pinned_tokens() == 12
    cache.commit(seq, A[6:])  # the next page does not fit the budget: cached, unpinned, no error
    assert cache.pinned_tokens() == 12
    cache.check_invariants()
    cache.close(seq)
    clock.now += 20
    assert cache.pinned_tokens() == 0
    cache.check_invariants()


@pytest.mark.parametrize("ttl", [0, -1, math.inf, math.nan, True, "5", None])
def test_bad_ttl_raises_typed_error(ttl: object) -> None:
    cache = _cache(Clock())
    _put(cache, SYSTEM)
    new = cache.alloc(8)
    before = cache.sizes()
    with pytest.raises(InvalidArgumentError):
        cache.pin(SYSTEM, ttl=ttl)
    if ttl is not None:  # None means "no pin" for insert and open
        with pytest.raises(InvalidArgumentError):
            cache.insert(A, new, pin_ttl=ttl)
        with pytest.raises(InvalidArgumentError):
            cache.open(A, pin_ttl=ttl)
    assert cache.sizes() == before and cache.pinned_tokens() == 0 and not cache.sequences()


def test_pinning_off_and_config_checks() -> None:
    cache = _cache(Clock(), budget=0)
    with pytest.raises(PinBudgetError):
        cache.pin(SYSTEM, ttl=5)
    for bad in (-1, 17, True, 2.0):
        with pytest.raises(ConfigError):
            CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=16, pin_budget_tokens=bad)
    with pytest.raises(ConfigError):
        RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=16), clock=5)


def test_default_budget_is_half_the_pool_and_pins_cost_nothing_until_used() -> None:
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=16, dtype=torch.float32),
                       clock=Clock())
    assert cache.config.pin_budget == 8 and cache.tree.pins is None
    _put(cache, SYSTEM)
    _put(cache, A)
    assert cache.pin(SYSTEM, ttl=1) == 8 and cache.tree.pins is not None
    with pytest.raises(PinBudgetError):
        cache.pin(A, ttl=1)
    cache.check_invariants()


@pytest.mark.parametrize("bad", [None, "100", float("nan"), True])
def test_a_clock_that_returns_no_number_is_a_typed_error(bad: object) -> None:
    """The clock is read at every pin and expiry: anything but a finite number is a ConfigError,
    with nothing pinned (before: a raw TypeError from `None + ttl`)."""
    clock = Clock()
    cache = _cache(clock)
    _put(cache, SYSTEM)
    clock.now = bad  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="clock"):
        cache.pin(SYSTEM, ttl=1)
    clock.now = 100.0
    assert cache.pinned_tokens() == 0
    cache.check_invariants()


def test_repinning_one_prefix_keeps_the_expiry_heap_bounded_by_live_pins() -> None:
    """10k re-pins of one 8-token path (a new deadline each time): the heap holds at most
    2 x live pins + 64 entries (before: one per node per re-pin, 80,000), and the last deadline rules."""
    clock = Clock()
    cache = _cache(clock, budget=16, page_size=1)
    for i in range(8):  # eight nodes on one path, one token each
        _put(cache, SYSTEM[:i + 1])
    for i in range(10_000):
        cache.pin(SYSTEM, ttl=1 + i * 1e-3)
    live = len(cache.pins._until)
    assert live == 8 and len(cache.pins._expiry) <= 2 * live + 64
    cache.check_invariants()
    clock.now += 1 + 9_999e-3 - 1e-6
    assert cache.pinned_tokens() == 8  # not yet
    clock.now += 2e-6
    assert cache.pinned_tokens() == 0
