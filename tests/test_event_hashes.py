"""vLLM's block hashes in KV events (CacheConfig(event_hash="sha256_cbor" | "xxhash_cbor")).

Every expected value here is computed by `vllm_reference` below, written from vLLM 0.33's
description (vllm/utils/hashing.py, vllm/v1/core/kv_cache_utils.py) with hashlib, xxhash and cbor2
alone: NONE_HASH = H(cbor(PYTHONHASHSEED)), digest_b = H(cbor((digest_{b-1}, tuple(tokens_b),
extra_b))), events carry the low 64 bits. It shares no code with radixkv.events.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import cbor2
import numpy as np
import pytest
import torch
import xxhash

from radixkv import CacheConfig, RadixCache
from radixkv.cluster import InMemoryIndex, Publisher, Router
from radixkv.errors import ConfigError
from radixkv.events import AllBlocksCleared, BlockRemoved, BlockStored, block_hashes
from state_machine_model import replay

H = {"sha256_cbor": lambda b: hashlib.sha256(b).digest(), "xxhash_cbor": xxhash.xxh3_128_digest}


def vllm_reference(tokens: list[int], block_size: int, seed: str, algo: str = "sha256_cbor",
                   lora_name: str | None = None, salt: str | None = None,
                   mm: list[tuple[str, int, int]] = (), root: bytes | None = None) -> list[int]:
    """vLLM's request block hasher, token by token and block by block, as the int events carry."""
    h = H[algo]
    parent = root if root is not None else h(cbor2.dumps(seed, canonical=True))
    out = []
    for b in range(len(tokens) // block_size):
        start, end = b * block_size, (b + 1) * block_size
        keys = [lora_name] if lora_name is not None else []
        keys += [(i, off - start) for i, off, n in mm if end > off and start < off + n]
        keys += [salt] if (salt and start == 0) else []
        parent = h(cbor2.dumps((parent, tuple(tokens[start:end]), tuple(keys) or None), canonical=True))
        out.append(int.from_bytes(parent, "big") & (2**64 - 1))
    return out


def cache(page_size: int, block: int, algo: str = "sha256_cbor", slots: int = 512) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=slots, page_size=page_size,
                                  dtype=torch.float32, kv_events=True, event_block_size=block, event_hash=algo))


def put(c: RadixCache, toks: list[int], extra: object = None) -> None:
    r = c.match_prefix(toks, extra_keys=extra)
    c.insert(toks, torch.cat([r.slots, c.alloc(len(toks) - r.length)]), extra_keys=extra)


def stored(events: list) -> list[int]:
    return [h for e in events if isinstance(e, BlockStored) for h in e.block_hashes]


# token ids of every CBOR size class: 0..23 (1 byte), <256 (2), <65536 (3), <2**31 (5)
RNG = np.random.default_rng(7)
TOKENS = [0, 23, 24, 255, 256, 65535, 65536, 2**31 - 1] + RNG.integers(0, 200_000, 92).tolist()


@pytest.mark.parametrize("algo", ["sha256_cbor", "xxhash_cbor"])
@pytest.mark.parametrize("page_size,block", [(1, 16), (4, 4), (4, 16), (16, 16), (4, 6), (16, 6)])
def test_events_carry_vllms_hashes(monkeypatch, algo: str, page_size: int, block: int) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "1234")
    c = cache(page_size, block, algo)
    stem = TOKENS[:60]
    put(c, stem)
    put(c, stem[:30] + [5] * 40)  # splits the stem's edge, maybe mid-block
    events = c.take_events()
    aligned = lambda t: t[:len(t) // page_size * page_size]  # noqa: E731 (the tree holds whole pages)
    want = set(vllm_reference(aligned(stem), block, "1234", algo)) | set(vllm_reference(aligned(stem[:30] + [5] * 40),
                                                                                        block, "1234", algo))
    assert set(stored(events)) == want and len(stored(events)) == len(want)
    for e in events:  # each event's tokens and parent continue the chain vLLM's way
        first = e.block_hashes[0]
        assert e.parent_block_hash is None or e.parent_block_hash in want
        assert first in want
    assert block_hashes(stem, None, block, scheme=algo) == vllm_reference(stem, block, "1234", algo)
    c.check_invariants()


@pytest.mark.parametrize("seed", ["0", "42", "hello"])
def test_the_seed_is_pythonhashseed(monkeypatch, seed: str) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", seed)
    assert block_hashes(TOKENS, None, 16, scheme="sha256_cbor") == vllm_reference(TOKENS, 16, seed)
    monkeypatch.setenv("PYTHONHASHSEED", seed + "1")
    assert block_hashes(TOKENS, None, 16, scheme="sha256_cbor") != vllm_reference(TOKENS, 16, seed)


def test_without_pythonhashseed_the_root_is_random_per_process_as_in_vllm(monkeypatch) -> None:
    """vLLM draws NONE_HASH from os.urandom(32) when PYTHONHASHSEED is unset: no other process can
    reproduce it. Here too: one root per process (cache and router agree), another in the next."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    from radixkv.events.vllm_hash import VllmHasher

    root = VllmHasher("sha256_cbor").root
    assert len(root) == 32 and VllmHasher("sha256_cbor").root == root
    assert block_hashes(TOKENS, None, 16, scheme="sha256_cbor") == vllm_reference(TOKENS, 16, "", root=root)
    c = cache(1, 16)
    put(c, TOKENS)
    assert stored(c.take_events()) == vllm_reference(TOKENS[:96], 16, "", root=root)
    code = "from radixkv.events import block_hashes; print(block_hashes(list(range(32)), None, 16, scheme='sha256_cbor'))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
            for _ in range(2)}
    assert len(outs) == 2  # two processes, two roots
    same = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**env, "PYTHONHASHSEED": "7"}).stdout for _ in range(2)}
    assert same == {str(vllm_reference(list(range(32)), 16, "7")) + "\n"}


@pytest.mark.parametrize("page_size,block", [(1, 16), (4, 8), (4, 6)])
def test_lora_salt_and_multimodal_keys_as_vllm_forms_them(monkeypatch, page_size: int, block: int) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    c = cache(page_size, block)
    toks = TOKENS[:64]
    extra = {"lora_name": "sql-adapter", "cache_salt": "tenant-a", "mm": [("img-sha", 10, 20), ("aud", 40, 3)]}
    put(c, toks, extra)
    events = c.take_events()
    n = len(toks) // page_size * page_size
    want = vllm_reference(toks[:n], block, "0", lora_name="sql-adapter", salt="tenant-a",
                          mm=[("img-sha", 10, 20), ("aud", 40, 3)])
    assert stored(events) == want
    got = [k for e in events if isinstance(e, BlockStored) for k in e.extra_keys]
    assert got[0][0] == "sql-adapter" and got[0][-1] == "tenant-a"  # LoRA first, the salt on block 0 only
    assert all("tenant-a" not in k for k in got[1:])
    assert [t for e in events if isinstance(e, BlockStored) for t in e.token_ids] == toks[:len(want) * block]
    assert block_hashes(toks, None, block, extra_keys=extra, scheme="sha256_cbor") == \
        vllm_reference(toks, block, "0", lora_name="sql-adapter", salt="tenant-a", mm=extra["mm"])
    assert block_hashes(toks, None, block, extra_keys={"cache_salt": ""}, scheme="sha256_cbor") == \
        vllm_reference(toks, block, "0")  # vLLM ignores an empty salt


def test_removals_and_resync_name_the_same_hashes(monkeypatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "3")
    c = cache(4, 8, slots=128)
    held: set[tuple[int, str]] = set()
    for i in range(12):
        put(c, [i] * 8 + TOKENS[:40])
        replay(c.take_events(), held)  # evictions along the way remove exactly what was stored
    snap: set[tuple[int, str]] = set()
    replay(c.block_snapshot(), snap)
    assert snap == held and isinstance(c.block_snapshot()[0], AllBlocksCleared)
    c.evict(128)
    replay(c.take_events(), held)
    assert held == set() and c.events._digests == {}  # digests leave with their nodes


def test_namespaces_share_vllm_hashes_and_are_counted(monkeypatch) -> None:
    """vLLM has no namespace: two namespaces holding the same tokens name the same blocks, so the
    recorder counts holders and reports a block gone only when the last one goes."""
    monkeypatch.setenv("PYTHONHASHSEED", "3")
    c = cache(4, 8)
    for ns in ("a", "b"):
        c.match_prefix(TOKENS[:32], ns)
        c.insert(TOKENS[:32], c.alloc(32), ns)
    held: set[tuple[int, str]] = set()
    replay(c.take_events(), held)
    assert {h for h, _ in held} == set(vllm_reference(TOKENS[:32], 8, "3"))
    c.evict(32)
    events = c.take_events()
    assert not [e for e in events if isinstance(e, BlockRemoved)]  # one namespace still holds them
    c.evict(32)
    replay(c.take_events(), held)
    assert held == set()


def test_both_directions_in_one_process(monkeypatch) -> None:
    """A radixkv Router routes vLLM-hashed engines, and a vLLM-style hasher routes radixkv engines."""
    monkeypatch.setenv("PYTHONHASHSEED", "99")
    prompts = [TOKENS[:48], [7] * 16 + TOKENS[:32], list(range(300, 348))]
    lora = {"lora_name": "l1"}
    # 1. "vLLM" engines publish events hashed by the reference; a radixkv Router finds them.
    index = InMemoryIndex()
    for i, p in enumerate(prompts):
        hashes = vllm_reference(p, 16, "99", lora_name="l1")
        as_bytes = [h.to_bytes(8, "big") for h in hashes] if i == 1 else hashes  # vLLM may send bytes digests
        index.ingest(f"vllm-{i}", [BlockStored(as_bytes, None, p, 16, None, "GPU", "l1")])
    router = Router(index, block_size=16, event_hash="sha256_cbor")
    for i in range(3):
        router.report_load(f"vllm-{i}", 0)
    for i, p in enumerate(prompts):
        d = router.route(p + [1, 2, 3], extra_keys=lora)
        assert (d.instance, d.score) == (f"vllm-{i}", 3)
        assert router.route(p).score == 0  # without the LoRA name: other blocks
    # 2. radixkv engines (sha256_cbor) publish; the reference hasher alone finds each prompt's holder.
    index = InMemoryIndex()
    for i, p in enumerate(prompts):
        c = cache(4, 16)
        put(c, p, lora)
        Publisher(f"pod-{i}", c, index).publish()
        assert index.lookup(vllm_reference(p, 16, "99", lora_name="l1")) == {f"pod-{i}": 3}


def test_a_mismatch_is_a_miss_never_an_error(monkeypatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "5")
    index = InMemoryIndex()
    c = cache(4, 16)
    put(c, TOKENS[:48])
    Publisher("pod", c, index).publish()
    for router in (Router(index, block_size=16), Router(index, block_size=8, event_hash="sha256_cbor")):
        router.report_load("pod", 0)
        assert router.route(TOKENS[:48]).by_load  # other algorithm, other block size: no match
    monkeypatch.setenv("PYTHONHASHSEED", "6")
    router = Router(index, block_size=16, event_hash="sha256_cbor")  # another seed
    router.report_load("pod", 0)
    assert router.route(TOKENS[:48]).by_load


@pytest.mark.parametrize("bad", ["sha256", "XXH3", None, 3])
def test_unknown_schemes_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match="event_hash"):
        CacheConfig(num_layers=1, num_kv_heads=1, head_dim=1, num_slots=8, event_hash=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="event_hash"):
        Router(InMemoryIndex(), event_hash=bad)  # type: ignore[arg-type]



def test_vllm_digests_hash_cbor2s_canonical_encoding_of_any_id() -> None:
    # every CBOR size class of both signs at its edges (negative: an item whose raw ids were
    # forgotten), and random ids: each block's digest is sha256 of cbor2's (parent, ids, None)
    from radixkv.events.vllm_hash import VllmHasher

    edges = [0, 23, 24, 255, 256, 65535, 65536, 2**31 - 1, -1, -24, -25, -256, -257, -65536, -65537, -2**31]
    ids = np.concatenate([edges, np.random.default_rng(0).integers(-2**31, 2**31, 48)]).astype(np.int32)
    hasher, prev, want = VllmHasher("sha256_cbor", "0"), None, []
    for b in range(len(ids) // 16):
        prev = hashlib.sha256(cbor2.dumps((prev or hasher.root, tuple(ids[b * 16:(b + 1) * 16].tolist()), None),
                                          canonical=True)).digest()
        want.append(prev)
    assert hasher.digests(ids, 16, None) == want
