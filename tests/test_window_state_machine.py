"""Hypothesis state machine over a RadixCache with two sliding-window groups (W = 3 and 6, pools
of their own, smaller than the full pool): open (match), reserve + forward + commit, close,
lock / unlock of matched prefixes, full eviction, window eviction, and private window pages taken
and given back (pressure), under a 3-token vocabulary (lots of sharing and splits). A sibling
machine has a window (W = 3), a chunk group (C = 4: a query reads its own chunk only) and a state
group of 4 snapshot slots, with snapshots taken at committed positions and evicted under pressure.

The forward writes, for each position, a stamp of the prefix it ends (its tokens so far) into the
full layer and into each window group's layer, through the cache's own slots and its window
translation (window_inputs). After every step:
- check_invariants() (every group's ledger against the tree and the open Sequences);
- every open Sequence reads, through req_to_token and each window group's translation, the right
  stamp at every position it can still read: full KV for [0, committed_len) and window KV for
  [committed_len - W + 1, committed_len). At open() that is exactly "a match never claims a position
  some group cannot resume from": the reused prefix must carry every group's window before it;
- with a state group, every match (open, lock) ends at a node holding the snapshot of exactly the
  prefix it claims (each snapshot slot remembers the stamp of the prefix it was taken after).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixkv import CacheConfig, GroupSpec, LockError, OutOfRowsError, OutOfSlotsError, RadixCache

TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=16)
WINDOWS = (3, 6)  # layer 1: group 1, layer 2: group 2; layer 0 keeps full KV


def stamp(tokens: list[int]) -> float:
    """A value that tells prefixes apart (exact in float32)."""
    h = 7
    for t in tokens:
        h = (h * 31 + t + 1) % 1_000_003
    return float(h)


class WindowMachine(RuleBasedStateMachine):
    page_size = 1
    kinds = (("window", WINDOWS[0]), ("window", WINDOWS[1]))  # groups 1 and 2 (layers 1 and 2)
    state_slots = 0  # > 0: group 3 keeps state snapshots

    def __init__(self) -> None:
        super().__init__()
        ps = self.page_size
        groups = tuple(GroupSpec(kind, n * ps, size=w, layers=(i + 1,))
                       for i, ((kind, w), n) in enumerate(zip(self.kinds, (9, 11))))
        groups += (GroupSpec("state", self.state_slots),) if self.state_slots else ()
        self.cache = RadixCache(CacheConfig(num_layers=3, num_kv_heads=1, head_dim=1, num_slots=16 * ps, page_size=ps,
                                            max_requests=3, max_context_len=24, dtype=torch.float32, eviction="lru",
                                            groups=groups))
        self.seqs: list = []
        self.locked: list = []
        self.private: list[tuple[int, torch.Tensor]] = []
        self.states: dict[int, float] = {}  # state slot -> stamp of the prefix its snapshot was taken after

    # ------------------------------------------------------------------ rules

    @rule(tokens=TOKENS)
    def open(self, tokens: list[int]) -> None:
        try:
            seq = self.cache.open(tokens, max_reuse=len(tokens) - 1)
        except OutOfRowsError:
            return
        self._check_state(tokens, seq.cached_len, seq.node)
        self.seqs.append((seq, tokens))

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 2), n=st.integers(1, 6), extra=st.lists(st.integers(0, 2), max_size=4))
    def forward(self, i: int, n: int, extra: list[int]) -> None:
        seq, tokens = self.seqs[i % len(self.seqs)]
        tokens.extend(extra)  # decode appends what it samples
        start = seq.committed_len
        n = min(n, len(tokens) - start, 24 - start)
        if n <= 0:
            return
        try:
            self.cache.reserve(seq, n)
        except OutOfSlotsError:
            return
        self._write(seq, tokens)
        self.cache.commit(seq, tokens[start:start + n])

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 2))
    def close(self, i: int) -> None:
        seq, _ = self.seqs.pop(i % len(self.seqs))
        self.cache.close(seq)

    @rule(tokens=TOKENS)
    def lock(self, tokens: list[int]) -> None:
        m = self.cache.match_prefix(tokens)
        self._check_state(tokens, m.length, m.node)
        if m.length:
            self.cache.lock(m.node)
            self.locked.append(m.node)

    @precondition(lambda self: self.locked)
    @rule()
    def unlock(self) -> None:
        self.cache.unlock(self.locked.pop(0))

    @rule(n=st.integers(1, 8))
    def evict(self, n: int) -> None:
        self.cache.evict(n)

    @rule(g=st.sampled_from([1, 2]), n=st.integers(1, 5))
    def evict_window(self, g: int, n: int) -> None:
        self.cache.group(g).evict(n)

    @rule(g=st.sampled_from([1, 2]), n=st.integers(1, 4))
    def take_window_pages(self, g: int, n: int) -> None:
        before = self.cache.group(g).sizes()
        try:
            self.private.append((g, self.cache.group(g).alloc(n)))
        except OutOfSlotsError:
            assert self.cache.group(g).sizes() == before  # nothing changed
            return

    @precondition(lambda self: self.private)
    @rule()
    def give_window_pages(self) -> None:
        g, pages = self.private.pop(0)
        self.cache.group(g).free(pages)

    @precondition(lambda self: self.seqs and self.state_slots)
    @rule(i=st.integers(0, 2))
    def take_snapshot(self, i: int) -> None:
        """The state after a Sequence's committed whole pages becomes a snapshot at the node ending there."""
        seq, tokens = self.seqs[i % len(self.seqs)]
        p = seq.committed_len // self.page_size * self.page_size
        node = self.cache.locate(tokens[:p])
        assert node.end == p  # the Sequence's lock holds its committed pages in the tree
        group = self.cache.group(3)
        if not p or group.component(node) is not None:
            return
        try:
            slot = group.alloc(1)
        except OutOfSlotsError:
            return
        group.attach(node, slot)
        self.states[int(slot[0])] = stamp(tokens[:p])

    @precondition(lambda self: self.state_slots)
    @rule(n=st.integers(1, 3))
    def evict_snapshots(self, n: int) -> None:
        self.cache.group(3).evict(n)

    # ------------------------------------------------------------------ the forward and the checks

    def _check_state(self, tokens: list[int], length: int, node) -> None:  # noqa: ANN001 - a LockHandle
        """A match of `length` tokens ends at `node`, which holds the snapshot of exactly tokens[:length]."""
        assert node.end == length
        if self.state_slots and length:
            slot = self.cache.group(3).component(node)
            assert slot is not None, f"a match claims {length} tokens with no state snapshot there"
            assert self.states[int(slot[0])] == stamp(tokens[:length]), "a snapshot of another prefix"

    def _write(self, seq, tokens: list[int]) -> None:  # noqa: ANN001 - a Sequence
        """Stamp positions [committed_len, kv_len) in every layer's pool, as a forward would."""
        b = self.cache.batch([seq])
        stamps = torch.tensor([stamp(tokens[:p + 1]) for p in range(seq.committed_len, seq.kv_len)])
        pool = self.cache.kv_pool
        pool.k_buffer[0][b.out_slots, 0, 0] = stamps
        for g in (1, 2):
            w = self.cache.group(g).window_inputs(b, self.cache.req_pool.req_to_token, seq.kv_len)
            pool.k_buffer[g][w.out_slots, 0, 0] = stamps

    def _check_reads(self, seq, tokens: list[int]) -> None:  # noqa: ANN001
        c = seq.committed_len
        if not c:
            return
        want = torch.tensor([stamp(tokens[:p + 1]) for p in range(c)])
        b = self.cache.batch([seq])
        pool, table = self.cache.kv_pool, self.cache.req_pool.req_to_token
        full = pool.k_buffer[0][table[seq.row, :c].long(), 0, 0]
        assert torch.equal(full, want), f"full KV of {seq} differs"
        for g, (kind, w) in zip((1, 2), self.kinds):
            lo = max(0, c - w + 1 if kind == "window" else c // w * w)
            t = self.cache.group(g).window_inputs(b, table, c).req_to_token[0, lo:c].long()
            assert torch.equal(pool.k_buffer[g][t, 0, 0], want[lo:]), f"window group {g} of {seq} lost [{lo}, {c})"

    @invariant()
    def consistent(self) -> None:
        self.cache.check_invariants()
        for seq, tokens in self.seqs:
            self._check_reads(seq, tokens)

    @invariant()
    def locks_are_paired(self) -> None:
        for node in self.locked:
            assert node.user_locks >= 1
        with pytest.raises(LockError):
            self.cache.unlock(self.cache.tree.root(b"n"))


class WindowMachinePaged(WindowMachine):
    page_size = 2


TestWindowMachine = WindowMachine.TestCase
TestWindowMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestWindowMachinePaged = WindowMachinePaged.TestCase
TestWindowMachinePaged.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


class ChunkStateMachine(WindowMachine):
    """A window, a chunk group and a state group: the match's fixed point over all three."""

    page_size = 2
    kinds = (("window", 3), ("chunk", 4))
    state_slots = 4


TestChunkStateMachine = ChunkStateMachine.TestCase
TestChunkStateMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


def run(cache: RadixCache, prompt: list[int]) -> int:
    """One request, one token per forward (one node per token at page size 1); returns its reuse."""
    seq = cache.open(prompt, max_reuse=len(prompt) - 1)
    reused = seq.cached_len
    for p in range(reused, len(prompt)):
        cache.reserve(seq, 1)
        cache.commit(seq, [prompt[p]])
        cache.check_invariants()
    cache.close(seq)
    return reused


def test_window_kv_is_kept_where_a_match_may_end() -> None:
    """By hand, W = 3 (resuming at p needs window KV for [p - 2, p)): a request keeps the window KV
    of its last W - 1 tokens and drops the rest as it goes; a second request that branches off
    at 6 recomputes the prefix (its window KV was gone), heals it, and the branch point keeps it."""
    groups = (GroupSpec("window", 32, size=3, layers=(1,)),)
    cache = RadixCache(CacheConfig(num_layers=2, num_kv_heads=1, head_dim=1, num_slots=32, eviction="lru",
                                   groups=groups))
    first = list(range(12))
    assert run(cache, first) == 0
    lengths = [cache.match_prefix(first[:n]).length for n in (6, 9, 11, 12)]
    assert lengths == [0, 0, 0, 12]  # window KV held for [10, 12) only (the full KV of all 12 is cached)
    assert cache.sizes().cached == 12 and cache.group(1).sizes().cached == 2
    second = first[:6] + [20, 21, 22, 23, 24]
    assert run(cache, second) == 0  # nothing to resume from before 6: recomputed, window KV healed
    assert [cache.match_prefix(first[:n]).length for n in (6, 9, 12)] == [6, 6, 12]
    assert cache.match_prefix(second).length == 11
    assert run(cache, first[:6] + [30, 31]) == 6  # a third request resumes at the branch point
    cache.check_invariants()
