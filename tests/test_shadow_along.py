"""A shadow's cheaper steps, each against the form it replaced: a copy of the real cache made breadth first from
its roots (radix/shadow_heap.py `load`) and a match's walk along the real path's shared key objects (`_walk_along`)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.bench.workloads import agent
from radixkv.core_loader import state
from radixkv.eviction import make_policy
from radixkv.radix.core import TreeCore
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.shadow_heap import ShadowNode

COMPILED = state()[0]


def _serve(cache: RadixCache, tokens: np.ndarray, prompt: int) -> int:
    m = cache.match_prefix(tokens[:prompt])
    cache.lock(m.node)
    cache.insert(tokens, torch.cat([m.slots, cache.alloc(len(tokens) - m.length)]))
    cache.unlock(m.node)
    return m.length


def _nodes(shadow: ShadowTree) -> list[ShadowNode]:
    out = list(shadow.roots.values())
    for node in out:
        out.extend(node.children.values())
    return out


def _state(shadow: ShadowTree) -> tuple:
    nodes = [(n.id, n.ns, n.key, n.depth, n.size, n.last_access, n.created, n.hit_count, n.priority, n.hkey,
              list(n.children)) for n in _nodes(shadow)]
    return nodes, shadow.tick, shadow.used, shadow._next_id, sorted(e[0] for e in shadow._heap), len(shadow)


def _load_by_node_list(shadow: ShadowTree, cache: RadixCache) -> None:
    """The copy as it was made before: every real node (RadixTree.nodes(), parents first), a leaf added per
    device-resident node under its parent's copy (the reference)."""
    copies: dict[int, ShadowNode] = {}
    for real in cache.tree.nodes():
        if real.parent is None:
            copies[id(real)] = shadow._root(real.ns)
            continue
        parent = copies.get(id(real.parent))
        if parent is None or real.pages is None:
            continue
        node = copies[id(real)] = shadow.add_leaf(parent, real.key)
        node.last_access, node.created = real.last_access, real.created
        node.hit_count, node.priority = real.hit_count, real.priority
        shadow.used += node.size
        shadow.tick = max(shadow.tick, real.last_access)
    for node in copies.values():
        if node.parent is not None and not node.children:
            shadow._push(node)
    for ns in [ns for ns, r in shadow.roots.items() if not r.children]:
        del shadow.roots[ns]


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_a_copy_of_the_real_cache_is_the_node_lists_copy(page_size: int, policy: str) -> None:
    """Every 25 requests of an agent trace (splits, evictions, two namespaces), `shadow_copy` holds what the node
    list's copy holds: the same ids, keys, clocks, hits, children in the same order, heap keys and counters; and
    its children dicts are keyed by the real dicts' own first-page objects (no slice of its own)."""
    reqs = agent(num_agents=12, steps=8, tools_prompt_len=300, action_len=32, tool_output_len=96)
    cache = RadixCache(sim_config(2400 // page_size * page_size, page_size, "lru", 8192))
    for i, r in enumerate(reqs):
        _serve(cache, r.tokens, r.prompt_len)
        if i % 25:
            continue
        copied = cache.tree.shadow_copy(make_policy(policy))
        reference = ShadowTree(make_policy(policy), page_size, cache.tree.shadow_keys)
        _load_by_node_list(reference, cache)
        assert isinstance(copied, ShadowTree) and _state(copied) == _state(reference)
        real_firsts = {id(k) for n in cache.tree.nodes() for k in n.children}
        assert all(id(k) in real_firsts for n in _nodes(copied) for k in n.children)
        assert all(n.parent.children[n.first] is n for n in _nodes(copied) if n.parent is not None)
    assert cache.tree.evictable_size + cache.tree.protected_size < sum(len(r.tokens) for r in reqs) // 2


def _trace(seed: int, n: int = 160) -> list[np.ndarray]:
    """Requests that reuse a random prefix of an earlier one (cut anywhere) and go on with new tokens."""
    rng = np.random.default_rng(seed)
    reqs: list[np.ndarray] = []
    for _ in range(n):
        head = reqs[int(rng.integers(len(reqs)))] if reqs and rng.random() < 0.85 else np.empty(0, np.int32)
        tail = rng.integers(0, 6, size=int(rng.integers(1, 48)), dtype=np.int32)
        reqs.append(np.concatenate([head[:int(rng.integers(len(head) + 1))], tail]).astype(np.int32))
    return reqs


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_walk_along_the_real_path_is_the_walk(page_size: int, seed: int) -> None:
    """A shadow told each real match's end: for the key just matched and for keys whose real node is stale (an
    earlier request's match end, evicted or split since), the walk along the real path's key objects gives the
    core walk's nodes and bytes; and many of the walked edges are the real path's objects (compares skipped)."""
    reqs = _trace(seed)
    cap = max(len(r) for r in reqs) * 3 // page_size * page_size + page_size
    cache = RadixCache(sim_config(cap, page_size, "lru", 4096))
    shadow = ShadowTree(make_policy("lfu"), page_size, cache.tree.shadow_keys)
    ends, shared, walked = [], 0, 0
    for tokens in reqs:
        key = tokens.tobytes()
        m = cache.match_prefix(tokens)
        ends.append((key, m.node))
        for k, real in [(key, m.node)] + ends[-12:-1]:
            root = shadow.roots.get(real.ns)
            if root is None or real.parent is None:
                continue
            got = shadow._walk_along(k, root, real)
            assert [id(n) for n in got[0]] == [id(n) for n in shadow.walk(k, root)[0]]
            assert got[1] == shadow.walk(k, root)[1]
        if m.node.parent is not None:
            cache.tree.shadow_keys.along(key, m.node)
            chain = {id(n.key) for n in cache.tree.ancestry(m.node, cache.tree.roots[m.node.ns])}
            path = shadow.walk(key, shadow.roots[m.node.ns])[0] if m.node.ns in shadow.roots else []
            shared += sum(id(n.key) in chain for n in path)
            walked += len(path)
        shadow.match(m.node.ns, key)
        cache.lock(m.node)
        cache.insert(tokens, torch.cat([m.slots, cache.alloc(len(tokens) - m.length)]))
        cache.unlock(m.node)
        shadow.insert(m.node.ns, key, cache.tree.evictable_size + cache.tree.protected_size)
    assert walked > 100 and shared > walked // 4, (shared, walked)


@pytest.mark.skipif(COMPILED or not os.environ.get("RADIXKV_PURE_PYTHON"), reason="patches a method: interpreted")
def test_the_walk_along_compares_only_past_the_shared_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interpreted: a copy of the real cache made just after a real match holds that match's key objects, so its
    own match of the same key, told the real end, walks the whole real path without a compare: the core walk is
    entered only where the real path ends (a shadow told nothing enters it at the root)."""
    starts: list[int] = []
    walk = TreeCore.walk

    def counted(self, key, node, pos=0):  # type: ignore[no-untyped-def]
        starts.append(pos)
        return walk(self, key, node, pos)

    monkeypatch.setattr(ShadowTree, "walk", counted)
    cache, told = RadixCache(sim_config(4096, 1, "lru", 4096)), 0
    for tokens in _trace(3, 60):
        key = tokens.tobytes()
        m = cache.match_prefix(tokens)
        if m.node.parent is not None:
            copy = cache.tree.shadow_copy(make_policy("lru"))
            cache.tree.shadow_keys.along(key, m.node)
            starts.clear()
            assert copy.match(m.node.ns, key) == m.length and starts == [4 * m.length], (starts, m.length)
            told += 1
            plain = cache.tree.shadow_copy(make_policy("lru"))
            starts.clear()
            assert plain.match(m.node.ns, bytes(bytearray(key))) == m.length and starts == [0]  # (not the told object)
        cache.lock(m.node)
        cache.insert(tokens, torch.cat([m.slots, cache.alloc(len(tokens) - m.length)]))
        cache.unlock(m.node)
    assert told > 30
