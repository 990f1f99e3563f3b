"""A shadow's leaf heap (radix/shadow_heap.py) after every match and insert, its evictions' pops and in-place
replacements (a trimmed victim's or its parent's entry put where the victim's was) included: a valid heap whose
live entries are exactly the evictable leaves, one each, keyed as the policy keys them now."""

from __future__ import annotations


import numpy as np
import pytest

from radixkv.bench.workloads import agent
from radixkv.eviction import make_policy
from radixkv.radix.core import NO_CHILDREN
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.shadow_heap import TUPLE_KEY, _int_key

REQS = agent(num_agents=24, steps=8, tools_prompt_len=256, action_len=32, tool_output_len=96)


def _check(shadow: ShadowTree) -> None:
    heap = shadow._heap
    assert all(not heap[(i - 1) // 2] > heap[i] for i in range(1, len(heap)))  # heapq's invariant
    nodes = list(shadow.roots.values())
    for node in nodes:
        nodes.extend(node.children.values())
    for n in nodes[len(shadow.roots):]:  # a node's `first` is its very key object in its parent's children
        assert n.parent.children[n.first] is n and any(k is n.first for k in n.parent.children)
    leaves = {id(n): n for n in nodes if n.parent is not None and not n.children}
    live = [shadow._entry(e) for e in heap if shadow._entry(e) is not None]
    assert sorted(id(n) for n in live) == sorted(leaves) and len(shadow) == len(leaves)
    for n in leaves.values():
        if n is shadow._refreshed:  # a match's refreshed leaf: re-keyed at the next call
            continue
        tuples = shadow._kind == TUPLE_KEY
        assert n.hkey == (shadow.policy.key(n) if tuples else _int_key(n, shadow._kind, shadow._bits))


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_the_heap_holds_each_evictable_leaf_once_at_its_key(policy: str, page_size: int) -> None:
    """The bench agent trace's lookups and inserts, and earlier requests' whole keys asked and inserted again
    (leaves refreshed, none added), in a cache of a tenth of it: evictions of whole leaves and trims."""
    shadow = ShadowTree(make_policy(policy), page_size)
    rng = np.random.default_rng(3)
    cap, evicting, done = 4000, 0, []
    for r in REQS:
        done.append(r.tokens.tobytes())
        for key in [r.tokens[:r.prompt_len].tobytes()] + [done[int(rng.integers(len(done)))] for _ in range(2)]:
            shadow.match(b"", key)
            _check(shadow)
            before = shadow.used
            added = shadow.insert(b"", key if len(key) > r.prompt_len * 4 else done[-1], cap)
            _check(shadow)
            evicting += shadow.used < before + added
        if len(done) % 40 == 0:  # a fork's nodes too
            _check(shadow.fork(make_policy(policy)))
    assert evicting > 50


def test_a_leaf_emptied_by_eviction_holds_no_children() -> None:
    """A parent whose last child was evicted holds NO_CHILDREN (radix/core.py): an emptied dict keeps its table
    (~160 bytes more a leaf, round 19)."""
    shadow = ShadowTree(make_policy("lfu"), 4)
    for r in REQS:
        shadow.match(b"", r.tokens[:r.prompt_len].tobytes())
        shadow.insert(b"", r.tokens.tobytes(), 4000)
    nodes = list(shadow.roots.values())
    for node in nodes:
        nodes.extend(node.children.values())
    leaves = [n for n in nodes if not n.children]
    assert len(leaves) > 10 and all(n.children is NO_CHILDREN for n in leaves)
