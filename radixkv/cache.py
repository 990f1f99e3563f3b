"""RadixCache: the radix tree, the slot pools and the eviction index, tied together.

Two levels of API (DESIGN.md). The tree level speaks SGLang's vocabulary: match_prefix, lock,
unlock, alloc, free, insert, evict. The request level (requests.py) is what a generation loop
calls: open, reserve, commit, close, batch. Both keep one record of page ownership
(`PageStates`): free, cached, private (alloc) or reserved (a Sequence), and every public call
validates its input completely before it changes anything, so a raising call leaves the cache
exactly as it was.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np
import torch

from radixkv.config import CacheConfig
from radixkv.errors import InvalidSlotsError, LockError, OutOfSlotsError
from radixkv.eviction import make_policy
from radixkv.events import KVEvent
from radixkv.host_tier import HostTier
from radixkv.invariants import check_cache
from radixkv.metrics import CacheStats, collect_metrics
from radixkv.pools import ReqToTokenPool, SlotAllocator, TokenToKVPool, page_slots, slot_pages
from radixkv.pools.pages import CACHED, FREE, PRIVATE, PageStates
from radixkv.radix.block_events import EventRecorder
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree
from radixkv.requests import RequestAPI
from radixkv.results import MatchResult, SizeInfo
from radixkv.tokens import SlotValidator, TokensLike, as_count, as_tokens


def _to_tensor(slots: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(slots, dtype=np.int64))


class RadixCache(RequestAPI):
    """A prefix-sharing KV cache. Not thread-safe: one scheduler thread drives it."""

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self.page_size = ps = config.page_size
        self.kv_pool = TokenToKVPool(config.num_slots, config.num_layers, config.num_kv_heads,
                                     config.head_dim, config.dtype, config.device)
        self.req_pool = ReqToTokenPool(config.max_requests, config.max_context_len, config.device)
        self.allocator = SlotAllocator(config.num_pages, ps)
        self.pages = PageStates(config.num_pages)
        self.tree = RadixTree(ps, make_policy(config.eviction), host_tier=config.host_slots > 0)
        self.host = HostTier(config, self.tree, self.kv_pool) if config.host_slots else None
        self.events = EventRecorder(config.event_block_size) if config.kv_events else None
        self.tree.listener = self.events
        self.stats = CacheStats()
        self._seqs: dict[int, object] = {}  # row -> open Sequence
        self._as_slots = SlotValidator(config.num_slots)

    # ------------------------------------------------------------------ tree level

    def match_prefix(self, tokens: TokensLike, namespace: Hashable = None) -> MatchResult:
        """Longest device-cached prefix of `tokens`, whole pages only, and how many more tokens the
        host tier holds (`host_length`). Does not lock; refreshes the recency of the matched path
        and may split the edge where the match ends."""
        toks = as_tokens(tokens)
        node, length, slots, host_length = self.tree.match(toks, self.tree.root(namespace))
        self.stats.count_query(len(toks), length, host_length)
        return MatchResult(length, _to_tensor(slots), node, host_length)

    def lock(self, node: TreeNode) -> None:
        """Protect `node` and its ancestors from eviction; pairs with one unlock(node)."""
        self._check_node(node)
        self.tree.lock(node)

    def unlock(self, node: TreeNode) -> None:
        """Undo one earlier lock(node). LockError if there is none."""
        self._check_node(node)
        self.tree.unlock(node)

    def _check_node(self, node: TreeNode) -> None:
        if not isinstance(node, TreeNode):
            raise LockError(f"expected a TreeNode from match_prefix, got {type(node).__name__}")

    def alloc(self, n: int) -> torch.Tensor:
        """`n` private slots: the first n slots of ceil(n / page_size) fresh pages, evicting
        unlocked cached tokens as needed. OutOfSlotsError, nothing changed, if even full
        eviction cannot serve. Returns int64 `[n]`."""
        n = as_count(n, "alloc(n)")
        pages = self._take_pages(-(-n // self.page_size), PRIVATE)
        return _to_tensor(page_slots(pages, self.page_size)[:n])

    def _take_pages(self, k: int, state: int) -> np.ndarray:
        short = k - self.allocator.num_free_pages
        if short > 0:
            evictable_pages = self.tree.evictable_size // self.page_size
            if short > evictable_pages:
                raise OutOfSlotsError(
                    f"need {k} pages ({k * self.page_size} slots): {self.allocator.num_free_pages} "
                    f"free and {evictable_pages} evictable; close Sequences, unlock nodes, "
                    "or raise CacheConfig.num_slots")
            self._evict(short * self.page_size)
        pages = self.allocator.alloc_pages(k)
        self.pages.set(pages, state)
        return pages

    def _release(self, slots: np.ndarray) -> None:
        """Give the pages of whole-page `slots` back to the allocator."""
        self._free_pages(slot_pages(slots, self.page_size))

    def _free_pages(self, pages: np.ndarray) -> None:
        self.pages.set(pages, FREE)
        self.allocator.free_pages(pages)

    def free(self, slots: TokensLike) -> None:
        """Free the pages of `slots`, each whole. Every page touched must be private from alloc()."""
        pages = np.unique(self._as_slots(slots) // self.page_size)
        if not self.pages.all_in(pages, PRIVATE):
            raise InvalidSlotsError(f"free() takes only slots from alloc(): {self.pages.describe(pages, PRIVATE)}")
        self._free_pages(pages)

    def insert(self, tokens: TokensLike, slots: TokensLike, namespace: Hashable = None,
               priority: int = 0) -> int:
        """Cache `tokens` with their `slots`; returns how many leading tokens were already cached.

        Per whole page of positions, the slots are either the tree's own (they stay) or one private
        page in order (a duplicate of a cached page is freed, a new page moves to the tree). The
        slots of a trailing partial page must be private; their pages are freed. Anything else
        raises InvalidSlotsError with nothing changed. Afterwards the caller owns none of `slots`.
        """
        toks = as_tokens(tokens)
        given = self._as_slots(slots)
        if len(given) != len(toks):
            raise InvalidSlotsError(f"insert: {len(toks)} tokens but {len(given)} slots")
        ps, root = self.page_size, self.tree.root(namespace)
        n = len(toks) // ps * ps
        walked = self.tree.walk(toks[:n], root)
        k, m = self.tree.device_part(*walked, root)  # host-only nodes on the way take new pages
        duplicates, new, tail = self._classify_insert(given, self.tree.path_slots(walked[0][:k], m), m, n)
        self.tree.insert(toks[:n], given[:n], root, priority, walked)
        self.pages.set(new, CACHED)
        self._free_pages(np.concatenate([duplicates, tail]))
        return m

    def _classify_insert(self, given: np.ndarray, tree_slots: np.ndarray, m: int,
                         n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pages of insert's `given` slots: (private duplicates of cached pages in [0, m), new pages
        for [m, n), pages of the partial tail [n, len)). Raises InvalidSlotsError, changing nothing."""
        ps = self.page_size
        head, body = given[:m], given[m:n]
        if head.tobytes() == tree_slots.tobytes():  # the usual case: match_prefix's own slots
            duplicates = head[:0]
        else:
            shared = (head.reshape(-1, ps) == tree_slots.reshape(-1, ps)).all(1)
            duplicates = head.reshape(-1, ps)[~shared]
            self._check_whole_pages(duplicates)
            duplicates = duplicates[:, 0] // ps
        self._check_whole_pages(body)
        new, tail = slot_pages(body, ps), given[n:] // ps
        tail = np.unique(tail) if len(tail) > 1 else tail
        wanted = np.concatenate([duplicates, new, tail])
        if not self.pages.all_in(wanted, PRIVATE):
            raise InvalidSlotsError(f"insert: slots must be private from alloc(): {self.pages.describe(wanted, PRIVATE)}")
        return duplicates, new, tail

    def _check_whole_pages(self, slots: np.ndarray) -> None:
        ps = self.page_size
        if ps == 1 or not len(slots):
            return
        rows = slots.reshape(-1, ps)
        if (rows[:, 0] % ps).any() or (rows != rows[:, :1] + np.arange(ps)).any():
            raise InvalidSlotsError("insert: each page of positions must be the tree's own slots there "
                                    "or the page_size slots of one private page, in order")

    def evict(self, n: int) -> int:
        """Evict at least `n` unlocked cached tokens if that many exist (trimming a leaf's tail
        page by page rather than dropping it whole). Returns tokens freed. evict(0) does nothing."""
        return self._evict(as_count(n, "evict(n)"))

    def _evict(self, n: int) -> int:
        freed, host_freed = self.tree.evict(n)
        self._release(freed)
        if len(host_freed):
            self.host.free(host_freed)
        self.stats.evicted_tokens += len(freed)
        return len(freed)

    # ------------------------------------------------------------------ accounting

    def sizes(self) -> SizeInfo:
        """Slot counts; O(1), mutates nothing."""
        free = self.allocator.num_free_slots
        evictable, protected = self.tree.evictable_size, self.tree.protected_size
        cached = evictable + protected
        total = self.config.num_slots
        return SizeInfo(free, cached, evictable, protected, total - free - cached, total)

    def check_invariants(self) -> None:
        """Recompute every counter, page state and index from scratch; AssertionError on a mismatch."""
        check_cache(self)

    def metrics(self) -> dict[str, float]:
        """Counters and gauges with vLLM-style names (`radixkv_` prefix); mutates nothing."""
        return collect_metrics(self)

    def take_events(self) -> list[KVEvent]:
        """KV events recorded since the last call (oldest first); [] when kv_events is off."""
        return self.events.take() if self.events is not None else []

    def block_snapshot(self) -> list[KVEvent]:
        """AllBlocksCleared, then BlockStored for every block cached now (a resync for routers)."""
        return EventRecorder.snapshot(self.tree, self.config.event_block_size)
