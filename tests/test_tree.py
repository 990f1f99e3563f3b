"""Tree-level behaviour through RadixCache: matching, splitting, namespaces, pages, locks, eviction order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, LockError, RadixCache
from radixkv.insert_slots import RESUME_MIN
from radixkv.pools import page_slots
from radixkv.runs import count, expand


def make(page_size: int = 1, num_slots: int = 64, eviction: str = "lru") -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=num_slots,
                                  page_size=page_size, dtype=torch.float32, eviction=eviction))


def put(cache: RadixCache, tokens: list[int], namespace: object = None) -> torch.Tensor:
    """Tree-level lifecycle: match, lock, alloc the rest, insert, unlock. Returns the slots used."""
    r = cache.match_prefix(tokens, namespace)
    cache.lock(r.node)
    slots = torch.cat([r.slots, cache.alloc(len(tokens) - r.length)])
    cache.insert(tokens, slots, namespace)
    cache.unlock(r.node)
    cache.check_invariants()
    return slots


def test_match_splits_and_the_lower_half_keeps_the_node() -> None:
    cache = make()
    slots = put(cache, [1, 2, 3, 4, 5])
    leaf = cache.match_prefix([1, 2, 3, 4, 5]).node
    r = cache.match_prefix([1, 2, 3, 9])
    assert r.length == 3 and torch.equal(r.slots, slots[:3])
    assert r.node.end == 3 and r.node is not leaf and leaf.parent is r.node
    assert cache.match_prefix([1, 2, 3, 4, 5]).node is leaf  # still means the whole prefix
    cache.check_invariants()


def test_insert_returns_cached_length_and_frees_duplicates() -> None:
    cache = make()
    put(cache, [1, 2, 3])
    dup = cache.alloc(5)
    free_before = cache.sizes().free
    assert cache.insert([1, 2, 3, 7, 8], dup) == 3  # 3 duplicates freed, 2 new tokens cached
    assert cache.sizes().free == free_before + 3
    assert torch.equal(cache.match_prefix([1, 2, 3, 7, 8]).slots[3:], dup[3:])
    cache.check_invariants()


@pytest.mark.parametrize("page_size", [1, 4])
def test_partial_last_page_is_never_matched(page_size: int) -> None:
    cache = make(page_size)
    put(cache, list(range(10)))
    assert cache.sizes().cached == 10 // page_size * page_size
    assert cache.match_prefix(list(range(10))).length == 10 // page_size * page_size
    assert cache.match_prefix(list(range(2 * page_size - 1))).length == page_size
    assert cache.match_prefix(list(range(page_size - 1)) + [99]).length == 0
    cache.check_invariants()


def test_pages_compare_whole() -> None:
    cache = make(page_size=4)
    put(cache, [0, 1, 2, 3, 4, 5, 6, 7])
    assert cache.match_prefix([0, 1, 2, 3, 4, 5, 6, 9]).length == 4  # a page differing in its last token
    put(cache, [0, 1, 2, 3, 4, 5, 6, 9])
    assert cache.sizes().cached == 12
    cache.check_invariants()


def test_namespaces_never_share() -> None:
    cache = make()
    put(cache, [1, 2, 3], namespace="lora-a")
    assert cache.match_prefix([1, 2, 3]).length == 0
    assert cache.match_prefix([1, 2, 3], namespace="lora-b").length == 0
    assert cache.match_prefix([1, 2, 3], namespace="lora-a").length == 3
    put(cache, [1, 2, 3])
    assert cache.sizes().cached == 6


def test_lock_protects_the_path_and_pairs_with_unlock() -> None:
    cache = make(num_slots=8)
    put(cache, [1, 2, 3, 4])
    node = cache.match_prefix([1, 2]).node
    cache.lock(node)
    assert cache.sizes().protected == 2 and cache.sizes().evictable == 2
    assert cache.evict(100) == 2 and cache.match_prefix([1, 2, 3]).length == 2
    with pytest.raises(LockError):
        cache.unlock(cache.match_prefix([9]).node)  # the root was never locked
    cache.unlock(node)
    with pytest.raises(LockError):
        cache.unlock(node)
    assert cache.evict(100) == 2
    with pytest.raises(LockError):
        cache.lock(node)  # evicted
    cache.check_invariants()


def test_root_lock_is_counted() -> None:
    cache = make()
    root = cache.match_prefix([]).node
    cache.lock(root)
    cache.lock(root)
    cache.unlock(root)
    cache.unlock(root)
    with pytest.raises(LockError):
        cache.unlock(root)


@pytest.mark.parametrize("page_size", [1, 4])
def test_evict_trims_a_leaf_tail_page_by_page(page_size: int) -> None:
    cache = make(page_size)
    put(cache, list(range(8 * page_size)))
    assert cache.evict(page_size + 1) == 2 * page_size  # two pages, not the whole 8-page leaf
    assert cache.match_prefix(list(range(8 * page_size))).length == 6 * page_size
    cache.check_invariants()


@pytest.mark.parametrize("policy, survivor", [("lru", [3]), ("fifo", [3]), ("lfu", [1])])
def test_policies_pick_their_victim(policy: str, survivor: list[int]) -> None:
    cache = make(eviction=policy)
    for first in (1, 2, 3):
        put(cache, [first, 10, 11])
    for _ in range(3):
        cache.match_prefix([1, 10, 11])  # 1: most hits
    put(cache, [3, 10, 11])  # 3: most recent (one hit); 2: oldest, no hits
    cache.evict(6)
    left = [f for f in (1, 2, 3) if cache.match_prefix([f, 10, 11]).length == 3]
    assert left == survivor


def test_priority_policy_evicts_low_priority_first() -> None:
    cache = make(eviction="priority")
    for first, prio in ((1, 5), (2, 0), (3, 1)):
        slots = cache.alloc(2)
        cache.insert([first, 9], slots, priority=prio)
    cache.evict(4)
    assert [f for f in (1, 2, 3) if cache.match_prefix([f, 9]).length] == [1]


def test_eviction_frees_parents_once_children_go() -> None:
    cache = make()
    put(cache, [1, 2, 3])
    put(cache, [1, 2, 4])
    assert cache.evict(100) == 4
    assert cache.sizes().cached == 0 and cache.sizes().free == 64
    cache.check_invariants()


def test_a_partial_match_is_a_hit_for_the_matched_part_only() -> None:
    cache = make(eviction="lfu")
    put(cache, [1, 2, 3, 4])
    tail = cache.match_prefix([1, 2, 3, 4]).node
    hits = tail.hit_count
    for _ in range(3):
        head = cache.match_prefix([1, 2, 9]).node
    assert head.hit_count == hits + 3 and tail.hit_count == hits  # the unmatched [3, 4] was not reused
    cache.check_invariants()


def tree_shape(cache: RadixCache) -> list[tuple]:
    """Every node's namespace, whole prefix and slots (None: not on the device), in a fixed order."""
    out = []
    for node in cache.tree.nodes():
        prefix, x = [], node
        while x.parent is not None:
            prefix[:0] = x.tokens().tolist()
            x = x.parent
        pages = None if node.pages is None else expand(node.pages, count(node.pages))
        slots = None if pages is None else tuple(page_slots(pages, cache.page_size).tolist())
        out.append((node.ns, tuple(prefix), slots))
    return sorted(out, key=repr)


RESUMES = {"extends": True, "ancestor split": True, "split since": False, "differs": False, "shorter": False,
           "other namespace": False, "evicted": False, "short match": False}


@pytest.mark.parametrize("page_size", [1, 2])
@pytest.mark.parametrize("case", list(RESUMES))
def test_insert_walks_on_from_the_last_match_only_where_its_path_is_the_inserts(page_size: int, case: str) -> None:
    # insert continues the last match's walk from its node (keying only the tokens below it) when the tokens start
    # with that node's path and it still holds its pages; else it walks from the root. Both must build the same tree.
    u = RESUME_MIN // 4  # tokens a unit: the match below is 8 units long, long enough to walk on from

    def run(resume: bool) -> tuple:
        cache = make(page_size, num_slots=32 * u)
        a = list(range(1, 12 * u + 1))
        put(cache, a[:8 * u])
        put(cache, a[:4 * u] + list(range(50000, 50000 + 4 * u)))  # [:4u] -> {[4u:8u], 50000...}
        r = cache.match_prefix(a[:8 * u])
        cache.lock(r.node)
        toks, ns, kept = a, None, r.length  # kept: how many of the match's slots the insert reuses
        if case == "differs":
            toks, kept = a[:2 * u] + list(range(60000, 60000 + 2 * u)) + a[4 * u:], 0
        elif case == "shorter":
            toks, kept = a[:4 * u], 0
        elif case == "other namespace":
            ns, kept = "other", 0
        elif case == "split since":
            cache.locate(a[:6 * u])  # splits the match's node: it keeps [6u:8u] in a new pages array
        elif case == "ancestor split":
            cache.locate(a[:2 * u])  # splits [:4u] above the match's node, which keeps its pages
        elif case == "short match":  # a match below RESUME_MIN tokens: insert walks from the root
            cache.unlock(r.node)
            r = cache.match_prefix(a[:u])
            cache.lock(r.node)
            kept = r.length
        elif case == "evicted":
            cache.unlock(r.node)
            cache.evict(32 * u)
            kept = 0
        slots = torch.cat([r.slots[:kept], cache.alloc(len(toks) - kept)])
        arr = np.array(toks, dtype=np.int32)
        n = len(arr) // page_size * page_size
        resumes = cache._matched.resumes(arr, n, cache.tree.root(cache._key(arr, ns, None)[0])) is not None
        assert resumes == RESUMES[case]
        if not resume:
            cache.match_prefix([], namespace="unrelated")  # no match to walk on from: insert walks from the root
            assert cache._matched is None
        got = cache.insert(toks, slots, ns)
        if case != "evicted":
            cache.unlock(r.node)
        cache.check_invariants()
        return got, cache.sizes(), tree_shape(cache)

    assert run(True) == run(False)
