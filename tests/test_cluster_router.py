"""Router: llm-d's three scorers on llm-d's own examples, tie-breaking by load, fallback to the
least-loaded instance; routing runs against both index backends (the Redis one on a real server)."""

from __future__ import annotations

import numpy as np
import pytest
from redis_fixtures import index, shared_redis  # noqa: F401  (fixtures)

from radixkv import InvalidTokensError, RadixKVError
from radixkv.cluster import SCORERS, InMemoryIndex, KVIndex, Router
from radixkv.events import BlockRemoved, BlockStored, block_hashes

BS = 4


def holders_of(keys: list[str], hitmap: dict[str, list[str]]) -> list[frozenset[str]]:
    return [frozenset(hitmap.get(k, [])) for k in keys]


def test_scorers_on_llm_d_examples() -> None:
    # llm-d-kv-cache-manager's scorer tests: the same hit maps and expected scores (0 = left out)
    keys = ["b1", "b2", "b3", "b4", "b5", "b6"]
    hits = holders_of(keys, {"b1": ["pod-a"], "b2": ["pod-a"], "b3": ["pod-a"], "b4": ["pod-b"], "b5": ["pod-b"],
                             "b6": ["pod-a"]})
    assert SCORERS["longest_prefix"](hits) == {"pod-a": 3}
    keys = keys[:5]
    hits = holders_of(keys, {"b1": ["pod-x"], "b2": ["pod-x"], "b3": ["pod-y"], "b4": ["pod-x"], "b5": ["pod-z"]})
    assert SCORERS["highest_block_hit"](hits) == {"pod-x": 4, "pod-y": 3, "pod-z": 5}
    assert SCORERS["coverage"](hits) == {"pod-x": 3, "pod-y": 1, "pod-z": 1}
    assert SCORERS["longest_prefix"](hits) == {"pod-x": 2}


def prompt(seed: int, n_blocks: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 32000, n_blocks * BS).tolist()


def store(index: KVIndex, inst: str, tokens: list[int], namespace: object = None) -> list[int]:
    h = block_hashes(tokens, namespace, BS)
    index.ingest(inst, [BlockStored(h, None, tokens[: len(h) * BS], BS)])
    return h


@pytest.mark.parametrize("scorer,want", [("longest_prefix", "pod-a"), ("highest_block_hit", "pod-b"),
                                         ("coverage", "pod-b")])
def test_each_scorer_picks_its_instance(index: KVIndex, scorer: str, want: str) -> None:
    p = prompt(0, 6)
    store(index, "pod-a", p[: 2 * BS])  # blocks 0-1
    h = store(index, "pod-b", p)  # all, then a hole at block 1
    index.ingest("pod-b", [BlockRemoved([h[1]])])
    router = Router(index, block_size=BS, scorer=scorer)
    for inst in ("pod-a", "pod-b", "pod-c"):
        router.report_load(inst, 0)
    d = router.route(p + [7, 7])  # a trailing partial block is ignored
    expected = {"longest_prefix": 2, "highest_block_hit": 6, "coverage": 5}[scorer]
    assert (d.instance, d.score, d.by_load) == (want, expected, False)


def test_ties_go_to_the_least_loaded_then_the_first_registered(index: KVIndex) -> None:
    p = prompt(1, 3)
    for inst in ("pod-a", "pod-b", "pod-c"):
        store(index, inst, p)
    router = Router(index, block_size=BS)
    router.report_load("pod-a", 5)
    router.report_load("pod-b", 2)
    router.report_load("pod-c", 2)
    router.report_load("pod-d", 0)  # idle but holds nothing
    picks = [router.route(p).instance for _ in range(5)]
    # each route adds one open request: b(2) -> c(2) -> b(3) -> c(3) -> b(4)
    assert picks == ["pod-b", "pod-c", "pod-b", "pod-c", "pod-b"]
    router.report_load("pod-a", 0)
    assert router.route(p).instance == "pod-a"


def test_no_match_falls_back_to_least_loaded(index: KVIndex) -> None:
    store(index, "pod-a", prompt(2, 4))
    router = Router(index, block_size=BS)
    for inst, load in (("pod-a", 3), ("pod-b", 1), ("pod-c", 0)):
        router.report_load(inst, load)
    decisions = [router.route(prompt(3, 4)) for _ in range(4)]
    assert [d.instance for d in decisions] == ["pod-c", "pod-b", "pod-c", "pod-b"]
    assert all(d.by_load and d.score == 0 for d in decisions)
    assert router.route([1, 2]).by_load  # shorter than a block: nothing to match
    assert router.stats.routed == 5 and router.stats.by_load == 5


def test_unregistered_instances_and_other_namespaces_do_not_count(index: KVIndex) -> None:
    p = prompt(4, 4)
    store(index, "pod-gone", p)
    store(index, "pod-a", p, namespace="adapter-1")
    router = Router(index, block_size=BS)
    router.report_load("pod-b", 0)
    router.report_load("pod-a", 9)
    assert router.route(p).instance == "pod-b"  # pod-gone holds it but is not registered
    d = router.route(p, namespace="adapter-1")
    assert (d.instance, d.score) == ("pod-a", 4)
    router.remove_instance("pod-a")
    assert router.route(p, namespace="adapter-1").instance == "pod-b"


@pytest.mark.parametrize("slack,want", [(None, "pod-a"), (10, "pod-a"), (9, "pod-c"), (0, "pod-c")])
def test_load_slack_lets_load_override_affinity(index: KVIndex, slack: int | None, want: str) -> None:
    p = prompt(5, 4)
    store(index, "pod-a", p)
    store(index, "pod-b", p[: 2 * BS])
    router = Router(index, block_size=BS, load_slack=slack)
    for inst, load in (("pod-a", 12), ("pod-b", 13), ("pod-c", 2)):
        router.report_load(inst, load)
    d = router.route(p)
    assert d.instance == want and d.by_load == (want == "pod-c")
    assert router.stats.load_guarded == (want == "pod-c")
    router.report_load("pod-a", 20)
    router.report_load("pod-b", 3)  # within slack 9 of the least loaded: credit for its 2 blocks
    if slack == 9:
        assert router.route(p).instance == "pod-b"


def test_bad_arguments_are_rejected() -> None:
    """Typed errors (issue 19 item 14): a RadixKVError, never a bare ValueError."""
    with pytest.raises(RadixKVError, match="unknown scorer"):
        Router(InMemoryIndex(), scorer="random")
    with pytest.raises(RadixKVError, match="block_size"):
        Router(InMemoryIndex(), block_size=0)
    with pytest.raises(RadixKVError, match="load_slack"):
        Router(InMemoryIndex(), load_slack=-1)
    router = Router(InMemoryIndex())
    with pytest.raises(RadixKVError, match="no instances registered"):
        router.route([1] * 32)
    with pytest.raises(RadixKVError, match="open_requests"):
        router.report_load("pod-a", -1)
    with pytest.raises(RadixKVError, match="instance_id"):
        router.report_load("", 0)
    router.report_load("pod-a", 0)
    for bad in ([-1] * 16, [1.5] * 16, [[1] * 16]):
        with pytest.raises(InvalidTokensError):
            router.route(bad)
