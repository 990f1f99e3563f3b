"""KV events of hybrid models (vLLM 0.33's group_idx and kv-cache spec): which blocks each layer group
holds, checked after every step against a reference computed from the tree and hashed independently;
the wire format through vLLM's structs; the fleet index and router, which must never predict a hit
that a group cannot resume from; and one-group models' events, byte for byte as before groups."""

from __future__ import annotations

import itertools
import random

import msgspec
import numpy as np
import pytest
from event_trace import trace_digest
from redis_fixtures import index, shared_redis  # noqa: F401  (fixtures)
from test_events_wire import VKVEventBatch

from radixkv import CacheConfig, GroupSpec, RadixCache
from radixkv.cluster import InMemoryIndex, KVIndex, Publisher, Router, longest_prefix
from radixkv.events import block_hashes
from radixkv.events.groups import MAMBA, SLIDING_WINDOW, EventGroup
from radixkv.events.recorder import EventRecorder
from radixkv.events.wire import decode_batch, encode_batch
from radixkv.eviction import make_policy
from radixkv.keys import request_key
from radixkv.multimodal import MultiModalKeys
from radixkv.radix import RadixTree, evict_device, evict_secondary
from radixkv.radix.components import set_component
from radixkv.radix.node import TreeNode

WINDOW, STATE = 1, 2
GROUPS = (EventGroup(SLIDING_WINDOW, 8), EventGroup(MAMBA))
NS = request_key(None, None, np.zeros(0, dtype=np.int32), MultiModalKeys())[0]  # namespace None's root key


def test_one_group_events_are_byte_identical_to_before_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    # the sha256 of every msgpack batch of tests/event_trace.py (device and host tiers, splits,
    # eviction, LoRA, salt, multimodal, counted holders, XXH3 and sha256_cbor, resyncs), computed
    # with main at b664c82, before events knew of groups (eviction pinned to lru, so the golden trace
    # does not move with the default policy's decisions: recomputed there with the same trace)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert trace_digest() == "32b5554d8f721a48be7130cbabd5e34d9b8e55e653614a69d9c9420e3644a511"


class Hybrid:
    """A RadixTree with a window and a state group and its EventRecorder (what a hybrid RadixCache
    builds), driven by random inserts, matches, component attaches and evictions."""

    def __init__(self, page_size: int, block_size: int, seed: int) -> None:
        self.rec = EventRecorder(block_size, page_size, groups=GROUPS)
        self.tree = RadixTree(page_size, make_policy("lru"), listener=self.rec, secondary_groups=2)
        self.ps, self.bs, self.rng = page_size, block_size, random.Random(seed)
        self.root = self.tree.root(NS)
        self.ids = itertools.count()
        self.base = [self.rng.randrange(1000) for _ in range(64)]

    def pages(self, n: int) -> np.ndarray:
        return np.array([next(self.ids) for _ in range(n)], dtype=np.int64)

    def insert(self, n: int) -> None:
        toks = self.base[:self.rng.randrange(0, 48)] + [self.rng.randrange(1000) for _ in range(n)]
        toks = toks[:len(toks) // self.ps * self.ps]
        key = np.array(toks, dtype=np.int32).tobytes()
        self.tree.insert(key, self.pages(len(toks) // self.ps), self.root)
        if self.rng.random() < 0.3:
            self.tree.match(key[:self.rng.randrange(len(key) // 4 + 1) // self.ps * self.ps * 4], self.root)  # splits

    def attach(self) -> None:
        bare = [(n, g) for n in self.tree.nodes() if n.parent is not None and n.pages is not None
                for g in (WINDOW, STATE) if n.secondary[g - 1] is None]
        if bare:
            node, g = self.rng.choice(bare)
            set_component(self.tree.group_index, node, g, self.pages(node.size // self.ps if g == WINDOW else 1))

    def step(self) -> None:
        op = self.rng.random()
        if op < 0.35:
            self.insert(self.rng.randrange(1, 30))
        elif op < 0.75:
            self.attach()
        elif op < 0.9:
            evict_secondary(self.tree, self.rng.choice((WINDOW, STATE)), self.rng.randrange(1, 12))
        else:
            evict_device(self.tree, self.rng.randrange(1, 40))

    def truth(self) -> set:
        return window_truth(self.tree, self.bs, state=STATE)


def window_truth(tree: RadixTree, bs: int, state: int | None = None) -> set:
    """(block, medium) the index must hold, from the tree alone, hashes computed from scratch:
    group 0 and window group 1 per block, `state` (a state group) at block-aligned node ends."""
    out: set = set()
    for node in tree.nodes():
        if node.parent is None or node.pages is None:
            continue
        hashes = block_hashes(_path(node), None, bs)
        first, last = node.depth // bs, node.end // bs
        for b in range(first, last):
            out.add((hashes[b], "GPU"))
            if _covered(node, b * bs, WINDOW):
                out.add(((hashes[b], WINDOW), "GPU"))
        if state and node.secondary[state - 1] is not None and node.end % bs == 0 and last > first:
            out.add(((hashes[last - 1], state), "GPU"))
    return out


def _path(node: TreeNode) -> list[int]:
    chunks = []
    while node.parent is not None:
        chunks.append(node.tokens())
        node = node.parent
    return np.concatenate(chunks[::-1]).tolist()


def _covered(node: TreeNode, start: int, g: int) -> bool:
    """Every node from `node` up whose edge holds a position >= start has a group-g component."""
    while node.parent is not None and node.end > start:
        if node.secondary[g - 1] is None:
            return False
        node = node.parent
    return True


@pytest.mark.parametrize("page_size, block_size", [(1, 4), (4, 4), (2, 6), (4, 8)])
def test_every_groups_blocks_match_the_tree_after_every_step(page_size: int, block_size: int) -> None:
    h = Hybrid(page_size, block_size, seed=page_size * 10 + block_size)
    index = InMemoryIndex()
    index.ingest("pod", h.rec.snapshot(h.tree))
    groups_seen = set()
    for i in range(250):
        h.step()
        index.ingest("pod", h.rec.take())
        assert index.blocks_of("pod") == h.truth(), i
        groups_seen |= {k[1] for k, _ in index.blocks_of("pod") if isinstance(k, tuple)}
        if i % 25 == 0:
            resync = InMemoryIndex()
            resync.ingest("pod", h.rec.snapshot(h.tree))
            assert resync.blocks_of("pod") == index.blocks_of("pod")
    assert groups_seen == {WINDOW, STATE}


def test_group_events_round_trip_through_vllms_decoder() -> None:
    h = Hybrid(4, 4, seed=3)
    for _ in range(60):
        h.step()
    events = h.rec.snapshot(h.tree)[1:] + h.rec.take()
    payload = encode_batch(events, 2.0)
    assert decode_batch(payload).events == events
    vllm = msgspec.msgpack.Decoder(VKVEventBatch).decode(payload)
    kinds = set()
    for ours, theirs in zip(events, vllm.events):
        assert theirs.group_idx == ours.group_idx is not None and theirs.block_hashes == ours.block_hashes
        if type(ours).__name__ == "BlockStored":
            fields = (theirs.kv_cache_spec_kind, theirs.kv_cache_spec_sliding_window)
            assert fields == {0: ("full_attention", None), 1: ("sliding_window", 8), 2: ("mamba", None)}[ours.group_idx]
            kinds.add(fields[0])
    assert kinds == {"full_attention", "sliding_window", "mamba"}


def test_the_router_never_predicts_a_hit_a_window_group_cannot_resume_from(index: KVIndex) -> None:
    prompt = list(range(100, 140))  # 10 blocks of 4
    a, b = Hybrid(4, 4, seed=1), Hybrid(4, 4, seed=2)
    for h, name, cached in ((a, "pod-a", 40), (b, "pod-b", 24)):
        index.ingest(name, h.rec.snapshot(h.tree))  # the resync announces the groups
        node = h.tree.insert(np.array(prompt[:cached], dtype=np.int32).tobytes(), h.pages(cached // 4), h.root).node
        set_component(h.tree.group_index, node, WINDOW, h.pages(cached // 4))
        set_component(h.tree.group_index, node, STATE, h.pages(1))
        index.ingest(name, h.rec.take())
    router = Router(index, block_size=4)
    for name in ("pod-a", "pod-b"):
        router.report_load(name, 0)
    assert index.lookup(block_hashes(prompt, None, 4)) == {"pod-a": 10, "pod-b": 6}
    assert router.route(prompt).instance == "pod-a"
    evict_secondary(a.tree, WINDOW, 100)  # pod-a keeps every full-KV block, no window KV
    index.ingest("pod-a", a.rec.take())
    assert index.holders(block_hashes(prompt, None, 4))[9] == {"pod-a"}  # group 0 still holds block 9
    assert index.lookup(block_hashes(prompt, None, 4)) == {"pod-a": 0, "pod-b": 6}
    decision = router.route(prompt)
    assert (decision.instance, decision.predicted_tokens) == ("pod-b", 24)
    evict_secondary(b.tree, STATE, 100)  # no snapshot at block 6: pod-b cannot resume there either
    index.ingest("pod-b", b.rec.take())
    assert index.lookup(block_hashes(prompt, None, 4)) == {"pod-a": 0, "pod-b": 0}
    index.drop_instance("pod-a")
    assert index.lookup(block_hashes(prompt, None, 4)) == {"pod-b": 0}


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_window_cache_publishes_what_it_holds_and_the_router_never_overpredicts(page_size: int) -> None:
    """A RadixCache with a window group (its Sequences attach window KV on commit, free what the
    window no longer sees, evict window KV before full KV) under random traffic: after every
    request the index equals the tree's blocks per group, and the Router never predicts more
    tokens than the cache then matches."""
    cache = RadixCache(CacheConfig(num_layers=2, num_kv_heads=1, head_dim=4, num_slots=160, page_size=page_size,
                                   kv_events=True, event_block_size=4,
                                   groups=(GroupSpec("window", 96, size=8, layers=(1,)),)))
    index, rng = InMemoryIndex(), random.Random(page_size)
    Publisher("pod", cache, index).publish()
    router = Router(index, block_size=4)
    router.report_load("pod", 0)
    base = [rng.randrange(1000) for _ in range(40)]
    overpredicted_without_groups = 0
    for _ in range(60):
        toks = base[:rng.randrange(41)] + [rng.randrange(1000) for _ in range(rng.randrange(1, 24))]
        predicted = router.route(toks).predicted_tokens
        matched = cache.match_prefix(toks).length
        assert predicted <= matched, (predicted, matched)
        full = longest_prefix(index.holders(block_hashes(toks, None, 4))).get("pod", 0) * 4
        overpredicted_without_groups += full > matched  # group 0 alone would have claimed more
        seq = cache.open(toks)
        cache.reserve(seq, len(toks) - seq.kv_len)
        cache.commit(seq, toks[seq.committed_len:])
        cache.close(seq)
        index.ingest("pod", cache.take_events())
        assert index.blocks_of("pod") == window_truth(cache.tree, 4)
    assert overpredicted_without_groups  # the window group's cap was needed
