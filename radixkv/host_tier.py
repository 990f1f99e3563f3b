"""HostTier: a second KV pool in host memory that mirrors cached pages (SGLang's HiCache, MAX's
host block pool), so the cache remembers more than the device holds.

Write policies:
    write_through  every node that gets device KV is copied to the host at once (if the host
                   tier can make room); device eviction then only drops the device copy.
    write_back     a node is copied to the host when device eviction takes it.
A node whose host copy cannot be made is evicted from both tiers, as without a host tier: the host
tier is a cache too, and never a reason to fail. Host eviction follows the cache's policy, host-only
leaves first (residency.py). Promotion (host -> device) happens in `RadixCache.open`, one batched
copy per layer for the whole host-only part of the match.

Copies go through `gather_kv`/`store_kv`-shaped indexing, page-major, one `index_select` and one
`index_copy_` per layer and per K/V: bytes moved = 2 * num_layers * tokens * heads * dim * itemsize.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from radixkv.pools import SlotAllocator, TokenToKVPool, page_slots, slot_pages

if TYPE_CHECKING:
    from radixkv.config import CacheConfig
    from radixkv.radix.node import TreeNode
    from radixkv.radix.tree import RadixTree


def copy_kv(src: TokenToKVPool, src_slots: np.ndarray, dst: TokenToKVPool, dst_slots: np.ndarray) -> int:
    """dst[dst_slots] = src[src_slots] for K and V of every layer; returns bytes moved."""
    if not len(src_slots):
        return 0
    s = torch.from_numpy(src_slots).to(src.device)
    d = torch.from_numpy(dst_slots).to(dst.device)
    for bufs_src, bufs_dst in ((src.k_buffer, dst.k_buffer), (src.v_buffer, dst.v_buffer)):
        for a, b in zip(bufs_src, bufs_dst):
            b.index_copy_(0, d, a.index_select(0, s).to(b.device, non_blocking=True))
    return len(src_slots) * src.bytes_per_token


class HostTier:
    def __init__(self, config: CacheConfig, tree: RadixTree, device_pool: TokenToKVPool) -> None:
        self.page_size = config.page_size
        self.tree = tree
        self.device_pool = device_pool
        self.pool = TokenToKVPool(config.host_slots, config.num_layers, config.num_kv_heads,
                                  config.head_dim, config.dtype, "cpu",
                                  pin_memory=torch.cuda.is_available())
        self.allocator = SlotAllocator(config.host_slots // config.page_size, config.page_size)
        self.write_back = config.host_write_policy == "write_back"
        self.backed_up_tokens = self.promoted_tokens = self.host_evicted_tokens = 0
        self.bytes_to_host = self.bytes_to_device = 0
        tree.backup = self

    # ------------------------------------------------------------------ HostBackup (called by the tree)

    def device_gained(self, node: TreeNode) -> None:
        if not self.write_back and node.host_slots is None:
            self._back_up(node)

    def keep_on_host(self, node: TreeNode) -> bool:
        return node.host_slots is not None or (self.write_back and self._back_up(node))

    # ------------------------------------------------------------------ copies

    def _back_up(self, node: TreeNode) -> bool:
        k = len(node) // self.page_size
        if not self._make_room(k):
            return False
        host = page_slots(self.allocator.alloc_pages(k), self.page_size)
        self.bytes_to_host += copy_kv(self.device_pool, node.slots, self.pool, host)
        self.tree.set_host(node, host)
        self.backed_up_tokens += len(node)
        return True

    def _make_room(self, pages: int) -> bool:
        short = pages - self.allocator.num_free_pages
        if short > 0:
            if short * self.page_size > self.tree.host_size:
                return False
            self.free(self.tree.evict_host(short * self.page_size))
        return True

    def free(self, host_slots: np.ndarray) -> None:
        """Give the pages of whole-page host slots back (after the tree dropped them)."""
        self.host_evicted_tokens += len(host_slots)
        self.allocator.free_pages(slot_pages(host_slots, self.page_size))

    def promote(self, host_slots: np.ndarray, device_slots: np.ndarray) -> None:
        """Copy host KV back into fresh device slots (the caller then hands them to the tree)."""
        self.bytes_to_device += copy_kv(self.pool, host_slots, self.device_pool, device_slots)
        self.promoted_tokens += len(host_slots)

    def check(self, host_slots: np.ndarray) -> None:
        """Host pages are free or hold exactly one node's copy (`host_slots`: every node's, from check_tree)."""
        self.allocator.check()
        used = np.zeros(self.allocator.num_pages, dtype=np.bool_)
        used[slot_pages(host_slots, self.page_size)] = True
        if not np.array_equal(used, ~self.allocator.free_mask()):
            raise AssertionError("host tier: pages held by nodes != pages not free in the host allocator")
