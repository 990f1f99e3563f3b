"""A shadow's walk (radix/shadow.py) on keys whose pages past the real match are not hashed yet
(radix/shadow_keys.py `along` / `head`), its binary-search common prefix, and its int-keyed heap's members."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import sim_config
from radixkv.bench.workloads import agent
from radixkv.eviction import make_policy
from radixkv.radix.core import common_bytes
from radixkv.radix.shadow import ShadowKeys, ShadowTree

REQS = agent(num_agents=24, steps=8, tools_prompt_len=256, action_len=32, tool_output_len=96)


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_a_shadow_hashes_the_pages_past_the_real_match_only_when_its_walk_reaches_them(policy: str) -> None:
    """With the real match's edges kept, `along` leaves the prompt's later pages unhashed; a shadow's match
    hashes them only when its walk gets that far with somewhere to go. Such a shadow matches and holds,
    request for request, what one hashing every key whole does, and both ways occur on this trace."""
    cap = -(-max(int(0.25 * build_segments(REQS, 1).total_pages), max(len(r.tokens) for r in REQS)) // 16) * 16
    cache = RadixCache(sim_config(cap, 16, "lru", 4096))
    keys = cache.tree.shadow_keys
    lazy, eager = ShadowTree(make_policy(policy), 16, keys), ShadowTree(make_policy(policy), 16)
    deferred, walked_on = 0, 0
    for r in REQS:
        prompt, full = r.tokens[:r.prompt_len].tobytes(), r.tokens.tobytes()
        m = cache.match_prefix(r.tokens[:r.prompt_len])
        ns = m.node.ns  # the namespace's root when nothing matched
        node = m.node
        while node.parent is not None:  # keep the real path's edges, as the adaptive policy's inserts do
            keys.keep(node.id, ShadowKeys(16).edges([node.key])[0])
            node = node.parent
        before = -1
        if m.node.parent is not None:
            keys.along(prompt, m.node)
            before = len(keys.head(prompt))
        assert lazy.match(ns, prompt) == eager.match(ns, prompt)
        if 0 <= before < len(prompt) // 64 * 8:  # pages past the real match were left unhashed
            deferred += 1
            walked_on += len(keys.head(prompt)) == len(prompt) // 64 * 8  # ... and the walk asked for them
        cache.lock(m.node)
        cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
        cache.unlock(m.node)
        assert lazy.insert(ns, full, cap) == eager.insert(ns, full, cap) and lazy.used == eager.used
    assert 0 < walked_on < deferred


def test_common_pages_by_binary_search() -> None:
    """A shadow's `parting` (a binary search) gives the whole pages an edge and a key share, as the core's
    numpy `common_bytes` does, for every place they can part, and when one ends."""
    shadow = ShadowTree(make_policy("lru"), 4)  # a hashing shadow: 8-byte pages
    pb = shadow.page_bytes
    rng = np.random.default_rng(5)
    edge = rng.integers(0, 2**31 - 1, size=2 * 9, dtype=np.int32)  # 9 pages
    for part in range(1, 9):
        key = edge.copy()
        key[2 * part + int(rng.integers(0, 2))] += 1
        prefix = rng.integers(0, 2**31 - 1, size=4, dtype=np.int32)  # 2 pages before the walk's position
        full = np.concatenate([prefix, key]).tobytes()
        assert shadow.parting(edge.tobytes(), full, 16) == pb * part == common_bytes(edge.tobytes(), full, 16, pb)
    for a, b, pages in ((edge, edge[:2 * 5], 5), (edge[:2 * 3], edge, 3)):  # the key ends first; the edge does
        assert shadow.parting(a.tobytes(), b.tobytes(), 0) == pb * pages == common_bytes(a.tobytes(), b.tobytes(), 0, pb)


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_an_int_keyed_heap_holds_exactly_the_evictable_leaves(policy: str) -> None:
    """Under LRU and LFU the heap holds int keys and finds a popped key's node by its id: the id table
    holds exactly the leaves (the heap's live members), after matches, inserts, evictions and trims."""
    shadow = ShadowTree(make_policy(policy), 4)
    cap = 4000  # tokens: longer than any request, a tenth of the trace
    for r in REQS:
        shadow.match(b"", r.tokens[:r.prompt_len].tobytes())
        shadow.insert(b"", r.tokens.tobytes(), cap)
        nodes = [n for root in shadow.roots.values() for n in root.children.values()]
        for n in nodes:
            nodes.extend(n.children.values())
        leaves = {n.id for n in nodes if not n.children}
        assert set(shadow._leaves) == leaves and len(shadow) == len(leaves)
        assert all(isinstance(n.hkey, int) for n in nodes if not n.children)
        assert shadow.used <= cap and sum(n.size for n in nodes) == shadow.used



def test_an_upper_node_a_match_split_off_takes_its_hashes_from_its_only_childs_kept_ones() -> None:
    """A real match that ends inside an edge splits it: the new upper node's hashes are the part of its
    only child's kept hashes above the child's edge, so `along` hashes nothing (the prompt's later pages
    stay unhashed) and the key is a fresh hash's; `real_edges` then hands out the kept hashes themselves."""
    cache = RadixCache(sim_config(1 << 12, 16, "lru", 4096))
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2**31 - 1, size=16 * 10, dtype=np.int32)
    m = cache.match_prefix(a)
    cache.insert(a, torch.cat([m.slots, cache.alloc(len(a) - m.length)]))
    leaf = cache.match_prefix(a).node
    keys = ShadowKeys(16)
    keys.along(np.concatenate([a, a[:16]]).tobytes(), leaf)  # kept: the leaf's 10 pages
    b = np.concatenate([a[:16 * 4], rng.integers(0, 2**31 - 1, size=16 * 3, dtype=np.int32)])
    upper = cache.match_prefix(b).node  # splits the leaf after 4 pages
    assert upper.end == 16 * 4 and list(upper.children.values()) == [leaf] and leaf.size == 16 * 6
    prompt = b.tobytes()
    keys.along(prompt, upper)
    assert len(keys.head(prompt)) == 4 * 8  # nothing hashed past the upper node: its edge came from leaf's
    assert keys.of(prompt) == ShadowKeys(16).of(prompt) and list(keys._edges) == [leaf.id, upper.id]
    edges = keys.real_edges([upper, leaf])
    assert edges == ShadowKeys(16).edges([upper.key, leaf.key]) and edges[0] is keys._edges[upper.id]


def test_a_trimmed_shadow_leaf_keeps_its_head_as_the_node_a_split_would_make() -> None:
    """An eviction that needs fewer tokens than its victim holds keeps the victim's head in the same node
    object (no split), under the next id, which a split's new upper node would have taken: the same keys and
    order (test_adaptive.py's shadows match the real cache, trims included)."""
    shadow = ShadowTree(make_policy("lru"), 1)
    shadow.insert(b"", np.arange(10, dtype=np.int32).tobytes(), 100)
    leaf = next(iter(shadow.roots[b""].children.values()))
    next_id = shadow._next_id
    shadow.insert(b"", np.arange(100, 104, dtype=np.int32).tobytes(), 11)  # 3 of the 10 must go
    assert next(iter(shadow.roots[b""].children.values())) is leaf
    assert (leaf.id, leaf.size, leaf.key) == (next_id, 7, np.arange(7, dtype=np.int32).tobytes())
    assert shadow._next_id == next_id + 2 and shadow.used == 11
