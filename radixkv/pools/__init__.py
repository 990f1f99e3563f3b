"""Memory pools: who owns which slot (SlotAllocator), where KV lives (TokenToKVPool), and which
slots a request reads (ReqToTokenPool). Nothing here knows the radix tree."""

from radixkv.pools.allocator import SlotAllocator, page_slots, slot_pages
from radixkv.pools.ledger import CACHED, FREE, PRIVATE, RESERVED, PageLedger
from radixkv.pools.kv_pool import TokenToKVPool
from radixkv.pools.req_pool import ReqToTokenPool

__all__ = ["SlotAllocator", "PageLedger", "TokenToKVPool", "ReqToTokenPool", "page_slots", "slot_pages",
           "FREE", "CACHED", "PRIVATE", "RESERVED"]
