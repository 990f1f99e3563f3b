"""Secondary layer groups in RadixCache (cache_groups.py): one PageLedger per group, components
attached to nodes, each group's pages back to its own ledger on eviction, group components evicted
before full KV when a group runs short, and check_invariants checking every group's ledger against
the tree. Every step is checked against check_invariants and against page counts worked out by hand."""

from __future__ import annotations

import pytest
import torch

from radixkv import (CacheConfig, GroupSpec, InvalidArgumentError, InvalidSlotsError, InvalidTokensError,
                     OutOfSlotsError, RadixCache)
from radixkv.errors import ConfigError
from radixkv.radix import TreeNode

PS = 2
WINDOW, STATE = 1, 2


def make(window_slots: int = 16, states: int = 4, num_slots: int = 32) -> RadixCache:
    groups = (GroupSpec("window", window_slots, size=4, layers=(1,)), GroupSpec("state", states))
    return RadixCache(CacheConfig(num_layers=2, num_kv_heads=1, head_dim=4, num_slots=num_slots, page_size=PS,
                                  eviction="lru", groups=groups))


def cached(cache: RadixCache, tokens: list[int]) -> TreeNode:
    """The node ending a freshly inserted prefix (match_prefix would not claim it: no window KV yet)."""
    cache.insert(tokens, cache.alloc(len(tokens)))
    node = cache.locate(tokens)
    assert node.end == len(tokens) and cache.match_prefix(tokens).length == 0
    return node


def with_components(cache: RadixCache, tokens: list[int]) -> TreeNode:
    node = cached(cache, tokens)
    cache.group(WINDOW).attach(node, cache.group(WINDOW).alloc(node.size // PS))
    cache.group(STATE).attach(node, cache.group(STATE).alloc(1))
    cache.check_invariants()
    return node


def test_one_group_is_todays_cache() -> None:
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=8))
    assert cache.groups == () and cache.tree.group_index == ()
    with pytest.raises(InvalidArgumentError):
        cache.group(1)


def test_attach_read_and_device_eviction_gives_each_group_its_pages_back() -> None:
    cache = make()
    node = with_components(cache, list(range(8)))
    window = cache.group(WINDOW).component(node)
    assert window is not None and len(window) == 4 and len(cache.group(STATE).component(node)) == 1
    assert cache.group(WINDOW).sizes() == (4, 4, 0, 8) and cache.group(STATE).sizes() == (3, 1, 0, 4)
    assert cache.match_prefix(list(range(8))).length == 8  # window KV now covers the whole prefix
    assert cache.match_prefix(list(range(4))).length == 0  # no snapshot at 4: the state group cannot resume
    assert cache.locate(list(range(4))).end == 4  # split: window KV is cut per page, the snapshot stays below
    upper = node.parent
    assert torch.equal(torch.cat([cache.group(WINDOW).component(upper), cache.group(WINDOW).component(node)]), window)
    assert cache.group(STATE).component(upper) is None
    cache.check_invariants()
    assert cache.evict(32) == 8
    assert cache.group(WINDOW).sizes() == (8, 0, 0, 8) and cache.group(STATE).sizes() == (4, 0, 0, 4)
    cache.check_invariants()


def test_a_short_group_evicts_its_components_before_full_kv_and_spares_locked_ones() -> None:
    cache = make(window_slots=8)
    a = with_components(cache, [1, 1, 2, 2])
    b = with_components(cache, [3, 3, 4, 4])
    cache.lock(a)
    full = cache.sizes().cached
    pages = cache.group(WINDOW).alloc(2)  # none free: b's window KV goes, a's is locked
    assert cache.sizes().cached == full  # no full KV went
    assert cache.group(WINDOW).component(b) is None and cache.group(WINDOW).component(a) is not None
    assert cache.group(STATE).component(b) is not None  # other groups untouched
    cache.check_invariants()
    before = cache.group(WINDOW).sizes()
    with pytest.raises(OutOfSlotsError):
        cache.group(WINDOW).alloc(1)  # only a's (locked) component is left
    assert cache.group(WINDOW).sizes() == before
    cache.group(WINDOW).free(pages)
    cache.unlock(a)
    cache.check_invariants()


def test_bad_group_calls_change_nothing() -> None:
    cache = make()
    node = with_components(cache, [5, 5, 6, 6])
    before = (cache.group(WINDOW).sizes(), cache.group(STATE).sizes(), cache.sizes())
    pages = cache.group(WINDOW).alloc(3)
    with pytest.raises(InvalidSlotsError):
        cache.group(WINDOW).attach(cached(cache, [7, 7, 8, 8]), pages)  # 3 pages for a 2-page edge
    with pytest.raises(InvalidSlotsError):
        cache.group(WINDOW).attach(node, pages[:2])  # node already holds window KV
    with pytest.raises(InvalidSlotsError):
        cache.group(WINDOW).free(cache.group(WINDOW).component(node))  # cached pages
    with pytest.raises(InvalidSlotsError):
        cache.group(WINDOW).free(torch.tensor([99]))
    cache.group(WINDOW).free(pages)
    cache.evict(cache.sizes().cached)
    assert cache.group(WINDOW).sizes() == (8, 0, 0, 8) and before[0] == (6, 2, 0, 8)
    cache.check_invariants()


def test_check_invariants_compares_each_group_ledger_with_the_tree() -> None:
    cache = make()
    node = with_components(cache, [1, 2, 3, 4])
    node.secondary[WINDOW - 1] = None  # the tree forgets a component its ledger still counts as cached
    cache.tree.group_index[WINDOW - 1].discard(node)
    with pytest.raises(AssertionError, match="group 1"):
        cache.check_invariants()


def test_group_specs_are_validated() -> None:
    with pytest.raises(ConfigError):
        GroupSpec("window", 8)  # a window needs a size and layers
    with pytest.raises(ConfigError):
        GroupSpec("chunked", 8)
    with pytest.raises(ConfigError):
        CacheConfig(num_layers=2, num_kv_heads=1, head_dim=4, num_slots=8, page_size=2,
                    groups=(GroupSpec("window", 7, size=4, layers=(1,)),))  # not whole pages
    with pytest.raises(ConfigError):
        CacheConfig(num_layers=2, num_kv_heads=1, head_dim=4, num_slots=8,
                    groups=(GroupSpec("window", 8, size=4, layers=(2,)),))  # no layer 2


def test_locate_finds_where_a_component_attaches_and_counts_no_query() -> None:
    """locate: the node ending a prefix whose full KV is cached, whatever the groups hold (match_prefix
    claims nothing there: no window KV, no snapshot); not a use, no query counted; bad tokens raise
    InvalidTokensError with nothing changed."""
    cache = make()
    node = cached(cache, [1, 1, 2, 2, 3, 3])
    tick, before = node.last_access, (cache.sizes(), cache.metrics())
    assert cache.locate([1, 1, 2, 2, 3, 3, 4]) is node  # the partial last page is not located
    upper = cache.locate([1, 1, 9])
    assert upper.end == 2 and node.parent is upper and node.last_access == tick
    assert cache.metrics() == before[1] and cache.sizes() == before[0]  # (query and hit counters included)
    assert cache.locate([7, 7]).end == 0  # nothing cached: the namespace root
    with pytest.raises(InvalidTokensError):
        cache.locate([1, -1])
    assert cache.sizes() == before[0]
    cache.check_invariants()
