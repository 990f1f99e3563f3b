"""A call that raises changes nothing: every public call driven into each of its errors, on a cache
with a host tier, pins, open Sequences and a locked node, compared against a deep fingerprint of the
cache taken before (nodes and every field of them, counters, page states and allocator order,
req_to_token, Sequences, pins, stats, both KV pools)."""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, RadixCache, RadixKVError
from radixkv.pools import SlotAllocator

PS = 4


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _arr(a: np.ndarray | list[int] | None) -> bytes | tuple[int, ...] | None:
    return None if a is None else tuple(a) if isinstance(a, list) else a.tobytes()


def _free_pages(alloc: SlotAllocator) -> tuple[tuple[int, ...], int]:
    return tuple(alloc._runs), alloc._unused  # the freed pages in order (runs), and the never-used ones


def fingerprint(cache: RadixCache) -> tuple:
    tree, ledger, host = cache.tree, cache.ledger, cache.host
    nodes = tuple(sorted((n.id, n.ns, n.key, None if n.parent is None else n.parent.id, n.depth, _arr(n.pages),
                          _arr(n.host_pages), n.lock_ref, n.user_locks, n.seq_locks, n.last_access, n.created,
                          n.hit_count, n.priority, n.evicted) for n in tree.nodes()))
    seqs = tuple((r.row, r.num_tokens, r.tokens[:r.num_tokens].tobytes(), r.slots[:r.kv_len].tobytes(),
                  r.cached_len, r.committed_len, r.kv_len, r.node.id, r.closed) for r in cache.seqs.records())
    pins = (cache.pins.pinned_size, tuple(sorted(cache.pins._until.items())), tuple(sorted(cache.pins._rows.items())))
    pools = tuple(b.clone() for b in cache.kv_pool.k_buffer + cache.kv_pool.v_buffer)
    host_state = (_free_pages(host.allocator), host.backed_up_tokens, host.promoted_tokens,
                  tuple(b.clone() for b in host.pool.k_buffer + host.pool.v_buffer))
    return (nodes, tree.tick, tree.evictable_size, tree.protected_size, tree.host_size,
            tuple(sorted(n.id for n in tree.index.nodes())), tuple(sorted(n.id for n in tree.host_index.nodes())),
            ledger.state.tobytes(), _free_pages(ledger.allocator),
            cache.req_pool.req_to_token.clone(), seqs, pins, vars(cache.stats).copy(), pools, host_state,
            cache.sizes(), cache._thread)


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


HOT = list(range(1, 17))  # 16 tokens: cached on the device, then pushed to the host tier
DEV = list(range(100, 108))  # 8 tokens cached on the device, locked and pinned
OTHER = list(range(200, 208))  # 8 tokens cached on the device, neither locked nor pinned


def _world() -> tuple[RadixCache, dict]:
    """A small cache in the middle of things: HOT only on the host tier, DEV on the device with a
    lock and a pin, OTHER cached, one open Sequence with reserved positions, a closed Sequence's
    stale handle, 8 private slots, and another cache's node and Sequence."""
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=32, page_size=PS,
                                   max_requests=3, max_context_len=40, dtype=torch.float32, host_slots=64,
                                   host_write_policy="write_through", pin_budget_tokens=12), clock=Clock())
    slots = cache.alloc(16)
    cache.kv_pool.k_buffer[0][slots] = torch.rand(16, 1, 2)
    cache.insert(HOT, slots)
    cache.evict(16)  # HOT is host-only now
    for toks in (DEV, OTHER):
        cache.insert(toks, cache.alloc(8))
    locked = cache.match_prefix(DEV).node
    cache.lock(locked)
    assert cache.pin(DEV, ttl=50) == 8
    seq = cache.open(DEV + [7, 7], max_reuse=8)
    cache.reserve(seq, 2)
    stale = cache.open([9] * 5)
    cache.close(stale)
    assert cache.match_prefix(HOT).host_length == 16
    other = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=8, page_size=PS,
                                   max_requests=2, max_context_len=16, dtype=torch.float32))
    return cache, {"seq": seq, "stale": stale, "foreign": other.match_prefix([]).node, "other_seq": other.open([1, 2]),
                   "unlocked": cache.match_prefix(OTHER).node, "dev_slots": cache.match_prefix(DEV).slots,
                   "other_slots": cache.match_prefix(OTHER).slots, "private": cache.alloc(4)}


def _second_adopter(cache: RadixCache) -> None:
    """adopt_thread from a thread while another adopter (this one) is alive."""
    errors: list[BaseException] = []
    cache.adopt_thread()

    def adopt() -> None:
        try:
            cache.adopt_thread()
        except BaseException as e:  # noqa: BLE001 - re-raised below on the test's thread
            errors.append(e)

    t = threading.Thread(target=adopt)
    t.start()
    t.join()
    if errors:
        raise errors[0]


CALLS: dict[str, Callable[[RadixCache, dict], object]] = {
    "match_prefix: negative id": lambda c, w: c.match_prefix([1, -2]),
    "match_prefix: float ids": lambda c, w: c.match_prefix([1.5]),
    "match_prefix: bad namespace": lambda c, w: c.match_prefix([1], namespace=object()),
    "lock: not a node": lambda c, w: c.lock("node"),
    "lock: another cache's node": lambda c, w: c.lock(w["foreign"]),
    "unlock: never locked by the user": lambda c, w: c.unlock(w["unlocked"]),
    "alloc: negative": lambda c, w: c.alloc(-1),
    "alloc: more than eviction can free": lambda c, w: c.alloc(1000),
    "free: a duplicated slot": lambda c, w: c.free([0, 0]),
    "free: cached slots": lambda c, w: c.free(w["dev_slots"]),
    "insert: slots and tokens differ in length": lambda c, w: c.insert([1, 2, 3, 4], [0]),
    "insert: cached slots under other tokens": lambda c, w: c.insert([5, 5, 5, 5], w["dev_slots"][:4]),
    "insert: past the pin budget": lambda c, w: c.insert(OTHER, w["other_slots"], pin_ttl=5),
    "insert: bad priority": lambda c, w: c.insert([1, 2, 3, 4], w["private"], priority="hi"),
    "evict: negative": lambda c, w: c.evict(-3),
    "open: past the pin budget with a host-tier hit": lambda c, w: c.open(HOT + [1], pin_ttl=5),
    "open: longer than max_context_len": lambda c, w: c.open([1] * 41),
    "open: bad max_reuse": lambda c, w: c.open(HOT, max_reuse=-1),
    "open: bad pin_ttl": lambda c, w: c.open(HOT, pin_ttl=float("nan")),
    "open: every row in use": lambda c, w: c.open(HOT),
    "pin: past the budget": lambda c, w: c.pin(OTHER, ttl=5),
    "pin: bad ttl": lambda c, w: c.pin(DEV, ttl=0),
    "reserve: more than the pool": lambda c, w: c.reserve(w["seq"], 30),
    "reserve: past max_context_len": lambda c, w: c.reserve(w["seq"], 31),
    "reserve: a closed Sequence": lambda c, w: c.reserve(w["stale"], 1),
    "reserve: another cache's Sequence": lambda c, w: c.reserve(w["other_seq"], 1),
    "commit: tokens that differ from the Sequence's": lambda c, w: c.commit(w["seq"], [1, 2]),
    "commit: past kv_len": lambda c, w: c.commit(w["seq"], [7, 7, 7]),
    "close: a closed Sequence": lambda c, w: c.close(w["stale"]),
    "batch: a closed Sequence": lambda c, w: c.batch([w["seq"], w["stale"]]),
    "adopt_thread: a second adopter while the first runs": lambda c, w: _second_adopter(c),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_call_that_raises_changes_nothing(name: str) -> None:
    cache, world = _world()
    if name.startswith("adopt_thread"):
        cache.adopt_thread()  # the test thread is the first adopter; the fingerprint includes the owner
    if name == "open: every row in use":
        cache.open([3]), cache.open([4])  # the last free rows
    before = fingerprint(cache)
    with pytest.raises(RadixKVError):
        CALLS[name](cache, world)
    after = fingerprint(cache)
    diff = [i for i, (a, b) in enumerate(zip(before, after)) if not _same(a, b)]
    assert not diff, f"{name}: fingerprint parts {diff} changed"
    cache.check_invariants()


def test_open_past_the_pin_budget_leaves_the_host_tier_hit_unpromoted() -> None:
    """The issue's case by hand: the host-only prefix stays host-only (device match 0, not 16)."""
    cache, _ = _world()
    with pytest.raises(RadixKVError):
        cache.open(HOT + [1], pin_ttl=5)
    m = cache.match_prefix(HOT)
    assert (m.length, m.host_length) == (0, 16)
