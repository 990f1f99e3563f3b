"""A key given as head[:cut] + rest (the adaptive policy's insert that the real tree walked on from its lookup's
end) against the key put together: a shadow's insert (radix/shadow.py), the policy's decisions and its history."""

from __future__ import annotations

import numpy as np
import pytest

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.bench.workloads import agent
from radixkv.eviction import POLICIES, make_policy
from radixkv.eviction.adaptive import Adaptive
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.shadow_heap import ShadowNode
from test_adaptive import _serve


def _state(shadow: ShadowTree) -> list[tuple]:
    """Everything a shadow's later answers depend on: each node's place, key and policy fields, and the
    heap's live keys (in heap order)."""
    out: list[tuple] = [(shadow.used, shadow.tick, tuple(sorted(shadow.roots)))]
    nodes: list[ShadowNode] = list(shadow.roots.values())
    for node in nodes:
        nodes.extend(node.children.values())
        out.append((node.ns, node.key, node.id, node.depth, node.size, node.last_access, node.created,
                    node.hit_count, node.hkey, tuple(node.children)))
    out.append(tuple(e[0] for e in shadow._heap if shadow._entry(e) is not None))
    return out


def _traffic(rng: np.random.Generator, page_size: int) -> list[tuple[bytes, bytes, bool]]:
    """(prompt, output, whether the insert leaves the prompt at the cut) over a few shared prefixes, whole pages."""
    bases = [rng.integers(0, 1000, size=64 * page_size, dtype=np.int32) for _ in range(6)]
    out = []
    for _ in range(300):
        base = bases[rng.integers(len(bases))]
        extra = rng.integers(0, 1000, size=int(rng.integers(0, 4)) * page_size, dtype=np.int32)
        prompt = np.concatenate([base[:int(rng.integers(1, 48)) * page_size], extra])
        output = rng.integers(1000, 2000, size=int(rng.integers(0, 6)) * page_size, dtype=np.int32)
        out.append((prompt.tobytes(), output.tobytes(), rng.random() < 0.2))
    return out


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_an_insert_from_head_and_cut_equals_the_insert_of_the_whole_key(policy: str, page_size: int) -> None:
    """Fed the same random traffic (a match, then an insert of head[:cut] + rest, the cut where the match
    ended or anywhere in the prompt; some inserts with no match before them, after a match of another key,
    or after a match of an equal key that is not `head` itself), a shadow given each insert's key as head,
    cut and rest matches, adds and holds exactly what one given the whole key does, state for state; its new
    leaves keep `rest` itself where the walk went on from the match's end at the cut (nothing joined)."""
    rng = np.random.default_rng(page_size)
    whole, joined = ShadowTree(make_policy(policy), page_size), ShadowTree(make_policy(policy), page_size)
    kept, pb = 0, 4 * page_size
    for i, (prompt, output, leaves) in enumerate(_traffic(rng, page_size)):
        asked = prompt if i % 7 else bytes(bytearray(prompt))  # every 7th: an equal key, another object
        matched = len(prompt) // 4
        if i % 11:  # every 11th insert has no match before it
            matched = whole.match(b"", prompt)
            assert joined.match(b"", asked) == matched
        if i % 13 == 0:  # and some follow a match of another key
            assert whole.match(b"", output[:pb]) == joined.match(b"", output[:pb])
        cut = 4 * matched if i % 2 else int(rng.integers(0, len(prompt) // pb + 1)) * pb
        key = prompt[:cut] + output if leaves else prompt + output
        rest, capacity = key[cut:], int(rng.integers(200, 600)) * page_size
        assert whole.insert(b"", key, capacity) == joined.insert(b"", rest, capacity, True, None, asked, cut)
        assert _state(whole) == _state(joined)
        kept += any(n is not None and n.key is rest for n in map(joined._entry, joined._heap))
    assert kept > 50, kept


class _Counted(Adaptive):
    """The adaptive policy, counting the inserts that walked on from its last lookup's end."""

    name = "adaptive-counted"

    def __init__(self) -> None:
        super().__init__()
        self.walked_on = 0

    def on_cache(self, start, key, cached, use) -> None:  # type: ignore[no-untyped-def]
        self.walked_on += start.parent is not None and start is self._looked_at
        super().on_cache(start, key, cached, use)


class _WholeKeys(Adaptive):
    """The adaptive policy made to put every walked-on insert's key together (no lookup's key to start from)."""

    name = "adaptive-whole-keys"

    def on_lookup(self, start, key, length) -> None:  # type: ignore[no-untyped-def]
        super().on_lookup(start, key, length)
        self._looked_at = None


@pytest.fixture
def subclasses():
    POLICIES.update({_Counted.name: _Counted, _WholeKeys.name: _WholeKeys})
    yield
    del POLICIES[_Counted.name], POLICIES[_WholeKeys.name]


def test_adaptive_walked_on_inserts_decide_as_with_whole_keys(subclasses: None) -> None:
    """Through the real cache at page 1 (inserts past RESUME_MIN matched tokens walk on from their lookup's
    end), the adaptive policy and one that joins every key hit the same tokens request for request and follow
    the same experts (a switch to LFU and back: the twin and the switch's shadow take such keys too), and most
    inserts walked on."""
    reqs = agent(num_agents=16, steps=8, tools_prompt_len=1100, action_len=32, tool_output_len=96)
    caches = [RadixCache(sim_config(3000, 1, policy, 8192)) for policy in (_Counted.name, _WholeKeys.name)]
    for r in reqs:
        hits = []
        for cache in caches:
            hits.append((_serve(cache, r), cache.tree.policy.mode, cache.tree.policy.switches))
        assert hits[0] == hits[1]
    assert caches[0].tree.policy.switches == 2 and caches[0].tree.policy.walked_on > len(reqs) // 2


def test_the_history_keeps_what_it_kept_from_whole_keys(subclasses: None) -> None:
    """Before the first eviction, the history of walked-on inserts given as the lookup's key, a cut and the
    rest holds the same entries (lengths, leaves, kept key bytes) and charges the same bytes as from whole keys."""
    reqs = agent(num_agents=16, steps=8, tools_prompt_len=1100, action_len=32, tool_output_len=96)[:60]
    caches = [RadixCache(sim_config(200_000, 1, policy, 8192)) for policy in (_Counted.name, _WholeKeys.name)]
    for r in reqs:
        for cache in caches:
            _serve(cache, r)
    histories = [cache.tree.policy._history for cache in caches]
    assert histories[0].bytes == histories[1].bytes and list(histories[0]) == list(histories[1])
    kinds = [[type(item).__name__ for _, item, _ in h.entries] for h in histories]
    assert kinds[0] == kinds[1] and kinds[0].count("int") > 40  # lookups kept as lengths into the next key
    assert caches[0].tree.policy.walked_on > 40 and caches[1].tree.policy._looked_at is None
