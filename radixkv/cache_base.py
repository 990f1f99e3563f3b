"""CacheBase: what a RadixCache is made of, and the steps its public calls share.

The owners (DESIGN.md: one writer per state), built from a CacheConfig: the PageLedger, the
RadixTree, the SequenceTable, the pins, the KV pool, the optional host tier and KV-event recorder,
and one SecondaryGroup per secondary layer group. And the internal steps that the tree level
(cache.py) and the request level (cache_requests.py) share: keying tokens (namespace, extra keys),
a counted match, taking pages (evicting as needed) and evicting. RadixCache (cache.py) adds every
public call; nothing here is public API.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from radixkv.cache_groups import SecondaryGroup
from radixkv.cache_thread import ThreadOwner
from radixkv.cache_windows import WindowGroup
from radixkv.config import KV_GROUP_KINDS, CacheConfig
from radixkv.errors import ConfigError
from radixkv.eviction import make_policy
from radixkv.events.groups import event_groups
from radixkv.events.recorder import EventRecorder
from radixkv.host_tier import HostTier
from radixkv.insert_slots import MatchedSlots
from radixkv.keys import DEFAULT_NAMESPACE, as_extra_keys, request_key
from radixkv.multimodal import MultiModalKeys
from radixkv.pools import PageLedger, TokenToKVPool
from radixkv.radix import MatchInfo, RadixTree, TreeNode, evict_device
from radixkv.runs import count
from radixkv.radix.pins import Pins
from radixkv.radix.windows import Reach
from radixkv.results import CacheStats
from radixkv.sequences import SequenceTable


class CacheBase:
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
        self.seqs: SequenceTable[TreeNode] = SequenceTable(config.max_requests, config.max_context_len, ps,
                                                           config.device)
        self.req_pool = self.seqs.pool
        self.host = HostTier(config, self.tree, self.kv_pool) if config.host_slots else None
        self.stats = CacheStats()
        self._matched: MatchedSlots | None = None  # what the last match_prefix returned, for insert (insert_slots.py)
        self._owner = ThreadOwner()  # (its check() called directly: a native call, not a bound method's)
        own = self._owner.check
        # secondary layer groups (cache_groups.py): group g is groups[g - 1]
        self.groups = tuple(WindowGroup(g, spec, ps, self.tree, own, config.num_pages, self.kv_pool.device)
                            if spec.kind in KV_GROUP_KINDS else SecondaryGroup(g, spec, ps, self.tree, own)
                            for g, spec in enumerate(config.groups, start=1))
        self.windows = tuple(g for g in self.groups if isinstance(g, WindowGroup))

    def _recorder(self) -> EventRecorder:
        cfg = self.config
        return EventRecorder(cfg.event_block_size, cfg.page_size, cfg.event_hash, self.mm_keys,
                             event_groups(cfg.groups))

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

    def _match(self, key: bytes, root: TreeNode, asked: int) -> MatchInfo:
        m = self.tree.match(key, root)
        st = self.stats
        st.query_tokens += asked
        st.hit_tokens += m.length
        st.host_hit_tokens += m.host_length
        return m

    def _take(self, k: int, state: int) -> np.ndarray:
        return self.ledger.take(k, state, self.tree.evictable_size // self.page_size, self._evict_pages)

    def _evict_pages(self, n: int) -> list[int]:
        if self.tree.pins is not None:
            self.pins.expire()
        pages, host_pages, secondary = evict_device(self.tree, n, None if self.host is None else self.host.keep)
        if len(host_pages) and self.host is not None:  # (host pages come only from a host tier)
            self.host.free(host_pages)
        for group, group_pages in zip(self.groups, secondary):
            group.ledger.release(group_pages)
        self.stats.evicted_tokens += count(pages) * self.page_size
        return pages
