"""A leaf's children: NO_CHILDREN, one read-only empty dict every tree's leaves share (radix/core.py). Any path that
wrote to it would raise; every leaf of the real tree and of the adaptive policy's shadows holds it, and every other
node a non-empty dict of its own, through a replay with evictions, splits, switches and shadow copies."""

from __future__ import annotations

import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import capacity, sim_config
from radixkv.bench.workloads import make_workload
from radixkv.eviction import make_policy
from radixkv.radix.core import NO_CHILDREN, PrefixNode, link_child, unlink_child
from radixkv.radix.shadow import ShadowTree

_WRITES = [
    lambda d: d.__setitem__(b"k", 1),
    lambda d: d.__delitem__(b"k"),
    lambda d: d.clear(),
    lambda d: d.pop(b"k", None),
    lambda d: d.popitem(),
    lambda d: d.setdefault(b"k", 1),
    lambda d: d.update({b"k": 1}),
    lambda d: d.__ior__({b"k": 1}),
]


@pytest.mark.parametrize("write", range(len(_WRITES)))
def test_no_children_refuses_every_write(write: int) -> None:
    with pytest.raises(TypeError):
        _WRITES[write](NO_CHILDREN)
    assert len(NO_CHILDREN) == 0 and NO_CHILDREN.get(b"k") is None and b"k" not in NO_CHILDREN


def _nodes(roots: list[PrefixNode]) -> list[PrefixNode]:
    out = list(roots)
    for node in out:
        out.extend(node.children.values())
    return out


def _check(roots: list[PrefixNode]) -> int:
    """Every leaf holds NO_CHILDREN and every other node a non-empty dict of its own; returns the nodes seen."""
    nodes = _nodes(roots)
    for n in nodes:
        assert (n.children is NO_CHILDREN) == (len(n.children) == 0), n
    assert len({id(n.children) for n in nodes if n.children}) == sum(1 for n in nodes if n.children)
    return len(nodes)


def _trees(cache: RadixCache) -> list[list[PrefixNode]]:
    policy = cache.tree.policy
    shadows = [s for s in getattr(policy, "_shadows", {}).values()] + [getattr(policy, "_twin", None)]
    return [list(cache.tree.roots.values())] + [list(s.roots.values()) for s in shadows if isinstance(s, ShadowTree)]


@pytest.mark.parametrize("page_size", [1, 16])
def test_every_leaf_of_every_tree_holds_no_children(page_size: int) -> None:
    reqs = make_workload("agent")  # (at 25%: one switch to LFU and back, bench/RESULTS.md round 24)
    longest, unique = max(len(r.tokens) for r in reqs), build_segments(reqs, page_size).total_pages * page_size
    cache = RadixCache(sim_config(capacity(0.25, unique, longest, page_size), page_size, "adaptive", longest))
    shadows_seen = nodes_seen = 0
    for i, r in enumerate(reqs):
        m = cache.match_prefix(r.tokens[:r.prompt_len])
        cache.lock(m.node)
        cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
        cache.unlock(m.node)
        if i % 20 == 19:
            trees = _trees(cache)
            shadows_seen += len(trees) - 1
            nodes_seen += sum(_check(roots) for roots in trees)
    assert cache.tree.policy.switches > 0 and shadows_seen > 10 and nodes_seen > 1000
    assert len(NO_CHILDREN) == 0


def test_link_and_unlink_give_a_dict_and_take_it_back() -> None:
    shadow = ShadowTree(make_policy("lru"), 1)
    parent = shadow._root(b"")
    a, b = shadow.add_leaf(parent, b"\1\0\0\0"), shadow.add_leaf(parent, b"\2\0\0\0")
    own = parent.children
    assert own is not NO_CHILDREN and list(own.values()) == [a, b] and a.children is NO_CHILDREN
    unlink_child(parent, b"\1\0\0\0")
    assert parent.children is own and list(own.values()) == [b]
    unlink_child(parent, b"\2\0\0\0")
    assert parent.children is NO_CHILDREN
    link_child(parent, b"\2\0\0\0", b)
    assert parent.children is not own and parent.children == {b"\2\0\0\0": b}
