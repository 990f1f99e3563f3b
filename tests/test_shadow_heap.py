"""A shadow's leaf heap (radix/shadow_heap.py) under LRU and LFU re-keys a refreshed leaf lazily, when its entry
reaches the top: one entry a leaf however often it is refreshed, and the evictions of a heap re-keyed at once."""

from __future__ import annotations

import numpy as np
import pytest

from radixkv.bench.workloads import agent
from radixkv.eviction import make_policy
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.shadow_heap import _int_key

REQS = agent(num_agents=24, steps=8, tools_prompt_len=256, action_len=32, tool_output_len=96)


def _state(shadow: ShadowTree) -> list[tuple]:
    """Every node's place and policy fields (not its heap entry), and the heap's members."""
    nodes = list(shadow.roots.values())
    for node in nodes:
        nodes.extend(node.children.values())
    return [(n.key, n.id, n.depth, n.size, n.last_access, n.hit_count, n.hkey is None) for n in nodes] + [
        (shadow.used, shadow.tick, sorted(shadow._leaves))]


def _rekey_all(shadow: ShadowTree) -> None:
    """The eager reference: every member whose entry is no longer its key is re-keyed now."""
    for node in list(shadow._leaves.values()):
        if node.hkey != _int_key(node, shadow._kind, shadow._bits):
            shadow._push(node)


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_a_leaf_matched_again_and_again_keeps_one_heap_entry(policy: str) -> None:
    shadow = ShadowTree(make_policy(policy), 1)
    key = np.arange(40, dtype=np.int32).tobytes()
    shadow.insert(b"", key, 100)
    for _ in range(50):
        assert shadow.match(b"", key) == 40
    assert len(shadow) == 1 and len(shadow._heap) == 1
    assert shadow.insert(b"", np.arange(100, 190, dtype=np.int32).tobytes(), 100) == 90  # evicts 30 tokens
    assert shadow.match(b"", key) == 10 and shadow.used == 100


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_lazy_rekeys_evict_as_a_heap_rekeyed_at_once(policy: str, page_size: int) -> None:
    """The bench agent trace's matches and inserts (and some repeated matches) in a cache of a tenth of it: the
    same answers, trees, clocks and members as a shadow whose refreshed members are all re-keyed after each call."""
    lazy, eager = ShadowTree(make_policy(policy), page_size), ShadowTree(make_policy(policy), page_size)
    rng = np.random.default_rng(3)
    cap, evicted, done = 4000, 0, []
    for r in REQS:
        done.append(r.tokens.tobytes())
        asked = [r.tokens[:r.prompt_len].tobytes()] + [done[int(rng.integers(len(done)))] for _ in range(2)]
        for key in asked:  # the prompt, then earlier requests' whole keys again: leaves refreshed, none added
            assert lazy.match(b"", key) == eager.match(b"", key)
            _rekey_all(eager)
            before = lazy.used
            added = lazy.insert(b"", key if key is not asked[0] else done[-1], cap)
            assert added == eager.insert(b"", key if key is not asked[0] else done[-1], cap)
            _rekey_all(eager)
            evicted += lazy.used < before + added
            assert _state(lazy) == _state(eager)
    assert evicted > 10  # the traffic evicts, and trims: the heap's order was used
