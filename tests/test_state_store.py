"""StateStore: recurrent-state snapshots as a RadixCache's "state" layer group (the tree holds which node
has which slot, the store the tensors), on a real RadixCache.

The property that matters: a resume point never claims a position where some group cannot resume,
i.e. `cache.match_prefix(tokens).length = p` only where the tree holds the KV of `tokens[:p]` and the
store holds the state taken after exactly `tokens[:p]` (each test state encodes the prefix it was taken after,
so a snapshot served for the wrong prefix shows up as a mismatch). Driven by a Hypothesis state
machine through inserts, snapshots, splits (matches), evictions and a group of 4 slots; the cache's
check_invariants() checks the group's slots against the tree after every step.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from radixkv import CacheConfig, GroupSpec, OutOfSlotsError, RadixCache
from radixkv.errors import InvalidArgumentError
from radixkv.integrations.recurrent_state import LayerState, RecurrentState
from radixkv.integrations.state_store import StateStore, marconi_victim, prefill_flops

PAGE = 2


def make_store(snapshots: int = 16, num_slots: int = 48) -> tuple[RadixCache, StateStore]:
    """A cache with a state group of `snapshots` slots (group 1), and its store."""
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=num_slots, page_size=PAGE,
                                   max_requests=4, max_context_len=32, dtype=torch.float32, device="cpu",
                                   groups=(GroupSpec("state", snapshots),)))
    return cache, StateStore(cache, 1)


def state_of(prefix: list[int]) -> RecurrentState:
    """A state that says which prefix it was taken after (8 bytes per token + 8)."""
    return RecurrentState({0: LayerState({0: torch.tensor([[-1] + prefix], dtype=torch.float64)})})


def prefix_of(state: RecurrentState) -> list[int]:
    return [int(x) for x in state.layers[0].conv[0][0, 1:].tolist()]


def put_kv(cache: RadixCache, tokens: list[int]) -> None:
    """Compute (pretend) and cache the KV of `tokens` through the request API."""
    seq = cache.open(tokens)
    try:
        cache.reserve(seq, len(tokens) - seq.committed_len)
        cache.commit(seq, tokens[seq.committed_len:])
    finally:
        cache.close(seq)


def snapshot(cache: RadixCache, store: StateStore, tokens: list[int], p: int) -> bool:
    node = cache.locate(tokens[:p])
    return node.end == p and store.put(node, p, state_of(tokens[:p]))


def resume_point(cache: RadixCache, tokens: list[int]) -> int:
    """Where a request for `tokens` resumes: the cache's match, which stops at the last snapshot."""
    return cache.match_prefix(tokens).length


def test_snapshot_dies_with_its_kv() -> None:
    cache, store = make_store()
    tokens = list(range(1, 11))
    put_kv(cache, tokens)
    assert snapshot(cache, store, tokens, 6)
    assert resume_point(cache, tokens + [99]) == 6
    assert cache.locate(tokens[:2]).end == 2  # a split above the snapshot's node: the node still ends at 6
    assert resume_point(cache, tokens) == 6
    assert prefix_of(store.get(cache.match_prefix(tokens[:6]).node, 6)) == tokens[:6]
    cache.evict(cache.sizes().evictable)
    assert resume_point(cache, tokens) == 0
    put_kv(cache, tokens)  # the same KV again, in new nodes: the old snapshot stays dead
    assert resume_point(cache, tokens) == 0
    store.check()


def test_put_rejects_a_node_that_does_not_end_there() -> None:
    cache, store = make_store()
    put_kv(cache, list(range(1, 9)))
    node = cache.locate(list(range(1, 9)))
    assert not store.put(node, 4, state_of([1, 2, 3, 4])) and len(store) == 0


def test_full_group_gives_up_least_recently_used() -> None:
    cache, store = make_store(snapshots=2)
    a, b, c = [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]
    for t in (a, b, c):
        put_kv(cache, t)
    assert snapshot(cache, store, a, 2) and snapshot(cache, store, b, 2)
    assert resume_point(cache, a + [0]) == 2  # touches a's snapshot: b's is now the oldest
    store.get(cache.match_prefix(a[:2]).node, 2)
    assert snapshot(cache, store, c, 2)
    assert [resume_point(cache, t) for t in (a, b, c)] == [2, 0, 2]
    assert cache.group(1).sizes().cached == 2
    store.check()
    cache.check_invariants()


def test_store_gives_up_locked_snapshots_the_tree_does_not() -> None:
    """A lock keeps a snapshot from the tree's group eviction, not from the store's own choice (the
    request holding the lock copied its state when it resumed)."""
    cache, store = make_store(snapshots=1)
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    put_kv(cache, a)
    put_kv(cache, b)
    assert snapshot(cache, store, a, 2)
    node = cache.match_prefix(a[:2]).node  # ends at a's snapshot
    cache.lock(node)
    assert cache.group(1).evict(1) == 0 and resume_point(cache, a) == 2  # the tree: protected
    assert snapshot(cache, store, b, 2)  # the store: gives a's up for b's
    assert resume_point(cache, a) == 0 and resume_point(cache, b) == 2
    cache.unlock(node)
    assert cache.group(1).evict(1) == 1 and resume_point(cache, b) == 0  # evicted by the tree: gone
    store.check()
    cache.check_invariants()


@pytest.mark.parametrize("group", [0, 2, 1.5, True, "1"])
def test_a_group_that_is_not_a_state_group_is_rejected(group: object) -> None:
    cache, _ = make_store()
    with pytest.raises(InvalidArgumentError):
        StateStore(cache, group)  # type: ignore[arg-type]


tokens_st = st.lists(st.integers(0, 3), min_size=1, max_size=14)


class StoreMachine(RuleBasedStateMachine):
    """Random inserts, snapshots, matches (which split edges), evictions; a group of 4 snapshot slots."""

    def __init__(self) -> None:
        super().__init__()
        self.cache, self.store = make_store(snapshots=4)
        self.nodes: dict[tuple[int, ...], object] = {}  # prefix -> the node its snapshot was put under

    @rule(tokens=tokens_st)
    def insert(self, tokens: list[int]) -> None:
        try:
            put_kv(self.cache, tokens)
        except OutOfSlotsError:
            pass

    @rule(tokens=tokens_st, pages=st.integers(1, 7))
    def take_snapshot(self, tokens: list[int], pages: int) -> None:
        p = min(pages * PAGE, self.cache.locate(tokens).end)
        if p and snapshot(self.cache, self.store, tokens, p):
            self.nodes[tuple(tokens[:p])] = self.cache.locate(tokens[:p])

    @rule(n=st.integers(1, 16))
    def evict(self, n: int) -> None:
        self.cache.evict(n)

    @rule(tokens=tokens_st)
    def resume(self, tokens: list[int]) -> None:
        p = resume_point(self.cache, tokens)
        node = self.cache.locate(tokens[:p])
        assert node.end == p, "claimed a position whose KV is not cached"
        if p:
            assert self.cache.match_prefix(tokens).node is node
            state = self.store.get(node, p)
            assert state is not None and prefix_of(state) == tokens[:p], "claimed a snapshot of another prefix"
        # Nothing longer was claimable: no deeper snapshot on this path is alive (a live node keeps its KV).
        for q in range(p + PAGE, len(tokens) + 1, PAGE):
            node = self.nodes.get(tuple(tokens[:q]))
            assert node is None or not self.store.has(node), (  # type: ignore[arg-type]
                f"a live snapshot at {q} beyond the claimed {p}")

    @invariant()
    def consistent(self) -> None:
        self.cache.check_invariants()
        self.store.check()


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_spare_snapshots_go_first_until_used() -> None:
    cache, store = make_store(snapshots=2)
    a, b, c, d = [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]
    for t in (a, b, c, d):
        put_kv(cache, t)
    node = {tuple(t): cache.locate(t[:2]) for t in (a, b, c, d)}
    assert store.put(node[tuple(b)], 2, state_of(b[:2]))
    assert store.put(node[tuple(a)], 2, state_of(a[:2]), spare=True)
    assert store.put(node[tuple(c)], 2, state_of(c[:2]))  # drops spare a, though b is older
    assert [store.has(node[tuple(t)]) for t in (a, b, c)] == [False, True, True]
    assert store.put(node[tuple(a)], 2, state_of(a[:2]), spare=True)  # drops b (oldest, no spare left)
    assert store.get(node[tuple(a)], 2) is not None  # used: a regular snapshot now
    assert store.put(node[tuple(d)], 2, state_of(d[:2]))  # drops c (least recently used), not a
    assert [store.has(node[tuple(t)]) for t in (a, b, c, d)] == [True, False, False, True]
    store.check()


def test_flops_policy_keeps_an_old_long_prefix() -> None:
    """Marconi's choice: a full group gives up the snapshot with the lowest recency + FLOP efficiency, so an
    old snapshot of a long prefix outlives a newer one of a short prefix; LRU gives up the oldest."""
    for policy, gone in (("lru", "long"), ("flops", "short")):
        cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=64, page_size=PAGE,
                                       max_requests=4, max_context_len=32, dtype=torch.float32, device="cpu",
                                       groups=(GroupSpec("state", 3),)))
        store = StateStore(cache, 1, policy, prefill_flops(1000, 1, 16))
        prompts = {"long": list(range(1, 13)), "short": [20, 21], "newer": [22, 23], "new": [30, 31]}
        for name, t in prompts.items():
            put_kv(cache, t)
            assert snapshot(cache, store, t, len(t))  # in this order: long is the oldest
        kept = {name for name, t in prompts.items() if resume_point(cache, t) == len(t)}
        assert kept == set(prompts) - {gone}, (policy, kept)
        store.check()
        cache.check_invariants()


def test_marconi_victim_weighs_recency_and_efficiency() -> None:
    assert marconi_victim([1, 2, 3], [5.0, 5.0, 5.0]) == 0  # same efficiency: the oldest
    assert marconi_victim([1, 2, 3], [9.0, 1.0, 5.0]) == 1  # old but efficient stays; the cheap one goes
    assert marconi_victim([1, 2, 3], [3.0, 1.0, 0.0], alpha=0.1) == 0  # recency dominates at small alpha
    with pytest.raises(InvalidArgumentError):
        StateStore(make_store()[0], 1, "mru")
