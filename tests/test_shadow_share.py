"""A shadow takes the real tree's key objects where an edge it walked spans
the same tokens as the real match's (radix/shadow.py `_share`, told the real match's end by radix/shadow_keys.py
`along`): it holds and decides exactly what a shadow told nothing holds, on random traces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.eviction import make_policy
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.shadow_heap import ShadowNode


def _trace(seed: int, n: int = 160) -> list[np.ndarray]:
    """Requests that reuse a random prefix of an earlier one (cut anywhere, so matches end inside edges)
    and go on with new tokens from a small vocabulary."""
    rng = np.random.default_rng(seed)
    reqs: list[np.ndarray] = []
    for _ in range(n):
        head = reqs[int(rng.integers(len(reqs)))] if reqs and rng.random() < 0.85 else np.empty(0, np.int32)
        cut = int(rng.integers(len(head) + 1))
        tail = rng.integers(0, 6, size=int(rng.integers(1, 48)), dtype=np.int32)
        reqs.append(np.concatenate([head[:cut], tail]).astype(np.int32))
    return reqs


def _nodes(shadow: ShadowTree) -> list[ShadowNode]:
    """Every node, in a fixed order (namespace, then children by first page)."""
    out: list[ShadowNode] = []
    stack = [shadow.roots[ns] for ns in sorted(shadow.roots, reverse=True)]
    while stack:
        node = stack.pop()
        out.append(node)
        stack += [node.children[k] for k in sorted(node.children, reverse=True)]
    return out


def _state(shadow: ShadowTree) -> list[tuple[int, int, int, bytes, int, int, object]]:
    return [(n.id, n.depth, n.size, n.key, n.last_access, n.hit_count, n.hkey) for n in _nodes(shadow)]


@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_shadow_told_the_real_match_shares_its_keys_and_decides_alike(page_size: int, policy: str,
                                                                         seed: int) -> None:
    """Fed one trace, a shadow told each real match's end (`along`) and one told nothing match, insert and
    evict alike and hold equal trees (ids, spans, key bytes, clocks, heap keys) after every request; where
    the told shadow's match split an edge, or ended, as the real match did, its node holds the real node's
    key object itself (a shadow told nothing never does: the test fails without the sharing)."""
    reqs = _trace(seed)
    longest = max(len(r) for r in reqs)
    cap = -(-max(sum(len(r) for r in reqs) // 4, longest) // page_size) * page_size
    cache = RadixCache(sim_config(cap, page_size, "lru", longest))
    keys = cache.tree.shadow_keys
    told, plain = ShadowTree(make_policy(policy), page_size, keys), ShadowTree(make_policy(policy), page_size)
    shared_ends = 0
    for tokens in reqs:
        key = tokens.tobytes()
        m = cache.match_prefix(tokens)
        if m.node.parent is not None:
            keys.along(key, m.node)
        assert told.match(m.node.ns, key) == plain.match(m.node.ns, key)
        matched = told._matched
        if matched is not None and m.node.parent is not None:
            end, real = matched[2][-1], m.node
            while real.parent is not None and real.depth + real.size > end.depth + end.size:
                real = real.parent
            if real.depth == end.depth and real.size == end.size:  # the same edge: one key object
                assert end.key is real.key
                shared_ends += 1
        cache.lock(m.node)
        cache.insert(tokens, torch.cat([m.slots, cache.alloc(len(tokens) - m.length)]))
        cache.unlock(m.node)
        assert told.insert(m.node.ns, key, cap) == plain.insert(m.node.ns, key, cap)
        assert told.used == plain.used and len(told) == len(plain)
        assert _state(told) == _state(plain)
    real_keys = {id(n.key) for n in cache.tree.nodes()}
    assert shared_ends > 0 and any(id(n.key) in real_keys for n in _nodes(told))
    assert not any(id(n.key) in real_keys for n in _nodes(plain) if n.size)
