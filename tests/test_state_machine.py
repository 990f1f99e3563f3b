"""Hypothesis state machines: random interleavings of every public call, under memory pressure.

After every step: `check_invariants()` (recomputes everything), the KV identity of every open
Sequence's committed positions and every locked prefix, and the model's own accounting (private
slots, locks). Calls that must fail are made on purpose and must leave `sizes()` unchanged.
Page sizes 1 and 4; a pool of 12 pages, a 3-token vocabulary (lots of sharing and splits) and two
namespaces; pins with a TTL on a fake clock that rules advance (budget 5 pages); with and without a host tier
(write-through and write-back). KV events are on: replaying
them into an empty set must give exactly the blocks cached now, recomputed from scratch.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixkv import (CacheConfig, InvalidArgumentError, InvalidSlotsError, LockError, MatchResult,
                     OutOfRowsError, OutOfSlotsError, PinBudgetError, RadixCache, SequenceError)
from radixkv.pools import page_slots
from radixkv.runs import count, expand
from state_machine_model import Model, assert_stamped, cached_blocks, replay, stamp

TOKENS = st.lists(st.integers(0, 2), min_size=0, max_size=14)
NAMESPACES = st.sampled_from([None, "b"])


def path_of(node, page_size: int) -> tuple[list[int], np.ndarray]:  # noqa: ANN001 - a TreeNode
    """(tokens, device slots) along the path from the root to `node`, read off the nodes."""
    tokens, pages = [], []
    while node.parent is not None:
        tokens.append(node.tokens())
        pages.append(expand(node.pages, count(node.pages)))
        node = node.parent
    if not tokens:
        return [], np.empty(0, dtype=np.int64)
    return np.concatenate(tokens[::-1]).tolist(), page_slots(np.concatenate(pages[::-1]), page_size)


class CacheMachine(RuleBasedStateMachine):
    page_size = 1
    policy = "lru"
    host_pages = 0
    write_policy = "write_through"
    event_block_size = 3

    def __init__(self) -> None:
        super().__init__()
        ps = self.page_size
        self.now = 0.0  # the cache's clock (pins); rules advance it
        self.cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=12 * ps,
                                            page_size=ps, max_requests=3, max_context_len=24,
                                            dtype=torch.float32, eviction=self.policy,
                                            host_slots=self.host_pages * ps, host_write_policy=self.write_policy,
                                            kv_events=True, event_block_size=self.event_block_size,
                                            pin_budget_tokens=5 * ps), clock=lambda: self.now)
        self.model = Model(ps)
        self.blocks: set[tuple[int, str]] = set()

    def _unchanged(self, call, error: type[Exception]) -> None:
        before = self.cache.sizes()
        with pytest.raises(error):
            call()
        assert self.cache.sizes() == before

    # ------------------------------------------------------------------ tree level

    @rule(tokens=TOKENS, ns=NAMESPACES)
    def match(self, tokens: list[int], ns: object) -> None:
        r = self.cache.match_prefix(tokens, ns)
        assert r.length % self.page_size == 0 and r.length <= len(tokens) and len(r.slots) == r.length
        assert r.node.end == r.length and r.length + r.host_length <= len(tokens)
        assert r.host_length == 0 or self.host_pages
        assert_stamped(self.cache, ns, tokens, r.slots, "match_prefix")

    @rule(tokens=TOKENS, ns=NAMESPACES)
    def lock_match(self, tokens: list[int], ns: object) -> None:
        r = self.cache.match_prefix(tokens, ns)
        self.cache.lock(r.node)
        self.model.locks.append((r.node, ns, tokens[:r.length]))

    @precondition(lambda self: self.model.locks)
    @rule(i=st.integers(0, 100))
    def unlock(self, i: int) -> None:
        node, _, _ = self.model.locks.pop(i % len(self.model.locks))
        self.cache.unlock(node)

    @rule(tokens=TOKENS, ns=NAMESPACES)
    def unlock_unlocked(self, tokens: list[int], ns: object) -> None:
        node = self.cache.match_prefix(tokens, ns).node
        if node.user_locks == 0:
            self._unchanged(lambda: self.cache.unlock(node), LockError)

    @precondition(lambda self: self.model.seqs)
    @rule(i=st.integers(0, 100))
    def unlock_a_sequence_lock(self, i: int) -> None:
        """A Sequence's lock is released only by close(): unlock() of its node without a lock() of
        that node is refused, even though the node is locked."""
        seq, _, _ = self.model.seqs[i % len(self.model.seqs)]
        if seq.node.user_locks == 0:
            self._unchanged(lambda: self.cache.unlock(seq.node), LockError)

    @rule(tokens=TOKENS)
    def foreign_node(self, tokens: list[int]) -> None:
        other = RadixCache(self.cache.config)
        node = other.match_prefix(tokens).node
        self._unchanged(lambda: self.cache.lock(node), LockError)
        self._unchanged(lambda: self.cache.unlock(node), LockError)

    @rule(tokens=TOKENS, bad=st.sampled_from([None, "high", 1.5, True]), ns=st.sampled_from([1.0, True, [1], {}]))
    def bad_arguments(self, tokens: list[int], bad: object, ns: object) -> None:
        """Every argument is checked before anything changes (priority, namespace, counts)."""
        self._unchanged(lambda: self.cache.insert(tokens, [0] * len(tokens), priority=bad), InvalidArgumentError)
        self._unchanged(lambda: self.cache.match_prefix(tokens, ns), InvalidArgumentError)
        if self.cache.req_pool.num_free_rows:
            self._unchanged(lambda: self.cache.open(tokens, priority=bad), InvalidArgumentError)
            self._unchanged(lambda: self.cache.open(tokens, ns), InvalidArgumentError)
        self._unchanged(lambda: self.cache.alloc(-1), InvalidArgumentError)

    @rule(n=st.integers(0, 30))
    def alloc(self, n: int) -> None:
        s = self.cache.sizes()
        need = -(-n // self.page_size) * self.page_size
        if need > s.free + s.evictable:
            self._unchanged(lambda: self.cache.alloc(n), OutOfSlotsError)
            return
        slots = self.cache.alloc(n)
        after = self.cache.sizes()
        assert len(slots) == n and after.private == s.private + need
        assert after.cached == s.cached - max(0, need - s.free), "alloc evicts exactly the shortfall"
        self.model.held.append(slots.numpy().copy())

    @precondition(lambda self: self.model.held)
    @rule(i=st.integers(0, 100))
    def free(self, i: int) -> None:
        self.cache.free(self.model.held.pop(i % len(self.model.held)))

    @rule(tokens=TOKENS, ns=NAMESPACES, priority=st.integers(0, 2))
    def insert(self, tokens: list[int], ns: object, priority: int) -> None:
        r, new = self._match_lock_alloc(tokens, ns)
        if new is None:
            return
        assert self.cache.insert(tokens, torch.cat([r.slots, new]), ns, priority=priority) == r.length
        self.cache.unlock(r.node)

    def _match_lock_alloc(self, tokens: list[int], ns: object) -> tuple[MatchResult, torch.Tensor | None]:
        """The tree-level prelude of an insert: match, lock, alloc (stamped); None (unlocked) when full."""
        r = self.cache.match_prefix(tokens, ns)
        self.cache.lock(r.node)
        try:
            new = self.cache.alloc(len(tokens) - r.length)
        except OutOfSlotsError:
            self.cache.unlock(r.node)
            return r, None
        stamp(self.cache, ns, tokens, new, start=r.length)
        return r, new

    @rule(tokens=TOKENS, ns=NAMESPACES)
    def insert_free_slots(self, tokens: list[int], ns: object) -> None:
        r = self.cache.match_prefix(tokens, ns)
        extra, free = len(tokens) - r.length, np.flatnonzero(self.cache.ledger.allocator.free_mask())
        if 0 < extra <= len(free) * self.page_size:
            bad = torch.cat([r.slots, torch.from_numpy(page_slots(free, self.page_size)[:extra])])
            self._unchanged(lambda: self.cache.insert(tokens, bad, ns), InvalidSlotsError)

    @precondition(lambda self: self.page_size > 1 and any(len(h) >= self.page_size for h in self.model.held))
    @rule()
    def insert_misordered_page(self) -> None:
        held = next(h for h in self.model.held if len(h) >= self.page_size)
        bad = held[:self.page_size][::-1].copy()
        self._unchanged(lambda: self.cache.insert([1] * self.page_size, bad), InvalidSlotsError)

    @rule(n=st.integers(0, 30))
    def evict(self, n: int) -> None:
        ps, before = self.page_size, self.cache.sizes().evictable
        freed = self.cache.evict(n)
        assert freed == min(-(-n // ps) * ps, before), "eviction must trim, not over-free"

    # ------------------------------------------------------------------ pins

    @rule(tokens=TOKENS, ns=NAMESPACES, ttl=st.sampled_from([1, 2.5, 10]))
    def pin(self, tokens: list[int], ns: object, ttl: float) -> None:
        before, pinned = self.cache.sizes(), self.cache.pinned_tokens()
        try:
            got = self.cache.pin(tokens, ns, ttl=ttl)
        except PinBudgetError:
            assert self.cache.sizes() == before and self.cache.pinned_tokens() == pinned
            return
        assert got % self.page_size == 0 and got == self.cache.match_prefix(tokens, ns).length
        assert pinned <= self.cache.pinned_tokens() <= self.cache.config.pin_budget_tokens

    @rule(dt=st.sampled_from([0.5, 1, 3]))
    def advance_clock(self, dt: float) -> None:
        self.now += dt

    @rule(tokens=TOKENS, ns=NAMESPACES, bad=st.sampled_from([0, -1.0, float("inf"), True, "1"]))
    def pin_bad_ttl(self, tokens: list[int], ns: object, bad: object) -> None:
        self._unchanged(lambda: self.cache.pin(tokens, ns, ttl=bad), InvalidArgumentError)
        self._unchanged(lambda: self.cache.insert(tokens, [0] * len(tokens), ns, pin_ttl=bad), InvalidArgumentError)

    @rule(tokens=TOKENS, ns=NAMESPACES)
    def insert_pinned(self, tokens: list[int], ns: object) -> None:
        r, new = self._match_lock_alloc(tokens, ns)
        if new is None:
            return
        try:
            self.cache.insert(tokens, torch.cat([r.slots, new]), ns, pin_ttl=2)
        except PinBudgetError:
            self.cache.free(new)
        self.cache.unlock(r.node)

    # ------------------------------------------------------------------ request level

    @rule(tokens=TOKENS, ns=NAMESPACES, keep_last=st.booleans(), pin_ttl=st.sampled_from([None, None, 4]))
    def open(self, tokens: list[int], ns: object, keep_last: bool, pin_ttl: float | None) -> None:
        if not self.cache.req_pool.num_free_rows:
            self._unchanged(lambda: self.cache.open(tokens, ns), OutOfRowsError)
            return
        reuse, before, open_seqs = (max(len(tokens) - 1, 0) if keep_last else None, self.cache.sizes(),
                                    len(self.model.seqs))
        try:
            seq = self.cache.open(tokens, ns, max_reuse=reuse, pin_ttl=pin_ttl)
        except PinBudgetError:  # the reused prefix does not fit the pin budget: no Sequence, nothing held
            assert self.cache.sizes() == before and len(self.cache.sequences()) == open_seqs
            return
        assert seq.cached_len == seq.committed_len == seq.kv_len and seq.kv_len % self.page_size == 0
        assert list(seq.tokens) == tokens
        self.model.seqs.append((seq, ns, list(tokens)))

    @precondition(lambda self: self.cache.req_pool.num_free_rows >= 2)
    @rule(tokens=TOKENS, ns=NAMESPACES)
    def race(self, tokens: list[int], ns: object) -> None:
        """Two Sequences open the same prompt before either commits: the second one's full pages
        duplicate the first one's, so commit re-points its row to the tree's slots."""
        seqs = [self.cache.open(tokens, ns) for _ in range(2)]
        for seq in seqs:
            try:
                self.cache.reserve(seq, len(tokens) - seq.kv_len)
            except OutOfSlotsError:
                break
            stamp(self.cache, ns, tokens, seq.slots(seq.committed_len), start=seq.committed_len)
            self.cache.commit(seq, tokens[seq.committed_len:])
        if seqs[1].committed_len == len(tokens) and len(tokens) >= self.page_size:
            assert torch.equal(torch.from_numpy(seqs[0].slots(0, seqs[0].tree_len).copy()),
                               torch.from_numpy(seqs[1].slots(0, seqs[1].tree_len).copy()))
        self.model.seqs.extend((seq, ns, list(tokens)) for seq in seqs)

    @precondition(lambda self: self.model.seqs)
    @rule(i=st.integers(0, 100), n=st.integers(0, 9))
    def reserve(self, i: int, n: int) -> None:
        seq, _, _ = self.model.seqs[i % len(self.model.seqs)]
        n = min(n, self.cache.config.max_context_len - seq.kv_len)
        kv_len = seq.kv_len
        try:
            slots = self.cache.reserve(seq, n)
        except OutOfSlotsError:
            assert seq.kv_len == kv_len
            return
        assert len(slots) == n and seq.kv_len == kv_len + n
        assert torch.equal(self.cache.req_pool.req_to_token[seq.row, kv_len:seq.kv_len].long(), slots)

    @precondition(lambda self: self.model.seqs)
    @rule(i=st.integers(0, 100), k=st.integers(0, 9), new=st.lists(st.integers(0, 2), max_size=9))
    def write_and_commit(self, i: int, k: int, new: list[int]) -> None:
        seq, ns, tokens = self.model.seqs[i % len(self.model.seqs)]
        c = seq.committed_len
        k = min(k, seq.kv_len - c)
        tokens.extend((new + [0] * k)[:max(0, c + k - len(tokens))])
        stamp(self.cache, ns, tokens, seq.slots(c, c + k), start=c)
        self.cache.commit(seq, tokens[c:c + k])
        assert seq.committed_len == c + k and list(seq.tokens) == tokens

    @precondition(lambda self: self.model.seqs)
    @rule(i=st.integers(0, 100))
    def bad_commit(self, i: int) -> None:
        seq, _, tokens = self.model.seqs[i % len(self.model.seqs)]
        c = seq.committed_len
        self._unchanged(lambda: self.cache.commit(seq, [0] * (seq.kv_len - c + 1)), SequenceError)
        if c < min(seq.kv_len, len(tokens)):
            wrong = [(tokens[c] + 1) % 3]
            self._unchanged(lambda: self.cache.commit(seq, wrong), SequenceError)

    @precondition(lambda self: self.model.seqs)
    @rule(i=st.integers(0, 100))
    def close(self, i: int) -> None:
        seq, _, _ = self.model.seqs.pop(i % len(self.model.seqs))
        twin = copy.copy(seq)
        self._unchanged(lambda: self.cache.close(twin), SequenceError)  # a copy is not the Sequence
        self.cache.close(seq)
        self._unchanged(lambda: self.cache.reserve(seq, 1), SequenceError)
        self._unchanged(lambda: self.cache.close(twin), SequenceError)  # nor, later, another row's holder
        self._unchanged(lambda: self.cache.close(seq), SequenceError)

    # ------------------------------------------------------------------ after every step

    @invariant()
    def consistent(self) -> None:
        self.cache.check_invariants()
        s = self.cache.sizes()
        reserved = sum(-(-seq.kv_len // self.page_size) - seq.tree_len // self.page_size
                       for seq, _, _ in self.model.seqs)
        assert s.private == (self.model.held_pages() + reserved) * self.page_size
        for node, ns, prefix in self.model.locks:
            assert not node.evicted and node.end == len(prefix)
            tokens, slots = path_of(node, self.page_size)
            assert tokens == prefix, "a locked node no longer means its prefix"
            assert_stamped(self.cache, ns, prefix, slots, "locked prefix")
        for seq, ns, tokens in self.model.seqs:
            assert_stamped(self.cache, ns, tokens, seq.slots(0, seq.committed_len), f"{seq} committed KV")
        replay(self.cache.take_events(), self.blocks)
        assert self.blocks == cached_blocks(self.cache.tree, self.event_block_size), "event replay != cache"


class PagedCacheMachine(CacheMachine):
    page_size = 4
    event_block_size = 6  # blocks straddle pages


class HostTierMachine(CacheMachine):
    host_pages = 10
    policy = "adaptive"  # the default policy, stateful keys


class PagedWriteBackMachine(CacheMachine):
    page_size = 4
    host_pages = 6
    write_policy = "write_back"
    event_block_size = 4


class LFUPagedCacheMachine(CacheMachine):
    page_size = 4
    policy = "lfu"


TestCacheMachine = CacheMachine.TestCase
TestPagedCacheMachine = PagedCacheMachine.TestCase
TestLFUPagedCacheMachine = LFUPagedCacheMachine.TestCase
TestHostTierMachine = HostTierMachine.TestCase
TestPagedWriteBackMachine = PagedWriteBackMachine.TestCase
for _case, _examples in ((TestCacheMachine, 200), (TestPagedCacheMachine, 200), (TestLFUPagedCacheMachine, 80),
                         (TestHostTierMachine, 200), (TestPagedWriteBackMachine, 200)):
    _case.settings = settings(max_examples=_examples, stateful_step_count=50, deadline=None)
del _case
