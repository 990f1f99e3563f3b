"""The unsafe calls a hostile user tried on the old core (issue 10, part 3), each now impossible:
typed error, nothing changed, and no request can reach another request's KV."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest
import torch

from radixkv import (CacheConfig, ConfigError, InvalidArgumentError, InvalidTokensError, LockError, RadixCache,
                     RadixKVError, SequenceError, ThreadOwnershipError)
from radixkv.events import block_hashes
from radixkv.insert_slots import RESUME_MIN
from radixkv.keys import ExtraKeys


def make(**kw: object) -> RadixCache:
    base = dict(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=64, page_size=4, max_requests=4,
                max_context_len=32, dtype=torch.float32)
    return RadixCache(CacheConfig(**{**base, **kw}))


def put(cache: RadixCache, tokens: list[int], namespace: object = None) -> torch.Tensor:
    r = cache.match_prefix(tokens, namespace)
    slots = torch.cat([r.slots, cache.alloc(len(tokens) - r.length)])
    cache.insert(tokens, slots, namespace)
    return slots


def unchanged(cache: RadixCache, call, error: type[Exception]) -> None:  # noqa: ANN001
    before = cache.sizes()
    with pytest.raises(error):
        call()
    assert cache.sizes() == before
    cache.check_invariants()


def test_a_sequence_lock_is_released_only_by_close() -> None:
    cache = make()
    put(cache, list(range(8)))
    seq = cache.open(list(range(8)) + [9])
    unchanged(cache, lambda: cache.unlock(seq.node), LockError)  # the node is locked, but not by lock()
    assert cache.sizes().protected == 8
    cache.lock(seq.node)
    cache.unlock(seq.node)  # a lock() of the node pairs with this unlock; the Sequence still holds it
    unchanged(cache, lambda: cache.unlock(seq.node), LockError)
    assert cache.evict(64) == 0  # nothing the Sequence reads can go
    cache.close(seq)
    assert cache.evict(64) == 8


@pytest.mark.parametrize("bad", [None, "high", 1.5, True, np.float64(2.0)])
def test_every_argument_is_checked_before_anything_changes(bad: object) -> None:
    cache = make()
    held = cache.alloc(8)
    unchanged(cache, lambda: cache.insert(list(range(8)), held, priority=bad), InvalidArgumentError)
    unchanged(cache, lambda: cache.open(list(range(8)), priority=bad), InvalidArgumentError)
    cache.insert(list(range(8)), held)  # the slots are still private and insertable
    assert cache.match_prefix(list(range(8))).length == 8


def test_a_copy_of_a_closed_sequence_cannot_close_its_rows_new_holder() -> None:
    cache = make(max_requests=1)
    old = cache.open([1, 2, 3])
    stale = copy.copy(old)
    cache.close(old)
    new = cache.open([4, 5, 6, 7, 8])
    cache.reserve(new, 5)
    assert new.row == old.row
    for call in (lambda: cache.close(stale), lambda: cache.close(old), lambda: cache.reserve(stale, 1),
                 lambda: cache.commit(stale, [1]), lambda: cache.batch([stale])):
        unchanged(cache, call, SequenceError)
    live = copy.copy(new)
    unchanged(cache, lambda: cache.close(live), SequenceError)  # only the Sequence open() returned
    assert cache.sizes().private == 8 and len(cache.batch([new]).out_slots) == 5


def test_a_node_of_another_cache_is_refused() -> None:
    a, b = make(), make()
    put(b, list(range(8)))
    node = b.match_prefix(list(range(8))).node
    unchanged(a, lambda: a.lock(node), LockError)
    b.lock(node)
    unchanged(a, lambda: a.unlock(node), LockError)
    b.unlock(node)
    b.check_invariants()


@pytest.mark.parametrize("namespace", [1.0, True, np.int64(1), [1], {"a": 1}, object(), (1, [2])])
def test_namespaces_outside_str_bytes_int_are_refused(namespace: object) -> None:
    cache = make()
    unchanged(cache, lambda: cache.match_prefix([1, 2, 3, 4], namespace), InvalidArgumentError)
    unchanged(cache, lambda: cache.open([1, 2, 3, 4], namespace), InvalidArgumentError)


def test_namespaces_are_distinct_by_type_and_value() -> None:
    cache = make(num_slots=128)
    names = [None, 1, "1", b"1", (1,), ("1",), -1, 2**70, ""]
    for ns in names:
        put(cache, [7] * 8, ns)
    assert cache.sizes().cached == 8 * len(names)  # none shares another's KV
    assert block_hashes([7] * 8, 1, 4) != block_hashes([7] * 8, "1", 4) != block_hashes([7] * 8, (1,), 4)
    assert block_hashes([7] * 8, (1, "a"), 4) == block_hashes([7] * 8, tuple([1, "a"]), 4)
    cache.check_invariants()


def test_event_hashes_do_not_depend_on_arrival_order() -> None:
    caches = [make(kv_events=True, event_block_size=4) for _ in range(2)]
    traffic = [(list(range(8)), "tenant"), (list(range(4)) + [9] * 4, ("lora", 3)), ([5] * 8, None)]
    for cache, order in zip(caches, (traffic, traffic[::-1])):
        for tokens, ns in order:
            put(cache, tokens, ns)
    stored = [sorted(h for e in c.block_snapshot()[1:] for h in e.block_hashes) for c in caches]
    assert stored[0] == stored[1]


def test_reads_of_unseen_namespaces_leave_no_roots_behind() -> None:
    cache = make()
    for i in range(5000):
        r = cache.match_prefix([1, 2, 3, 4], f"tenant-{i}")
        assert r.length == 0
    assert len(cache.tree.roots) == 0
    r = cache.match_prefix([1, 2, 3, 4], "kept")
    cache.lock(r.node)  # a locked root stays, and is the same root a later insert uses
    put(cache, [1, 2, 3, 4], "kept")
    assert cache.match_prefix([1, 2, 3, 4], "kept").node.parent is r.node
    cache.unlock(r.node)
    cache.evict(64)
    assert len(cache.tree.roots) == 0
    cache.check_invariants()


@pytest.mark.parametrize("call", [
    lambda c: c.alloc(-1), lambda c: c.alloc(1.0), lambda c: c.evict(1.0), lambda c: c.evict(-3),
    lambda c: c.reserve(c.open([1]), -1), lambda c: c.open([1, 2], max_reuse=-1), lambda c: c.batch(None),
    lambda c: c.batch([None]), lambda c: c.match_prefix([[1, 2], [3]]), lambda c: c.match_prefix([1, [2, 3]]),
    lambda c: c.match_prefix([1, None]), lambda c: c.match_prefix(["a"]), lambda c: c.insert([1], [2**70]),
    lambda c: c.free([1.5]), lambda c: c.lock(None), lambda c: c.match_prefix([2**80]),
])
def test_no_untyped_error_escapes(call) -> None:  # noqa: ANN001
    cache = make()
    before = cache.sizes()
    with pytest.raises(RadixKVError):
        call(cache)
    assert cache.sizes().cached == before.cached and cache.sizes().free >= before.free - 4
    cache.check_invariants()


@pytest.mark.parametrize("kw", [dict(eviction=["lru"]), dict(eviction="bogus"), dict(device="tpu"),
                                dict(device="cuda:7" if torch.cuda.is_available() else "cuda"),
                                dict(dtype="float16"), dict(kv_events=1), dict(page_size=True)])
def test_bad_config_is_a_config_error(kw: dict) -> None:
    with pytest.raises(ConfigError):
        make(**kw)


def test_match_slots_are_the_callers_to_write() -> None:
    cache = make()
    slots = put(cache, list(range(8)))
    r = cache.match_prefix(list(range(8)))
    r.slots.fill_(63)  # a caller scribbling on its result must not reach the tree
    assert torch.equal(cache.match_prefix(list(range(8))).slots, slots)
    cache.check_invariants()


def test_a_second_thread_is_refused() -> None:
    cache = make()
    put(cache, list(range(8)))
    errors: list[BaseException] = []

    def hostile() -> None:
        for call in (lambda: cache.alloc(4), lambda: cache.match_prefix([1]), lambda: cache.open([1]),
                     lambda: cache.sizes(), lambda: cache.evict(4)):
            try:
                call()
            except BaseException as e:  # noqa: BLE001 - collected and checked below
                errors.append(e)

    t = threading.Thread(target=hostile)
    t.start()
    t.join()
    assert len(errors) == 5 and all(isinstance(e, ThreadOwnershipError) for e in errors)
    cache.check_invariants()
    assert cache.sizes().private == 0 and cache.sizes().cached == 8

    def adopt() -> None:
        cache.adopt_thread()
        put(cache, list(range(8, 16)))

    t = threading.Thread(target=adopt)
    t.start()
    t.join()
    with pytest.raises(ThreadOwnershipError):
        cache.alloc(1)  # the cache now belongs to the thread that adopted it
    cache.adopt_thread()
    assert cache.sizes().cached == 16


def test_float_ids_are_never_truncated() -> None:
    cache = make()
    unchanged(cache, lambda: cache.open([1.9, 2.7]), InvalidTokensError)
    unchanged(cache, lambda: cache.open(np.array([1.0, 2.0])), InvalidTokensError)


def test_two_threads_adopting_one_cache_is_a_typed_error() -> None:
    """Two threads both call adopt_thread and then drive the cache: before, both got in and their
    bookkeeping interleaved (wrong KV). Now the second adopt raises while the first adopter runs;
    after release_thread() (or the first adopter's end) the second may adopt."""
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=2, num_slots=64, page_size=1,
                                   max_requests=4, max_context_len=64, dtype=torch.float32))
    adopted, release, results = threading.Event(), threading.Event(), {}

    def first() -> None:
        cache.adopt_thread()
        adopted.set()
        release.wait(5)
        put(cache, list(range(8)))
        cache.release_thread()

    def second() -> None:
        try:
            cache.adopt_thread()
            results["second"] = "adopted"
        except ThreadOwnershipError:
            results["second"] = "refused"

    t1 = threading.Thread(target=first)
    t1.start()
    adopted.wait(5)
    t2 = threading.Thread(target=second)
    t2.start()
    t2.join()
    release.set()
    t1.join()
    assert results == {"second": "refused"}
    t3 = threading.Thread(target=second)  # released: the next adopter gets it
    t3.start()
    t3.join()
    assert results == {"second": "adopted"}
    with pytest.raises(ThreadOwnershipError):
        cache.sizes()  # the cache belongs to the thread that adopted it last


@pytest.mark.parametrize("mm", [False, True])
def test_an_insert_walking_on_from_the_match_checks_every_id_the_match_did_not(mm: bool) -> None:
    """Under lru, an insert past RESUME_MIN matched tokens walks on from the last match's node and checks the sign
    only of the ids past the match's key, which match_prefix checked; not when that key spelled multimodal ids
    (negative, the cache's own): then a plain insert of those ids is refused like any negative id."""
    n = RESUME_MIN + 8
    cache = make(num_slots=4 * n, page_size=1, max_context_len=2 * n, eviction="lru")
    toks = np.arange(1, n + 1, dtype=np.int32)
    extra = ExtraKeys(mm=(("image", 0, 4),)) if mm else None
    seq = cache.open(toks, extra_keys=extra)
    keyed = np.asarray(seq.tokens, dtype=np.int32)  # the ids the tree keys the request by (negative: an image's)
    cache.reserve(seq, n - seq.kv_len)
    cache.commit(seq, toks)
    cache.close(seq)
    assert cache.match_prefix(toks, extra_keys=extra).length == n
    assert (keyed < 0).any() == mm
    bad_tail, bad_head = np.append(keyed, np.int32(-5)), np.append(keyed, np.int32(7))
    bad_head[2] = -1
    cases = [bad_tail, bad_head] if not mm else [np.append(keyed, np.int32(7))]
    for bad in cases:
        r = cache.match_prefix(toks, extra_keys=extra)
        slots = torch.cat([r.slots, cache.alloc(1)])
        unchanged(cache, lambda: cache.insert(bad, slots), InvalidTokensError)
        cache.free(slots[n:])
    r, good = cache.match_prefix(toks, extra_keys=extra), np.append(toks, np.int32(7))
    cache.insert(good, torch.cat([r.slots, cache.alloc(1)]), extra_keys=extra)  # a good one walks on
    assert cache.match_prefix(good, extra_keys=extra).length == n + 1
    cache.check_invariants()
