"""Extra keys (LoRA, cache salt, multimodal items): they partition the tree, enter the block hashes
and the events, are canonical whatever order or form they come in, and the router hashes the same."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.cluster import InMemoryIndex, Publisher, Router
from radixkv.errors import InvalidArgumentError
from radixkv.events import BlockStored, block_hashes
from radixkv.keys import ExtraKeys, MultiModalItem

PS = 4


def make() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=512, page_size=PS,
                                  kv_events=True, event_block_size=PS))


def put(cache: RadixCache, toks: list[int], extra: object = None) -> None:
    r = cache.match_prefix(toks, extra_keys=extra)
    cache.insert(toks, torch.cat([r.slots, cache.alloc(len(toks) - r.length)]), extra_keys=extra)


PROMPT = list(range(1, 33))  # 32 tokens; positions 8..15 are an image's placeholders


@pytest.mark.parametrize("key", [{"cache_salt": "tenant-a"}, {"lora_name": "sql"}, {"lora_id": 3}])
def test_whole_request_keys_share_nothing_with_other_keys(key: dict) -> None:
    cache = make()
    put(cache, PROMPT, key)
    assert cache.match_prefix(PROMPT, extra_keys=key).length == 32
    assert cache.match_prefix(PROMPT).length == 0  # no keys
    other = {k: (v + "x" if isinstance(v, str) else v + 1) for k, v in key.items()}
    assert cache.match_prefix(PROMPT, extra_keys=other).length == 0
    assert cache.match_prefix(PROMPT, extra_keys=ExtraKeys(**key)).length == 32  # dict and object alike
    cache.check_invariants()


def test_a_multimodal_item_partitions_from_its_offset_on() -> None:
    cache = make()
    cat, dog = {"mm": [("sha-cat", 8, 8)]}, {"mm": [("sha-dog", 8, 8)]}
    put(cache, PROMPT, cat)
    assert cache.match_prefix(PROMPT, extra_keys=cat).length == 32
    assert cache.match_prefix(PROMPT, extra_keys=dog).length == 8  # the text before the image is shared
    assert cache.match_prefix(PROMPT).length == 8  # and with text-only requests
    moved = {"mm": [("sha-cat", 12, 8)]}  # the same image elsewhere is another prefix
    assert cache.match_prefix(PROMPT, extra_keys=moved).length == 8  # position 8 is text there
    h_cat, h_dog = block_hashes(PROMPT, None, PS, extra_keys=cat), block_hashes(PROMPT, None, PS, extra_keys=dog)
    assert h_cat[:2] == h_dog[:2] == block_hashes(PROMPT, None, PS)[:2] and not set(h_cat[2:]) & set(h_dog[2:])


def test_keys_are_canonical_and_stable_across_processes() -> None:
    a = ExtraKeys(lora_name="l", mm=[("x", 20, 2), MultiModalItem("y", 2, 3)])
    b = ExtraKeys(mm=[("y", 2, 3), ("x", 20, 2)], lora_name="l")
    assert a == b and block_hashes(PROMPT, "ns", PS, extra_keys=a) == block_hashes(PROMPT, "ns", PS, extra_keys=b)
    code = ("from radixkv.events import block_hashes; "
            "print(block_hashes(list(range(1, 33)), 'ns', 4, extra_keys={'lora_name': 'l', 'cache_salt': 's', "
            "'mm': [('x', 20, 2), ('y', 2, 3)]}))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2")}
    want = block_hashes(PROMPT, "ns", PS,
                        extra_keys={"cache_salt": "s", "lora_name": "l", "mm": [("y", 2, 3), ("x", 20, 2)]})
    assert outs == {f"{want}\n"}


@pytest.mark.parametrize("bad", [
    {"lora_id": True}, {"lora_id": -1}, {"lora_id": 1.0}, {"lora_name": 5}, {"cache_salt": b"s"}, {"tenant": 1},
    {"mm": [("x", 0)]}, {"mm": [("", 0, 2)]}, {"mm": [("x", -1, 2)]}, {"mm": [("x", 0, 0)]},
    {"mm": [("x", 0, 4), ("y", 3, 2)]}, {"mm": [("x", 30, 8)]}, {"mm": "x"}, "salt", 7,
])
def test_bad_extra_keys_are_rejected_before_anything_changes(bad: object) -> None:
    cache = make()
    put(cache, PROMPT[:8])
    before = cache.sizes()
    slots = cache.alloc(32)
    for call in (lambda: cache.match_prefix(PROMPT, extra_keys=bad),
                 lambda: cache.insert(PROMPT, slots, extra_keys=bad),
                 lambda: cache.open(PROMPT, extra_keys=bad)):
        with pytest.raises(InvalidArgumentError):
            call()
    cache.free(slots)
    assert cache.sizes() == before and not cache.sequences()
    cache.check_invariants()


def test_a_sequence_commits_the_raw_placeholders_it_was_opened_with() -> None:
    cache = make()
    key = {"mm": [("sha-cat", 8, 8)], "cache_salt": "t"}
    seq = cache.open(PROMPT, extra_keys=key, max_reuse=31)
    assert (np.asarray(seq.tokens[8:16]) < 0).all() and seq.extra_keys == ExtraKeys(**key)
    cache.reserve(seq, 33)
    cache.commit(seq, PROMPT[:20])  # the caller's own token ids, placeholders included
    cache.commit(seq, PROMPT[20:] + [7])
    cache.close(seq)
    assert cache.match_prefix(PROMPT, extra_keys=key).length == 32
    cache.check_invariants()


def test_router_hashes_the_request_as_the_engine_does() -> None:
    caches = {"pod-0": make(), "pod-1": make()}
    index = InMemoryIndex()
    pubs = {n: Publisher(n, c, index) for n, c in caches.items()}
    router = Router(index, block_size=PS)
    for n in caches:
        router.report_load(n, 0)
    lora = {"lora_name": "sql", "lora_id": 1, "mm": [("sha-cat", 8, 8)]}
    put(caches["pod-1"], PROMPT, lora)
    for p in pubs.values():
        p.publish()
    assert router.route(PROMPT, extra_keys=lora).instance == "pod-1"
    assert router.route(PROMPT, extra_keys=lora).score == 8
    assert router.route(PROMPT, extra_keys={"lora_name": "other"}).by_load
    assert router.route(PROMPT).by_load
    stored = [e for e in caches["pod-1"].block_snapshot() if isinstance(e, BlockStored)]
    assert {(e.lora_id, e.lora_name) for e in stored} == {(1, "sql")}
