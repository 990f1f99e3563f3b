"""Shared pieces of the state-machine tests: the KV identity stamp and a plain-Python model.

KV identity: every slot a test fills gets the value `prefix_hash(namespace, tokens[:pos + 1])`
in layer 0's K buffer. Whatever the cache later hands out for a prefix (a match, a Sequence's row)
must carry exactly the stamps of that prefix: a slot shared between different prefixes, a slot
freed while still referenced, or a wrong re-pointing after dedup all break it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

_MOD = 1_000_003  # < 2**24, so every stamp is exact in float32


def prefix_hashes(namespace: object, tokens: list[int] | np.ndarray) -> np.ndarray:
    """float32 `[len(tokens)]`: stamp of each prefix tokens[:i + 1] in `namespace`."""
    h = 0 if namespace is None else 7
    out = np.empty(len(tokens), dtype=np.float32)
    for i, t in enumerate(tokens):
        h = (h * 31 + int(t) + 1) % _MOD
        out[i] = h
    return out


def _as_i64(slots) -> torch.Tensor:
    if isinstance(slots, torch.Tensor):
        return slots.long()
    return torch.from_numpy(np.array(slots, dtype=np.int64))


def stamp(cache, namespace: object, tokens, slots: torch.Tensor | np.ndarray, start: int = 0) -> None:
    """Write the stamps of positions [start, start + len(slots)) of `tokens` into `slots`."""
    slots = _as_i64(slots)
    stamps = prefix_hashes(namespace, list(tokens)[:start + len(slots)])[start:]
    cache.kv_pool.k_buffer[0][slots, 0, 0] = torch.from_numpy(stamps)


def assert_stamped(cache, namespace: object, tokens, slots, what: str) -> None:
    slots = _as_i64(slots)
    got = cache.kv_pool.k_buffer[0][slots, 0, 0].numpy()
    want = prefix_hashes(namespace, list(tokens)[:len(slots)])
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        raise AssertionError(f"{what}: KV at position {bad} (slot {int(slots[bad])}) is {got[bad]}, "
                             f"written for another prefix; want {want[bad]}")


@dataclass
class Model:
    """What the test knows independently of the cache."""

    page_size: int
    held: list[np.ndarray] = field(default_factory=list)  # alloc()ed slot groups not yet given back
    locks: list[tuple[object, object, list[int]]] = field(default_factory=list)  # (node, ns, prefix)
    seqs: list[tuple[object, object, list[int]]] = field(default_factory=list)  # (Sequence, ns, tokens)

    def held_pages(self) -> int:
        return sum(-(-len(h) // self.page_size) for h in self.held)


def replay(events: list, blocks: set[tuple[int, str]]) -> None:
    """Apply KV events to a set of (block hash, medium), as a router's index would."""
    from radixkv.events import AllBlocksCleared, BlockRemoved, BlockStored

    for e in events:
        if isinstance(e, AllBlocksCleared):
            blocks.clear()
        elif isinstance(e, BlockStored):
            assert len(e.token_ids) == len(e.block_hashes) * e.block_size
            parent = e.parent_block_hash
            assert parent is None or (parent, "GPU") in blocks or (parent, "CPU") in blocks, \
                "BlockStored names a parent block the cache does not hold"
            for h in e.block_hashes:
                assert (h, e.medium) not in blocks, "BlockStored twice without a removal"
                blocks.add((h, e.medium))
        elif isinstance(e, BlockRemoved):
            for h in e.block_hashes:
                blocks.remove((h, e.medium))


def cached_blocks(tree, block_size: int) -> set[tuple[int, str]]:
    """From scratch: (hash, medium) of every block whose last token's node holds KV on that medium,
    hashing each node's whole path from the root (no cached hashes)."""
    from radixkv.events import DEVICE, HOST, chain_hashes

    out = set()
    for node in tree.nodes():
        if node.parent is None:
            continue
        chain, n = [], node
        while n.parent is not None:
            chain.append(n.tokens())
            n = n.parent
        tokens = np.concatenate(chain[::-1])
        hashes = chain_hashes(tokens, node.ns, block_size)
        mine = hashes[node.depth // block_size:]
        for medium, resident in ((DEVICE, node.pages is not None), (HOST, node.host_pages is not None)):
            if resident:
                out.update((h, medium) for h in mine)
    return out
