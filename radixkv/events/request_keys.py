"""What the KV events of LoRA, salted and multimodal requests carry beyond token ids and hashes.

The event recorder (events/recorder.py) calls these only once such a request was seen (a LoRA
name or cache salt in the root key, or `learn` of a multimodal request): the common case never
reaches this module.

- `block_extra_keys`: vLLM's per-block extra_keys (its generate_block_hash_extra_keys) of a run of
  blocks as the tree keys them: the LoRA name, (item identifier, item offset - block start) per
  multimodal item a block overlaps, and the cache salt on the sequence's first block.
- `remember_raw`: the raw ids a multimodal request gave at its items (vLLM's schemes hash them).
- `event_tokens`: the ids events carry and vLLM's hashes see, from the tree's, where multimodal
  item positions hold ids the cache interned (negative): XXH3 puts each item's stateless hash ids
  there (the same on every instance); vLLM's schemes put back the raw ids the request gave.
"""

from __future__ import annotations

import numpy as np

from radixkv.keys import ExtraKeys
from radixkv.multimodal import MultiModalKeys

_MAX_RAW = 1 << 16  # items whose raw placeholder ids are remembered (vLLM's schemes hash them)


def remember_raw(raw: dict[tuple[str, int], list[int]], extra: ExtraKeys, tokens: np.ndarray) -> None:
    """Into `raw`: the raw placeholder ids `tokens` (a request as given) holds at `extra`'s multimodal
    items, by (identifier, length): vLLM's schemes hash them (the tree keys item positions by its own)."""
    if len(raw) > _MAX_RAW:
        raw.clear()  # forgetting only misnames blocks of vLLM's schemes: a missed route
    for item in extra.mm:
        raw[(item.identifier, item.length)] = tokens[item.offset:item.offset + item.length].tolist()


def block_extra_keys(mm_keys: MultiModalKeys, toks: np.ndarray, block_size: int, first_block: int,
                     lora_name: str | None, salt: str | None, mm_seen: bool) -> list[tuple | None] | None:
    """One entry per full block of `toks` (tree ids from block `first_block` on); None when no
    block has any. `mm_seen`: a multimodal request was seen, so item ids (negative) may be there."""
    has_mm = mm_seen and int(toks.min(initial=0)) < 0  # item ids are negative (radixkv.multimodal)
    if lora_name is None and not salt and not has_mm:
        return None
    out: list[tuple | None] = []
    for b in range(len(toks) // block_size):
        keys: list = [] if lora_name is None else [lora_name]
        block = toks[b * block_size:(b + 1) * block_size]
        for p in (np.flatnonzero(block < 0).tolist() if has_mm else ()):
            hit = mm_keys.item_at(int(block[p]))  # (identifier, length, index in the item)
            if hit is not None and (hit[0], p - hit[2]) not in keys:
                keys.append((hit[0], p - hit[2]))
        if salt and first_block + b == 0:
            keys.append(salt)
        out.append(tuple(keys) or None)
    return out


def event_tokens(mm_keys: MultiModalKeys, raw: dict[tuple[str, int], list[int]], toks: np.ndarray,
                 vllm: bool) -> np.ndarray:
    """`toks` (tree ids) as events carry them; `raw`: (identifier, length) -> the raw ids a request
    gave for that item (remembered by the recorder's `learn`), for vLLM's schemes."""
    if not len(toks) or int(toks.min()) >= 0:
        return toks
    if not vllm:
        return mm_keys.hash_form(toks)
    out = toks.copy()
    for p in np.flatnonzero(toks < 0).tolist():
        hit = mm_keys.item_at(int(toks[p]))
        ids = None if hit is None else raw.get((hit[0], hit[1]))
        if ids is not None:
            out[p] = ids[hit[2]]  # type: ignore[index]
    return out
