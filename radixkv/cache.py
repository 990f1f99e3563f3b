"""RadixCache: a facade over three owners, each the only writer of its state (DESIGN.md):

    PageLedger    (pools/ledger.py)   page states and the allocator
    RadixTree     (radix/tree.py)     nodes, locks, counters, evictable indexes; returns what changed hands
    SequenceTable (sequences.py)      rows, open Sequences, req_to_token

plus the KV pool, the optional host tier and KV-event recorder, and one SecondaryGroup per secondary
layer group (cache_groups.py: `CacheConfig.groups`, window KV or state snapshots, each with its own
PageLedger; `cache.group(g)` is its public calls; device eviction gives each group's pages back to
its own ledger). With no groups (one model kind, full KV) the cache is exactly the one-group cache. Each public call validates its whole
input, then asks the owners to change, in an order that cannot fail halfway: a raising call leaves
the cache exactly as it was. A cache is driven by one thread (the one that built it, or the one
that called `adopt_thread()`); a call from any other thread raises ThreadOwnershipError.

The tree level speaks SGLang's vocabulary (match_prefix, lock, unlock, alloc, free, insert, evict);
the request level is what a generation loop calls (open, reserve, commit, close, batch):

    seq = cache.open(prompt, max_reuse=len(prompt) - 1)   # reuse the cached prefix, lock it
    cache.reserve(seq, len(prompt) - seq.kv_len)          # slots for the rest of the prompt
    b = cache.batch([seq, ...])                           # rows, lens, out_slots, CSR kv_indices
    ... forward: store K/V into b.out_slots ...
    cache.commit(seq, prompt[seq.committed_len:])         # full pages become shareable now
    cache.close(seq)                                      # unlock, free the private tail, free the row
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import torch

from radixkv import cache_requests as requests
from radixkv.cache_base import CacheBase
from radixkv.cache_groups import SecondaryGroup
from radixkv.cascade import min_saved_positions
from radixkv.errors import InvalidArgumentError, InvalidSlotsError
from radixkv.events import KVEvent
from radixkv.insert_slots import InsertSlots, MatchedSlots
from radixkv.invariants import check_cache, check_groups
from radixkv.metrics import collect_metrics
from radixkv.pools import PRIVATE
from radixkv.radix import USER, locks, lookup
from radixkv.results import BatchInputs, LockHandle, MatchResult, SizeInfo
from radixkv.runs import count, expand_slots
from radixkv.sequences import Sequence
from radixkv.keys import DEFAULT_NAMESPACE
from radixkv.tokens import (ExtraKeysArg, IntArg, SecondsArg, SequenceArg, TokensLike, as_count, as_priority, as_slots,
                            as_tokens, int32_tokens, non_negative, slot_array)

# Final: compiled, a C static each, not a module-dict lookup (and a getattr, or a method lookup on `tuple`)
_from_numpy: Final = torch.from_numpy
_new_tuple: Final = tuple.__new__
_MatchResult: Final = MatchResult
_USER: Final = USER


class RadixCache(CacheBase):
    """A prefix-sharing KV cache over a radix tree (DESIGN.md has the whole contract). Built from a
    CacheConfig (and a `clock` for pins: cache_base.py); what it is made of is CacheBase's."""

    # ------------------------------------------------------------------ tree level

    def match_prefix(self, tokens: TokensLike, namespace: Any = None, extra_keys: ExtraKeysArg = None
                     ) -> MatchResult:
        """Longest device-cached prefix of `tokens`, whole pages only, and how many more tokens the
        host tier holds (`host_length`). Does not lock; refreshes the recency of the matched path and
        may split the edge where the match ends. `slots` is a fresh int64 tensor the caller owns.
        `extra_keys` (radixkv.keys.ExtraKeys: LoRA, cache salt, multimodal items) partition the
        cache like the namespace does, multimodal items from their offset on. With secondary
        groups, the match stops where every group can resume (radix/windows.py: window KV before
        it, a state snapshot at it), never claims more. Prefixes given to `insert()` have no group
        components until `group(g).attach` gives them some (`locate` finds the node)."""
        self._owner.check()
        ids = as_tokens(tokens)
        ns, toks = self._key(ids, namespace, extra_keys)
        key, root = self._page_key(toks), self.tree.root(ns)
        m = self._match(key, root, len(toks))
        slots = expand_slots(m.runs, m.length, self.page_size)  # (a fresh int64 array)
        # the runs they came from (the caller may write into its tensor): prove an insert's head is the tree's
        node = m.node
        self._matched = MatchedSlots(m.runs, node, node.pages, key, root, toks is ids) if m.length else None
        return _new_tuple(_MatchResult, (m.length, _from_numpy(slots), node, m.host_length))  # (no interpreted __new__)

    def locate(self, tokens: TokensLike, namespace: Any = None, extra_keys: ExtraKeysArg = None) -> LockHandle:
        """The node ending the longest prefix of `tokens` (whole pages) whose full KV is on the
        device, whatever its secondary groups hold (where a group component, e.g. a state
        snapshot taken after `node.end` tokens, can be attached); the namespace's root when none.
        Splits the edge where it ends; not a use: no recency, hit or query is counted."""
        self._owner.check()
        ns, toks = self._key(as_tokens(tokens), namespace, extra_keys)
        return lookup.locate(self.tree, self._page_key(toks), self.tree.root(ns))

    def lock(self, node: LockHandle) -> None:
        """Protect `node` and its ancestors from eviction; pairs with one unlock(node)."""
        self._owner.check()
        locks.lock(self.tree, self.tree.check_node(node), _USER)

    def unlock(self, node: LockHandle) -> None:
        """Undo one earlier lock(node). LockError if there is none (a Sequence's lock is not one)."""
        self._owner.check()
        locks.unlock(self.tree, self.tree.check_node(node), _USER)

    def alloc(self, n: IntArg) -> torch.Tensor:
        """`n` private slots: the first n slots of ceil(n / page_size) fresh pages, evicting unlocked
        cached tokens as needed. OutOfSlotsError, nothing changed, if even full eviction cannot serve.
        Returns int64 `[n]`."""
        self._owner.check()
        n = as_count(n, "alloc(n)")
        slots = self.ledger.alloc_slots(n, self.tree.evictable_size // self.page_size, self._evict_pages)
        return _from_numpy(slots)

    def free(self, slots: TokensLike) -> None:
        """Free the pages of `slots`, each whole. Every page touched must be private from alloc()."""
        self._owner.check()
        arr = as_slots(slots, self.config.num_slots)
        if len(np.unique(arr)) != len(arr):
            raise InvalidSlotsError("free: slots must be distinct; the same slot appears twice")
        pages = np.unique(arr // self.page_size)
        if not self.ledger.all_in(pages, PRIVATE):
            raise InvalidSlotsError(f"free() takes only slots from alloc(): {self.ledger.describe(pages, PRIVATE)}")
        self.ledger.release(pages)

    def insert(self, tokens: TokensLike, slots: TokensLike, namespace: Any = None, priority: IntArg = 0,
               extra_keys: ExtraKeysArg = None, pin_ttl: SecondsArg = None) -> int:
        """Cache `tokens` with their `slots`; returns how many leading tokens were already cached.
        The rules for `slots` are in insert_slots.py; anything else raises InvalidSlotsError with
        nothing changed. Afterwards the caller owns none of `slots`. With `pin_ttl` (seconds) the
        inserted whole pages are pinned that long (PinBudgetError, nothing changed, past the budget)."""
        self._owner.check()
        # tokens keyed as given (no namespace, no extra keys): an int32 array's ids are checked below, past the match
        plain = namespace is None and extra_keys is None
        if plain:
            ns, toks = DEFAULT_NAMESPACE, int32_tokens(tokens)
        else:
            ns, toks = self._key(as_tokens(tokens), namespace, extra_keys)
        root, n, matched = self.tree.root(ns), len(toks) // self.page_size * self.page_size, self._matched
        # the walk goes on from the last match's node when toks start with its path (not for pins, which read the
        # whole key): only the tokens below it are keyed
        after = None if matched is None or pin_ttl is not None else matched.resumes(toks, n, root)
        skip = 0 if after is None else after.end - root.end
        rest = toks[skip:] if skip else toks
        if plain and toks is tokens:  # an int32 array: toks[:skip] spell the match's key, checked if it says so
            non_negative(rest if matched is not None and matched.checked else toks)
        given = slot_array(slots)  # range-checked in InsertSlots, where the tree's own slots need none
        prio = as_priority(priority)
        until = None if pin_ttl is None else self.pins.deadline(pin_ttl, "insert(pin_ttl=...)")
        if len(given) != len(toks):
            raise InvalidSlotsError(f"insert: {len(toks)} tokens but {len(given)} slots")
        key = (rest if n == len(toks) else rest[:n - skip]).tobytes()  # (_page_key, from `after` on)
        if until is not None:
            self.pins.charge(n - self.pins.pinned_length(key, root), "insert(pin_ttl=...)")
        check = InsertSlots(self.ledger, given, n, matched)
        result = self.tree.insert(key, check.pages, root, prio, check.accept, True, after)
        if until is not None:
            self.pins.pin(result.node, until, "insert(pin_ttl=...)")
        self.ledger.settle(check.new, check.freed(), check.fresh >= 0, check.run_at)  # (to CACHED, the rest back)
        if self.host is not None:
            self.host.back_up(result.gained)
        return result.cached_len

    def evict(self, n: IntArg) -> int:
        """Evict at least `n` unlocked cached tokens if that many exist (trimming a leaf's tail page
        by page rather than dropping it whole). Returns tokens freed. evict(0) does nothing."""
        self._owner.check()
        pages = self._evict_pages(as_count(n, "evict(n)"))
        self.ledger.release_runs(pages)
        return count(pages) * self.page_size

    # ------------------------------------------------------------------ request level

    def open(self, tokens: TokensLike, namespace: Any = None, max_reuse: IntArg = None,
             priority: IntArg = 0, extra_keys: ExtraKeysArg = None, pin_ttl: SecondsArg = None) -> Sequence:
        """Start a request: match at most `max_reuse` tokens (default all), promote any host-tier
        part, lock the match, take a req_to_token row and write the prefix slots into it. Afterwards
        cached_len == committed_len == kv_len (page-aligned). OutOfRowsError when every row is in
        use; ContextLengthError when `tokens` is longer than max_context_len. With multimodal
        `extra_keys`, `seq.tokens` holds the (negative) ids the cache keys them by (radixkv.multimodal). With
        `pin_ttl` (seconds) the reused prefix is pinned until now + pin_ttl (PinBudgetError, no
        Sequence, past the budget) and so is every page the Sequence commits later, while the budget allows."""
        self._owner.check()
        return requests.open_sequence(self, tokens, namespace, max_reuse, priority, extra_keys, pin_ttl)

    def pin(self, tokens: TokensLike, namespace: Any = None, *, ttl: SecondsArg,
            extra_keys: ExtraKeysArg = None) -> int:
        """Keep the cached prefix of `tokens` (whole pages) for `ttl` seconds of the cache's clock:
        until then its pages are evicted only when nothing unpinned is evictable (a pin never
        blocks an allocation). Pinning again extends the deadline. Returns the pinned length in
        tokens (0 when nothing is cached). Not a use: recency and hit counts are left alone.
        PinBudgetError, nothing pinned, when the newly pinned tokens would exceed
        CacheConfig.pin_budget_tokens."""
        self._owner.check()
        ns, toks = self._key(as_tokens(tokens), namespace, extra_keys)
        until = self.pins.deadline(ttl, "pin(ttl=...)")
        root = self.tree.root(ns)
        node = lookup.locate(self.tree, self._page_key(toks), root)
        self.pins.pin(node, until, "pin(ttl=...)")
        return node.end

    def pinned_tokens(self) -> int:
        """Tokens pinned now (expired pins dropped first)."""
        self._owner.check()
        self.pins.expire()
        return self.pins.pinned_size

    def reserve(self, seq: SequenceArg, n: IntArg) -> torch.Tensor:
        """Slots for positions [kv_len, kv_len + n), filling the tail of the Sequence's last private
        page before taking new pages; written into its row. n = 0 is a no-op. OutOfSlotsError /
        ContextLengthError with nothing changed. Returns int64 `[n]`."""
        self._owner.check()
        return requests.reserve(self, seq, n)

    def commit(self, seq: SequenceArg, tokens: TokensLike) -> None:
        """Declare the KV of positions [committed_len, committed_len + len(tokens)) written. They
        must lie below kv_len; `tokens` must equal seq.tokens where they overlap and extends it
        beyond. Full pages are inserted now (shareable) and the Sequence's lock moves down to them;
        pages another request inserted first are re-pointed to the tree's slots, duplicates freed."""
        self._owner.check()
        requests.commit(self, seq, tokens)

    def close(self, seq: SequenceArg) -> None:
        """End a request: unlock its prefix, free its private pages (the partial last page and every
        reserved-but-uncommitted page) and release its row. The Sequence is unusable afterwards."""
        self._owner.check()
        requests.close(self, seq)

    def batch(self, seqs: Any, cascade: Any = False) -> BatchInputs:
        """Inputs of one forward over positions [committed_len, kv_len) of each Sequence of `seqs` (a list), checked
        once here so the per-layer path needs no checks. Mutates nothing. With `cascade`, also the
        plan of cascade decode (`BatchInputs.cascade`, radixkv/cascade.py) over the leading
        Sequences that extend by exactly one position: None unless two of them share a tree node, and on
        CUDA unless it saves enough KV reads to repay its launches (`cascade.min_saved_positions`)."""
        self._owner.check()
        if cascade is not True:
            return self.seqs.batch(seqs, cascade)
        pool = self.kv_pool
        return self.seqs.batch(seqs, True, min_saved_positions(pool.layer_token_bytes, pool.device))

    def sequences(self) -> list[Sequence]:
        """The open Sequences, by row."""
        self._owner.check()
        return [rec.handle for rec in self.seqs.records() if rec.handle is not None]  # (never None once open)

    # ------------------------------------------------------------------ accounting

    def sizes(self) -> SizeInfo:
        """Slot counts; O(1), mutates nothing."""
        self._owner.check()
        free = self.ledger.num_free_pages * self.page_size
        evictable, protected = self.tree.evictable_size, self.tree.protected_size
        total = self.config.num_slots
        return SizeInfo(free, evictable + protected, evictable, protected, total - free - evictable - protected, total)

    def check_invariants(self) -> None:
        """Recompute every counter, page state and index from scratch; AssertionError on a mismatch."""
        self._owner.check()
        check_cache(self.ledger, self.tree, self.seqs, self.host)
        check_groups(self.groups, self.seqs)
        self.pins.check(self.tree.nodes())

    def group(self, g: int) -> SecondaryGroup:
        """Secondary layer group `g` (1 <= g <= len(config.groups)): its pool's calls (cache_groups.py)."""
        self._owner.check()
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= len(self.groups):
            raise InvalidArgumentError(f"group({g!r}): this cache has secondary groups 1..{len(self.groups)}")
        return self.groups[g - 1]

    def metrics(self) -> dict[str, float]:
        """Counters and gauges with vLLM-style names (`radixkv_` prefix); mutates nothing."""
        self._owner.check()
        return collect_metrics(self.sizes(), self.stats, len(self.seqs), self.host, self.tree.host_size)

    def take_events(self) -> list[KVEvent]:
        """KV events recorded since the last call (oldest first); [] when kv_events is off."""
        self._owner.check()
        return self.events.take() if self.events is not None else []

    def block_snapshot(self) -> list[KVEvent]:
        """AllBlocksCleared, then BlockStored for every block cached now (a resync for routers)."""
        self._owner.check()
        return (self.events or self._recorder()).snapshot(self.tree)

    def adopt_thread(self) -> None:
        """Make the calling thread the cache's driver. The thread that built the cache hands it over
        to the first adopter; after that, a thread adopts only a cache whose owner released it
        (release_thread()) or has ended. ThreadOwnershipError, nothing changed, otherwise: two
        threads adopting one cache would interleave its bookkeeping."""
        self._owner.adopt()

    def release_thread(self) -> None:
        """Give the cache up (the owner thread only): until some thread calls adopt_thread(), every
        call raises ThreadOwnershipError."""
        self._owner.release()

    @property
    def _thread(self) -> int | None:  # the owning thread's ident, for fingerprints in tests
        return self._owner.thread
