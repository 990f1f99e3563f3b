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

import time
from typing import Any, Callable

import numpy as np
import torch

from radixkv.cache_groups import SecondaryGroup
from radixkv.cache_host import promote
from radixkv.cache_thread import ThreadOwner
from radixkv.cache_windows import WindowGroup, path_between
from radixkv.config import KV_GROUP_KINDS, CacheConfig
from radixkv.errors import ConfigError, InvalidArgumentError, InvalidSlotsError, OutOfSlotsError
from radixkv.eviction import make_policy
from radixkv.events import KVEvent
from radixkv.events.groups import event_groups
from radixkv.events.recorder import EventRecorder
from radixkv.host_tier import HostTier
from radixkv.insert_slots import InsertSlots
from radixkv.invariants import check_cache, check_groups
from radixkv.keys import DEFAULT_NAMESPACE, as_extra_keys, request_key
from radixkv.multimodal import MultiModalKeys
from radixkv.metrics import collect_metrics
from radixkv.pools import CACHED, PRIVATE, RESERVED, PageLedger, TokenToKVPool, page_slots
from radixkv.radix import SEQUENCE, USER, MatchInfo, RadixTree, TreeNode, evict_device
from radixkv.radix import locks, lookup
from radixkv.radix.pins import Pins
from radixkv.radix.windows import Reach
from radixkv.results import BatchInputs, CacheStats, LockHandle, MatchResult, SizeInfo
from radixkv.sequences import Sequence, SequenceTable
from radixkv.tokens import ExtraKeysArg, IntArg, SecondsArg, SequenceArg, TokensLike, as_count, as_priority, as_slots, as_tokens, slot_array

class RadixCache:
    """A prefix-sharing KV cache over a radix tree (DESIGN.md has the whole contract)."""

    def __init__(self, config: object, clock: Callable[[], object] = time.monotonic) -> None:
        """`config`: a CacheConfig (checked here: ConfigError otherwise). `clock` (seconds) times pins
        only; tests pass a fake one."""
        if not isinstance(config, CacheConfig):
            raise ConfigError(f"RadixCache takes a CacheConfig, got {type(config).__name__}")
        self.config = config
        self.page_size = ps = config.page_size
        self.kv_pool = TokenToKVPool(config.num_slots, config.num_layers, config.num_kv_heads, config.head_dim,
                                     config.dtype, config.device, kv_layers=config.kv_layers,
                                     layer_slots=config.group_layer_slots)
        self.ledger = PageLedger(config.num_pages, ps)
        self.mm_keys = MultiModalKeys()  # multimodal items' tree ids, by whole content hash
        self.events = self._recorder() if config.kv_events else None
        self.tree = RadixTree(ps, make_policy(config.eviction), config.host_slots > 0, self.events, len(config.groups),
                              tuple(Reach(g.kind, g.size) for g in config.groups))
        self.pins = Pins(self.tree, config.pin_budget, clock)
        self.seqs: SequenceTable[TreeNode] = SequenceTable(config.max_requests, config.max_context_len, ps, config.device)
        self.req_pool = self.seqs.pool
        self.host = HostTier(config, self.tree, self.kv_pool) if config.host_slots else None
        self.stats = CacheStats()
        self._owner = ThreadOwner()
        self._own = self._owner.check
        # secondary layer groups (cache_groups.py): group g is groups[g - 1]
        self.groups = tuple(WindowGroup(g, spec, ps, self.tree, self._own, config.num_pages, self.kv_pool.device)
                            if spec.kind in KV_GROUP_KINDS else SecondaryGroup(g, spec, ps, self.tree, self._own)
                            for g, spec in enumerate(config.groups, start=1))
        self.windows = tuple(g for g in self.groups if isinstance(g, WindowGroup))

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
        self._own()
        ns, toks = self._key(as_tokens(tokens), namespace, extra_keys)
        m = self._match(toks, self.tree.root(ns), len(toks))
        slots = torch.from_numpy(page_slots(m.pages, self.page_size))
        return tuple.__new__(MatchResult, (m.length, slots, m.node, m.host_length))  # (no interpreted __new__)

    def locate(self, tokens: TokensLike, namespace: Any = None, extra_keys: ExtraKeysArg = None) -> LockHandle:
        """The node ending the longest prefix of `tokens` (whole pages) whose full KV is on the
        device, whatever its secondary groups hold (where a group component, e.g. a state
        snapshot taken after `node.end` tokens, can be attached); the namespace's root when none.
        Splits the edge where it ends; not a use: no recency, hit or query is counted."""
        self._own()
        ns, toks = self._key(as_tokens(tokens), namespace, extra_keys)
        return lookup.locate(self.tree, self._page_key(toks), self.tree.root(ns))

    def lock(self, node: LockHandle) -> None:
        """Protect `node` and its ancestors from eviction; pairs with one unlock(node)."""
        self._own()
        locks.lock(self.tree, self.tree.check_node(node), USER)

    def unlock(self, node: LockHandle) -> None:
        """Undo one earlier lock(node). LockError if there is none (a Sequence's lock is not one)."""
        self._own()
        locks.unlock(self.tree, self.tree.check_node(node), USER)

    def alloc(self, n: IntArg) -> torch.Tensor:
        """`n` private slots: the first n slots of ceil(n / page_size) fresh pages, evicting unlocked
        cached tokens as needed. OutOfSlotsError, nothing changed, if even full eviction cannot serve.
        Returns int64 `[n]`."""
        self._own()
        n = as_count(n, "alloc(n)")
        slots = self.ledger.alloc_slots(n, self.tree.evictable_size // self.page_size, self._evict_pages)
        return torch.from_numpy(slots)

    def free(self, slots: TokensLike) -> None:
        """Free the pages of `slots`, each whole. Every page touched must be private from alloc()."""
        self._own()
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
        self._own()
        ns, toks = self._key(as_tokens(tokens), namespace, extra_keys)
        given = slot_array(slots)  # range-checked in InsertSlots, where the tree's own slots need none
        prio, root = as_priority(priority), self.tree.root(ns)
        until = None if pin_ttl is None else self.pins.deadline(pin_ttl, "insert(pin_ttl=...)")
        if len(given) != len(toks):
            raise InvalidSlotsError(f"insert: {len(toks)} tokens but {len(given)} slots")
        key = self._page_key(toks)
        n = len(key) // 4
        if until is not None:
            self.pins.charge(n - self.pins.pinned_length(key, root), "insert(pin_ttl=...)")
        check = InsertSlots(self.ledger, given, n)
        result = self.tree.insert(key, check.pages, root, prio, check.accept, use=True)
        if until is not None:
            self.pins.pin(result.node, until, "insert(pin_ttl=...)")
        self.ledger.move(check.new, CACHED)
        self.ledger.release(check.freed())
        if self.host is not None:
            self.host.back_up(result.gained)
        return result.cached_len

    def evict(self, n: IntArg) -> int:
        """Evict at least `n` unlocked cached tokens if that many exist (trimming a leaf's tail page
        by page rather than dropping it whole). Returns tokens freed. evict(0) does nothing."""
        self._own()
        pages = self._evict_pages(as_count(n, "evict(n)"))
        self.ledger.release(pages)
        return len(pages) * self.page_size

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
        self._own()
        extra = as_extra_keys(extra_keys)
        ns, toks = self._key(as_tokens(tokens), namespace, extra)
        prio = as_priority(priority)
        reuse = len(toks) if max_reuse is None else min(as_count(max_reuse, "max_reuse"), len(toks))
        until = None if pin_ttl is None else self.pins.deadline(pin_ttl, "open(pin_ttl=...)")
        self.seqs.check_length(len(toks), "open")
        self.seqs.check_row_free()
        root = self.tree.root(ns)
        if until is not None:  # plan the pin before the match and promotion change anything
            key = self._page_key(toks[:reuse])
            self.pins.charge(sum(lookup.peek(self.tree, key, root)) - self.pins.pinned_length(key, root), "open(pin_ttl=...)")
        m = self._match(toks[:reuse], root, reuse)
        if m.host_length and self.host is not None:
            m = promote(self.tree, self.ledger, self.host, self._take, toks[:reuse], m)
        if until is not None:
            self.pins.pin(m.node, until, "open(pin_ttl=...)")  # within the charge above: cannot fail
        locks.lock(self.tree, m.node, SEQUENCE)
        seq = self.seqs.open(toks, namespace, prio, m.node, page_slots(m.pages, self.page_size), extra)
        if until is not None:
            self.pins.open_row(seq.row, until)
        return seq

    def pin(self, tokens: TokensLike, namespace: Any = None, *, ttl: SecondsArg,
            extra_keys: ExtraKeysArg = None) -> int:
        """Keep the cached prefix of `tokens` (whole pages) for `ttl` seconds of the cache's clock:
        until then its pages are evicted only when nothing unpinned is evictable (a pin never
        blocks an allocation). Pinning again extends the deadline. Returns the pinned length in
        tokens (0 when nothing is cached). Not a use: recency and hit counts are left alone.
        PinBudgetError, nothing pinned, when the newly pinned tokens would exceed
        CacheConfig.pin_budget_tokens."""
        self._own()
        ns, toks = self._key(as_tokens(tokens), namespace, extra_keys)
        until = self.pins.deadline(ttl, "pin(ttl=...)")
        root = self.tree.root(ns)
        node = lookup.locate(self.tree, self._page_key(toks), root)
        self.pins.pin(node, until, "pin(ttl=...)")
        return node.end

    def pinned_tokens(self) -> int:
        """Tokens pinned now (expired pins dropped first)."""
        self._own()
        self.pins.expire()
        return self.pins.pinned_size

    def reserve(self, seq: SequenceArg, n: IntArg) -> torch.Tensor:
        """Slots for positions [kv_len, kv_len + n), filling the tail of the Sequence's last private
        page before taking new pages; written into its row. n = 0 is a no-op. OutOfSlotsError /
        ContextLengthError with nothing changed. Returns int64 `[n]`."""
        self._own()
        rec = self.seqs.get(seq)
        n, ps, start = as_count(n, "reserve(n)"), self.page_size, rec.kv_len
        self.seqs.check_length(start + n, "reserve")
        fill = min(-start % ps, n)  # free positions left in the last private page
        k = -(-(n - fill) // ps)
        for window in self.windows:  # window pages go with full pages: check first, change nothing
            window.check_room(k)
        pages = self._take(k, RESERVED)
        for window in self.windows:
            window.reserve(pages)
        head = rec.slots[start - 1] + 1 + np.arange(fill, dtype=np.int64)
        slots = np.concatenate([head, page_slots(pages, ps)[:n - fill]])
        self.seqs.extend(rec, slots)
        return torch.from_numpy(slots.copy())

    def commit(self, seq: SequenceArg, tokens: TokensLike) -> None:
        """Declare the KV of positions [committed_len, committed_len + len(tokens)) written. They
        must lie below kv_len; `tokens` must equal seq.tokens where they overlap and extends it
        beyond. Full pages are inserted now (shareable) and the Sequence's lock moves down to them;
        pages another request inserted first are re-pointed to the tree's slots, duplicates freed."""
        self._own()
        rec = self.seqs.get(seq)
        toks = as_tokens(tokens)
        if rec.extra_keys is not None and rec.extra_keys.mm:
            toks = rec.extra_keys.rekey(toks, rec.committed_len, rec.tokens)
        self.seqs.check_commit(rec, toks)
        start, end = self.seqs.commit(rec, toks)
        if end == start:
            return
        ps, node = self.page_size, rec.node
        pages = rec.slots[start:end][::ps] // ps
        result = self.tree.insert(rec.tokens[start:end].tobytes(), pages, node, rec.priority)
        if self.windows:
            nodes = path_between(node, result.node)
            for window in self.windows:
                window.commit(nodes, pages)
        k = result.cached_len // ps  # [start, start + k * ps): another request cached these first
        self.ledger.release(pages[:k])
        self.ledger.move(pages[k:], CACHED)
        if k:
            self.seqs.repoint(rec, start, page_slots(result.tree_pages, ps))
        locks.move_lock(self.tree, node, result.node, SEQUENCE)
        self.seqs.move_lock(rec, result.node)
        for window in self.windows:
            window.trim(rec.row, result.node, rec.cached_len)
        self.pins.extend(rec.row, result.node)
        if self.host is not None:
            self.host.back_up(result.gained)

    def close(self, seq: SequenceArg) -> None:
        """End a request: unlock its prefix, free its private pages (the partial last page and every
        reserved-but-uncommitted page) and release its row. The Sequence is unusable afterwards."""
        self._own()
        rec = self.seqs.get(seq)
        node = rec.node
        self.pins.close_row(rec.row)
        private = self.seqs.close(rec)[::self.page_size] // self.page_size
        for window in self.windows:
            window.close(rec.row, private)
        self.ledger.release(private)
        locks.unlock(self.tree, node, SEQUENCE)

    def batch(self, seqs: Any, cascade: Any = False) -> BatchInputs:
        """Inputs of one forward over positions [committed_len, kv_len) of each Sequence of `seqs` (a list), checked
        once here so the per-layer path needs no checks. Mutates nothing. With `cascade`, also the
        plan of cascade decode (`BatchInputs.cascade`, radixkv/cascade.py) over the leading
        Sequences that extend by exactly one position: None unless two of them share a tree node."""
        self._own()
        return self.seqs.batch(seqs, cascade)

    def sequences(self) -> list[Sequence]:
        """The open Sequences, by row."""
        self._own()
        return [rec.handle for rec in self.seqs.records() if rec.handle is not None]  # (never None once open)

    # ------------------------------------------------------------------ accounting

    def sizes(self) -> SizeInfo:
        """Slot counts; O(1), mutates nothing."""
        self._own()
        free = self.ledger.num_free_pages * self.page_size
        evictable, protected = self.tree.evictable_size, self.tree.protected_size
        total = self.config.num_slots
        return SizeInfo(free, evictable + protected, evictable, protected, total - free - evictable - protected, total)

    def check_invariants(self) -> None:
        """Recompute every counter, page state and index from scratch; AssertionError on a mismatch."""
        self._own()
        check_cache(self.ledger, self.tree, self.seqs, self.host)
        check_groups(self.groups, self.seqs)
        self.pins.check(self.tree.nodes())

    def group(self, g: int) -> SecondaryGroup:
        """Secondary layer group `g` (1 <= g <= len(config.groups)): its pool's calls (cache_groups.py)."""
        self._own()
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= len(self.groups):
            raise InvalidArgumentError(f"group({g!r}): this cache has secondary groups 1..{len(self.groups)}")
        return self.groups[g - 1]

    def metrics(self) -> dict[str, float]:
        """Counters and gauges with vLLM-style names (`radixkv_` prefix); mutates nothing."""
        self._own()
        return collect_metrics(self.sizes(), self.stats, len(self.seqs), self.host, self.tree.host_size)

    def take_events(self) -> list[KVEvent]:
        """KV events recorded since the last call (oldest first); [] when kv_events is off."""
        self._own()
        return self.events.take() if self.events is not None else []

    def block_snapshot(self) -> list[KVEvent]:
        """AllBlocksCleared, then BlockStored for every block cached now (a resync for routers)."""
        self._own()
        return (self.events or self._recorder()).snapshot(self.tree)

    def _recorder(self) -> EventRecorder:
        cfg = self.config
        return EventRecorder(cfg.event_block_size, cfg.page_size, cfg.event_hash, self.mm_keys, event_groups(cfg.groups))

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

    # ------------------------------------------------------------------ helpers

    def _key(self, toks: np.ndarray, namespace: Any, extra_keys: Any) -> tuple[bytes, np.ndarray]:
        if namespace is None and extra_keys is None:  # the common case: nothing to check (keys.py runs interpreted)
            return DEFAULT_NAMESPACE, toks
        ns, keyed = request_key(namespace, extra_keys, toks, self.mm_keys)
        extra = as_extra_keys(extra_keys) if keyed is not toks else None  # keyed anew only by extra keys
        if extra is not None and self.events is not None:
            self.events.learn(extra, toks)  # the raw ids vLLM's block hashes see
        return ns, keyed

    def _page_key(self, toks: np.ndarray) -> bytes:
        """The tree's key of `toks`: its whole pages, int32 bytes (a partial last page is never keyed)."""
        n = len(toks) // self.page_size * self.page_size
        return (toks if n == len(toks) else toks[:n]).tobytes()

    def _match(self, toks: np.ndarray, root: TreeNode, asked: int) -> MatchInfo:
        m = self.tree.match(self._page_key(toks), root)
        st = self.stats
        st.query_tokens += asked
        st.hit_tokens += m.length
        st.host_hit_tokens += m.host_length
        return m

    def _take(self, k: int, state: int) -> np.ndarray:
        return self.ledger.take(k, state, self.tree.evictable_size // self.page_size, self._evict_pages)

    def _evict_pages(self, n: int) -> np.ndarray:
        if self.tree.pins is not None:
            self.pins.expire()
        pages, host_pages, secondary = evict_device(self.tree, n, None if self.host is None else self.host.keep)
        if len(host_pages) and self.host is not None:  # (host pages come only from a host tier)
            self.host.free(host_pages)
        for group, group_pages in zip(self.groups, secondary):
            group.ledger.release(group_pages)
        self.stats.evicted_tokens += len(pages) * self.page_size
        return pages
