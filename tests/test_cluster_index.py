"""KVIndex contract, run identically against InMemoryIndex and RedisIndex on a real redis-server.

Every test compares the index with a reference: hand-computed runs, or (the state machine) a plain
dict model of which instance holds which block on which medium, replayed from the same events.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis_fixtures import RedisServer, shared_redis  # noqa: F401  (fixtures)

from radixkv.cluster import InMemoryIndex, KVIndex, longest_prefix
from radixkv.cluster.redis_index import RedisIndex
from radixkv.events import (DEVICE, HOST, AllBlocksCleared, BlockRemoved, BlockStored, EventFormatError,
                            block_hashes, event_to_dict)

BS = 4  # block size of these tests
_prefixes = itertools.count()


def make_index(kind: str, server: RedisServer | None, per_call: int = 8192) -> KVIndex:
    if kind == "memory":
        return InMemoryIndex()
    assert server is not None  # a fresh keyspace per index
    return RedisIndex(server.url, key_prefix=f"t{next(_prefixes)}:", max_hashes_per_call=per_call)


@pytest.fixture(params=["memory", "redis"])
def index(request: pytest.FixtureRequest) -> Iterator[KVIndex]:
    server = request.getfixturevalue("shared_redis") if request.param == "redis" else None
    yield make_index(request.param, server)


def stored(tokens: list[int], medium: str = DEVICE, namespace: object = None) -> BlockStored:
    hashes = block_hashes(tokens, namespace, BS)
    return BlockStored(hashes, None, list(tokens[: len(hashes) * BS]), BS, medium=medium)


def seq(seed: int, n_blocks: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 32000, n_blocks * BS).tolist()


def test_lookup_is_longest_consecutive_run_per_instance(index: KVIndex) -> None:
    a = seq(0, 6)
    hashes = block_hashes(a, None, BS)
    index.ingest("pod-a", [stored(a)])  # all 6 blocks
    index.ingest("pod-b", [stored(a[: 3 * BS])])  # first 3
    index.ingest("pod-c", [stored(a), BlockRemoved([hashes[1]])])  # a hole at block 1
    assert index.lookup(hashes) == {"pod-a": 6, "pod-b": 3, "pod-c": 1}
    assert index.lookup(hashes[:2]) == {"pod-a": 2, "pod-b": 2, "pod-c": 1}
    holders = index.holders(hashes)
    assert holders[1] == {"pod-a", "pod-b"} and holders[5] == {"pod-a", "pod-c"}
    assert index.lookup(block_hashes(seq(1, 3), None, BS)) == {}  # an unrelated prompt
    assert index.lookup([]) == {} and index.holders([]) == []


def test_namespace_and_block_size_change_every_hash(index: KVIndex) -> None:
    a = seq(2, 3)
    index.ingest("pod-a", [stored(a, namespace="lora-1")])
    assert index.lookup(block_hashes(a, "lora-1", BS)) == {"pod-a": 3}
    assert index.lookup(block_hashes(a, None, BS)) == {}
    assert index.lookup(block_hashes(a, "lora-1", 2 * BS)) == {}


def test_a_block_is_held_while_any_medium_holds_it(index: KVIndex) -> None:
    a = seq(3, 2)
    h = block_hashes(a, None, BS)
    index.ingest("pod-a", [stored(a, DEVICE), stored(a, HOST)])
    index.ingest("pod-a", [BlockRemoved(h, DEVICE)])  # evicted from the device, still in the host tier
    assert index.lookup(h) == {"pod-a": 2}
    index.ingest("pod-a", [BlockRemoved(h[1:], HOST)])
    assert index.lookup(h) == {"pod-a": 1}
    index.ingest("pod-a", [BlockRemoved(h[1:], HOST), BlockRemoved(seq(9, 1)[:0] or [12345])])  # twice, unknown
    assert index.lookup(h) == {"pod-a": 1}


def test_all_blocks_cleared_and_drop_touch_only_that_instance(index: KVIndex) -> None:
    a, b = seq(4, 3), seq(5, 2)
    ha, hb = block_hashes(a, None, BS), block_hashes(b, None, BS)
    index.ingest("pod-a", [stored(a), stored(b, HOST)])
    index.ingest("pod-b", [stored(a)])
    index.ingest("pod-a", [AllBlocksCleared(), stored(b)])  # a resync: clear, then the current blocks
    assert index.lookup(ha) == {"pod-b": 3}
    assert index.lookup(hb) == {"pod-a": 2}
    index.drop_instance("pod-b")
    assert index.lookup(ha) == {} and index.lookup(hb) == {"pod-a": 2}
    index.drop_instance("pod-unknown")  # a no-op


def test_ingest_reports_whether_the_instance_was_known(index: KVIndex) -> None:
    assert index.ingest("pod-a", []) is False
    assert index.ingest("pod-a", [stored(seq(6, 1))]) is True
    index.drop_instance("pod-a")
    assert index.ingest("pod-a", []) is False


def test_wire_dicts_are_accepted(index: KVIndex) -> None:
    a = seq(7, 2)
    index.ingest("pod-a", [event_to_dict(stored(a)),
                           {"type": "BlockRemoved", "block_hashes": block_hashes(a, None, BS)[1:]}])
    assert index.lookup(block_hashes(a, None, BS)) == {"pod-a": 1}


MALFORMED = [
    ({"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1, 2], "block_size": 4},
     "token_ids"),
    ({"type": "BlockStored", "block_hashes": ["1"], "parent_block_hash": None, "token_ids": [1] * 4, "block_size": 4},
     "block hashes must be ints"),
    ({"type": "BlockRemoved", "block_hashes": [1], "medium": "TPU"}, "medium"),
    ({"type": "BlockRemoved", "block_hashes": [-1]}, "2**64"),
    ({"type": "BlockRemoved", "block_hashes": [1 << 64]}, "2**64"),
    ({"type": "Evicted", "block_hashes": [1]}, "not a KV event"),
    ("BlockStored", "not a KV event"),
    (BlockRemoved(block_hashes=[True]), "block hashes must be ints"),  # bools are not hashes
    ({"type": ["BlockStored"]}, "not a KV event"),  # an unhashable tag
    (None, "not a KV event"),
    (["BlockStored", [1]], "missing fields"),  # the positional layout, cut short
    (["BlockRemoved", [1], "GPU", None, None, None, 7], "positional fields"),
    ({"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1] * 4, "block_size": 4,
      "extra_keys": 5}, "extra_keys"),
    ({"type": "BlockStored", "block_hashes": [1], "parent_block_hash": "p", "token_ids": [1] * 4, "block_size": 4},
     "hashes"),
    ({"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1] * 4, "block_size": 4,
      "lora_id": "GPU"}, "lora_id"),  # the old field order's mistake: a medium where lora_id goes
    ({"type": "AllBlocksCleared", "x": 1}, "unknown fields"),
]


@pytest.mark.parametrize("bad,reason", MALFORMED, ids=[f"bad{i}" for i in range(len(MALFORMED))])
def test_malformed_batch_is_rejected_counted_and_never_applied(index: KVIndex, bad: object, reason: str) -> None:
    a = seq(8, 2)
    h = block_hashes(a, None, BS)
    index.ingest("pod-a", [stored(a)])
    before = index.stats()
    with pytest.raises(EventFormatError, match=rf"instance .pod-a.*event 1: .*{re.escape(reason)}") as err:
        index.ingest("pod-a", [BlockRemoved(h), bad, stored(seq(10, 1))])
    assert "nothing was applied" in str(err.value)
    assert index.lookup(h) == {"pod-a": 2}  # the valid BlockRemoved before it was not applied either
    assert index.lookup(block_hashes(seq(10, 1), None, BS)) == {}
    after = index.stats()
    assert ((after.rejected, after.rejected_batches, after.applied)
            == (before.rejected + 1, before.rejected_batches + 1, before.applied))


@pytest.mark.parametrize("batch", [None, 7, "BlockStored", {"type": "BlockRemoved", "block_hashes": [1]}, b"\x91"])
def test_a_batch_that_is_not_a_list_is_rejected_and_counted(index: KVIndex, batch: object) -> None:
    before = index.stats()
    with pytest.raises(EventFormatError, match="a batch is a list"):
        index.ingest("pod-a", batch)  # type: ignore[arg-type]
    after = index.stats()
    assert (after.rejected_batches, after.applied) == (before.rejected_batches + 1, before.applied)


@pytest.mark.parametrize("bad_id", ["", "a:b", "a@b", 7, None])
def test_instance_ids_are_checked(index: KVIndex, bad_id: object) -> None:
    with pytest.raises(ValueError, match="instance_id"):
        index.ingest(bad_id, [])  # type: ignore[arg-type]


# -- random event streams against a dict model --------------------------------------------------

INSTANCES = ["pod-0", "pod-1", "pod-2"]
CHAINS = [seq(100 + i, 5) for i in range(3)]  # three 5-block prompts
HASHES = [block_hashes(c, None, BS) for c in CHAINS]
op = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(INSTANCES), st.integers(0, 2), st.integers(1, 5),
              st.sampled_from([DEVICE, HOST])),
    st.tuples(st.just("remove"), st.sampled_from(INSTANCES), st.integers(0, 2), st.integers(0, 4),
              st.sampled_from([DEVICE, HOST])),
    st.tuples(st.just("clear"), st.sampled_from(INSTANCES), st.just(0), st.just(0), st.just(DEVICE)),
)


def _event_and_model(o: tuple, model: dict[tuple[str, int, str], bool]) -> object:
    kind, inst, c, n, medium = o
    if kind == "store":
        for h in HASHES[c][:n]:
            model[(inst, h, medium)] = True
        return BlockStored(HASHES[c][:n], None, CHAINS[c][: n * BS], BS, medium=medium)
    if kind == "remove":
        model.pop((inst, HASHES[c][n], medium), None)
        return BlockRemoved([HASHES[c][n]], medium)
    for key in [k for k in model if k[0] == inst]:
        del model[key]
    return AllBlocksCleared()


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_random_streams_match_a_dict_model(kind: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("shared_redis") if kind == "redis" else None

    @settings(max_examples=40 if kind == "redis" else 150, deadline=None)
    @given(st.lists(st.lists(op, max_size=4), max_size=8))
    def run(batches: list[list[tuple]]) -> None:
        index = make_index(kind, server, per_call=3)  # batches cut into several script calls
        model: dict[tuple[str, int, str], bool] = {}
        for batch in batches:
            inst = batch[0][1] if batch else "pod-0"
            events = [_event_and_model((o[0], inst, *o[2:]), model) for o in batch]
            index.ingest(inst, events)
        for hashes in HASHES:
            want = [frozenset(i for i in INSTANCES if any((i, h, m) in model for m in (DEVICE, HOST))) for h in hashes]
            assert index.holders(hashes) == want
            assert index.lookup(hashes) == longest_prefix(want)

    run()
