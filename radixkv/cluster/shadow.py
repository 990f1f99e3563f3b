"""Shadow: what an event stream has told the world an instance holds, rebuilt from the stream alone.

A publisher's sender keeps one, applying every batch it sends, so it can restate the instance's
blocks (a snapshot batch) without asking the cache, which only its own thread may call. Each held
(block hash, medium) keeps what its BlockStored said about it: parent, tokens, LoRA, extra keys,
and its depth (blocks from the sequence start as far as the stream shows), so a snapshot lists
parents before children. Memory: one small tuple per held block.
"""

from __future__ import annotations

from radixkv.events import MEDIA, AllBlocksCleared, BlockStored, KVEvent


class Shadow:
    def __init__(self) -> None:
        # (hash, medium) -> (depth, parent, tokens, block_size, lora_id, lora_name, extra key of the block)
        self.blocks: dict[tuple[int, str], tuple] = {}

    def __len__(self) -> int:
        return len(self.blocks)

    def apply(self, events: list[KVEvent]) -> None:
        blocks = self.blocks
        for ev in events:
            if isinstance(ev, AllBlocksCleared):
                blocks.clear()
            elif isinstance(ev, BlockStored):
                parent, size, medium = ev.parent_block_hash, ev.block_size, ev.medium
                depth, toks = self._depth(parent), list(ev.token_ids)  # (a cache's TokenIds: one tolist)
                for i, h in enumerate(ev.block_hashes):
                    extra = ev.extra_keys[i] if ev.extra_keys else None
                    blocks[(h, medium)] = (depth, parent, tuple(toks[i * size:(i + 1) * size]), size,
                                           ev.lora_id, ev.lora_name, extra)
                    parent, depth = h, depth + 1
            else:
                for h in ev.block_hashes:
                    blocks.pop((h, ev.medium), None)

    def _depth(self, parent: int | None) -> int:
        if parent is None:
            return 0
        for medium in MEDIA:
            held = self.blocks.get((parent, medium))
            if held is not None:
                return held[0] + 1
        return 0  # a parent the stream never named: the depth is unknown, order does not matter then

    @staticmethod
    def snapshot_of(blocks: dict[tuple[int, str], tuple]) -> list[KVEvent]:
        """AllBlocksCleared, then one BlockStored per held block of `blocks` (a copy of a Shadow's
        `blocks`, taken under the publisher's lock), parents before children."""
        out: list[KVEvent] = [AllBlocksCleared()]
        for (h, medium), (_, parent, toks, size, lora_id, lora_name, extra) in sorted(
                blocks.items(), key=lambda kv: kv[1][0]):
            out.append(BlockStored([h], parent, list(toks), size, lora_id, medium, lora_name,
                                   None if extra is None else [extra]))
        return out
