"""KV events: vLLM's event types (records.py; parse.py validates them), the block hashes routers
match on (hashing.py), and the msgpack wire format (wire.py, imported on its own: it needs the
`events` extra).

The cache publishes `BlockStored` when a block becomes fully cached on a medium and `BlockRemoved`
when it stops being so; `AllBlocksCleared` says "forget everything from this instance" (sent on
resync). See events/recorder.py for when each is recorded.
"""

from __future__ import annotations

from radixkv.events.hashing import (EVENT_HASHES, SEED, BlockHasher, block_digests, block_hashes, chain_hashes,
                                    hash_function)
from radixkv.events.parse import EventFormatError, event_to_dict, parse_event
from radixkv.events.records import (DEVICE, HASH_LIMIT, HOST, MEDIA, STORAGE, AllBlocksCleared, BlockHashes,
                                    BlockRemoved, BlockStored, KVEvent, TokenIds)

event_from_dict = parse_event  # the older name: it accepts dicts, positional lists and event objects

__all__ = ["EVENT_HASHES", "BlockHasher", "block_digests", "DEVICE", "HOST", "STORAGE", "MEDIA", "HASH_LIMIT", "SEED",
           "AllBlocksCleared", "BlockRemoved", "BlockStored",
           "EventFormatError", "KVEvent", "block_hashes", "chain_hashes", "hash_function", "event_to_dict",
           "event_from_dict", "parse_event", "TokenIds", "BlockHashes"]
