"""HostTier: a second KV pool in host memory that mirrors cached pages (SGLang's HiCache, MAX's
host block pool), so the cache remembers more than the device holds.

Write policies:
    write_through  every node that gets device KV is copied to the host at once (if the host
                   tier can make room); device eviction then only drops the device copy.
    write_back     a node is copied to the host when device eviction takes it (`keep`).
A node whose host copy cannot be made is evicted from both tiers, as without a host tier: the host
tier is a cache too, and never a reason to fail. Host eviction follows the cache's policy, host-only
leaves first (RadixTree.evict_host). Promotion (host -> device) happens in `RadixCache.open`, one
batched copy per layer for the whole host-only part of the match.

This class is the only writer of the host pool and its allocator; the tree records which host
pages a node holds. Copies go page-major, one `index_select` and one `index_copy_` per layer and
per K/V: bytes moved = 2 * num_layers * tokens * heads * dim * itemsize.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from radixkv.pools import SlotAllocator, TokenToKVPool, page_slots
from radixkv.radix import evict_host, residency
from radixkv.runs import expand

if TYPE_CHECKING:
    from radixkv.config import CacheConfig
    from radixkv.radix import RadixTree, TreeNode


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
                                  pin_memory=torch.cuda.is_available(), kv_layers=config.kv_layers)
        self.allocator = SlotAllocator(config.host_slots // config.page_size, config.page_size)
        self.write_back = config.host_write_policy == "write_back"
        self.backed_up_tokens = self.promoted_tokens = self.host_evicted_tokens = 0
        self.bytes_to_host = self.bytes_to_device = 0

    def back_up(self, nodes: list[TreeNode]) -> None:
        """Write-through: copy the nodes that just got device KV (insert's `gained`) to the host."""
        if not self.write_back:
            for node in nodes:
                if node.host_pages is None and node.pages is not None:
                    host = self._copy_out(node)
                    if host is not None:
                        residency.set_host(self.tree, node, host)

    def keep(self, node: TreeNode) -> np.ndarray | None:
        """Write-back, called by device eviction for a victim with no host copy: host pages now
        holding its KV, or None when the host tier cannot make room."""
        return self._copy_out(node) if self.write_back else None

    def _copy_out(self, node: TreeNode) -> np.ndarray | None:
        assert node.pages is not None  # (device nodes only)
        k = node.size // self.page_size
        short = k - self.allocator.num_free_pages
        if short > 0:
            if short * self.page_size > self.tree.host_size:
                return None
            self.free(evict_host(self.tree, short * self.page_size))
        host = self.allocator.alloc_pages(k)
        ps = self.page_size
        device = page_slots(expand(node.pages, k), ps)
        self.bytes_to_host += copy_kv(self.device_pool, device, self.pool, page_slots(host, ps))
        self.backed_up_tokens += node.size
        return host

    def free(self, host_pages: np.ndarray) -> None:
        """Give back host pages the tree let go."""
        self.host_evicted_tokens += len(host_pages) * self.page_size
        self.allocator.free_pages(host_pages)

    def promote(self, host_pages: np.ndarray, device_pages: np.ndarray) -> None:
        """Copy host KV back into fresh device pages (the caller then hands them to the tree)."""
        ps = self.page_size
        self.bytes_to_device += copy_kv(self.pool, page_slots(host_pages, ps), self.device_pool,
                                        page_slots(device_pages, ps))
        self.promoted_tokens += len(host_pages) * ps

    def check(self, host_pages: np.ndarray) -> None:
        """Host pages are free or hold exactly one node's copy (`host_pages`: every node's, from check_tree)."""
        used = np.zeros(self.allocator.num_pages, dtype=np.bool_)
        used[host_pages] = True
        if not np.array_equal(used, ~self.allocator.free_mask()):
            raise AssertionError("host tier: pages held by nodes != pages not free in the host allocator")
