"""Multimodal items are keyed by their whole content hash, in a key space no token id reaches
(radixkv/multimodal.py): raw tokens never match an image's KV, and no collision of a short form of
two identifiers lets one image reuse another's KV, whatever the page size or the item length."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.errors import InvalidTokensError
from radixkv.events import BlockStored, block_hashes
from radixkv.multimodal import MultiModalItem, MultiModalKeys

PROMPT = list(range(1, 33))  # 32 tokens


def make(page_size: int = 1, events: bool = False) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=512, page_size=page_size,
                                  kv_events=events, event_block_size=4))


def serve(cache: RadixCache, toks: list[int], extra: object) -> np.ndarray:
    """Open, compute (reserve), commit and close one request; returns its tokens as the cache keyed them."""
    seq = cache.open(toks, extra_keys=extra, max_reuse=len(toks) - 1)
    cache.reserve(seq, len(toks) - seq.kv_len)
    cache.commit(seq, toks[seq.committed_len:])
    keyed = np.asarray(seq.tokens).copy()
    cache.close(seq)
    return keyed


def matched(cache: RadixCache, toks: list[int], extra: object = None) -> int | str:
    try:
        return cache.match_prefix(toks, extra_keys=extra).length
    except InvalidTokensError:
        return "rejected"


def test_raw_tokens_equal_to_an_images_ids_never_match_its_kv() -> None:
    cache = make(events=True)
    image = {"mm": [("sha-cat", 8, 8)]}
    keyed = serve(cache, PROMPT, image)
    published = [t for e in cache.take_events() if isinstance(e, BlockStored) for t in e.token_ids]
    assert matched(cache, PROMPT, image) == 32
    for ids in (keyed[8:16].tolist(), published[8:16]):  # what the cache keyed, what the events told
        raw = PROMPT[:8] + ids + PROMPT[16:]
        assert matched(cache, raw) in (8, "rejected")  # the text before the image, never the image
    cache.check_invariants()


# Two 1-token images whose 30-bit derived ids (the key before this fix) were equal.
COLLIDING = ("img-10534", "img-18855")


@pytest.mark.parametrize("pair", [COLLIDING, ("ab" * 32, "ab" * 31 + "ac"), ("x" * 200 + "1", "x" * 200 + "2")])
@pytest.mark.parametrize("page_size", [1, 4])
def test_two_images_differing_in_any_bit_never_share_kv(pair: tuple[str, str], page_size: int) -> None:
    cache = make(page_size)
    first, second = ({"mm": [(ident, 8, 1)]} for ident in pair)
    serve(cache, PROMPT, first)
    assert matched(cache, PROMPT, first) == 32
    assert matched(cache, PROMPT, second) == 8  # the shared text before the image only
    cache.check_invariants()


def test_a_forgotten_item_seen_again_is_a_miss_not_another_items_kv() -> None:
    cache = make()
    cache.mm_keys = MultiModalKeys(max_items=1)
    cat, dog = {"mm": [("cat", 8, 2)]}, {"mm": [("dog", 8, 2)]}
    serve(cache, PROMPT, cat)
    serve(cache, PROMPT, dog)  # the table forgets cat
    assert matched(cache, PROMPT, dog) == 32
    assert matched(cache, PROMPT, cat) == 8
    cache.check_invariants()


def test_ids_reused_in_a_new_epoch_never_reach_old_nodes() -> None:
    cache = make(events=True)
    cache.events.mm_keys = cache.mm_keys = MultiModalKeys(id_space=4)  # two 2-token items fill an epoch
    items = [{"mm": [(name, 8, 2)]} for name in ("a", "b", "c")]
    keyed = [serve(cache, PROMPT, item) for item in items]
    assert cache.mm_keys.epoch == 1 and (keyed[2][8:10] == keyed[0][8:10]).all()  # c reuses a's ids
    assert matched(cache, PROMPT, items[2]) == 32
    assert matched(cache, PROMPT, items[0]) == 8  # a, now in epoch 1, misses its epoch-0 KV
    assert matched(cache, PROMPT, items[1]) == 0  # b starts epoch 2: a root of its own, empty
    stored = [e for e in cache.take_events() if isinstance(e, BlockStored)]
    want = {h for item in items for h in block_hashes(PROMPT, None, 4, extra_keys=item)}
    assert {h for e in stored for h in e.block_hashes} <= want  # events hash alike across epochs
    cache.check_invariants()


def test_the_table_names_each_id_and_only_its_own() -> None:
    keys = MultiModalKeys(max_items=2)
    a, b = MultiModalItem("a", 0, 3), MultiModalItem("b", 5, 2)
    ia, ib = keys.ids(a), keys.ids(b)
    assert (ia < 0).all() and (ib < 0).all() and not set(ia.tolist()) & set(ib.tolist())
    assert [keys.item_at(int(t)) for t in ia] == [("a", 3, 0), ("a", 3, 1), ("a", 3, 2)]
    assert keys.item_at(5) is None
    keys.ids(MultiModalItem("c", 0, 1))  # forgets a
    assert keys.item_at(int(ia[0])) is None and keys.item_at(int(ib[1])) == ("b", 2, 1)
    assert (keys.ids(b) == ib).all() and not (keys.ids(a) == ia).any()


def test_text_only_requests_still_share_the_text_before_an_image() -> None:
    cache = make(4)
    serve(cache, PROMPT, {"mm": [("sha-cat", 8, 8)]})
    assert matched(cache, PROMPT) == 8 and matched(cache, PROMPT[:8] + [0] * 24) == 8
    assert torch.equal(cache.match_prefix(PROMPT).slots, cache.match_prefix(PROMPT[:8]).slots)
    cache.check_invariants()
