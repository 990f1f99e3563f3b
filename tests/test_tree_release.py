"""A dropped tree frees its nodes at once (radix/core.py's TreeCore.__del__), not at the next full collection:
a node and its parent hold each other (`parent`, `children`), and a shadow the adaptive policy drops (a stop,
a switch, the prior's replay) held megabytes of nodes and keys in the heap until then (bench/RESULTS.md,
round 15, "runs32")."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.bench.workloads import make_workload
from radixkv.eviction import make_policy
from radixkv.radix.shadow import ShadowTree
from radixkv.radix.shadow_heap import ShadowNode


def _shadow_nodes() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is ShadowNode)


def _filled(page_size: int, seed: int) -> ShadowTree:
    """A shadow with splits, several namespaces and evictions behind it."""
    rng = np.random.default_rng(seed)
    tree = ShadowTree(make_policy("lru"), page_size)
    stems = [rng.integers(0, 50, 8 * page_size, dtype=np.int32) for _ in range(4)]
    for i in range(60):
        stem = stems[i % 4][:int(rng.integers(1, 8)) * page_size]
        tail = rng.integers(0, 50, int(rng.integers(1, 6)) * page_size, dtype=np.int32)
        key = np.concatenate([stem, tail]).tobytes()
        ns = bytes([i % 3])
        tree.match(ns, key)
        tree.insert(ns, key, 300 * page_size, True, None)
    return tree


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_dropped_shadow_frees_its_nodes_without_the_cycle_collector(page_size: int) -> None:
    gc.collect()
    gc.disable()  # (a collection in between would free the cycles and hide a leak of them)
    try:
        before = _shadow_nodes()
        tree = _filled(page_size, page_size)
        held = _shadow_nodes() - before
        assert held > 30  # roots, leaves and the uppers splits made
        del tree
        assert _shadow_nodes() == before
    finally:
        gc.enable()


def test_a_node_kept_past_its_tree_keeps_its_path() -> None:
    """Whoever still holds a node after the tree went holds it and its ancestors (children are gone)."""
    tree = _filled(1, 7)
    root = next(iter(tree.roots.values()))
    leaf = root
    while leaf.children:
        leaf = next(iter(leaf.children.values()))
    path = []
    node: ShadowNode | None = leaf
    while node is not None:
        path.append((node.id, node.key))
        node = node.parent
    del tree, root
    gc.collect()
    node, got = leaf, []
    while node is not None:
        got.append((node.id, node.key))
        node = node.parent
    assert got == path


def test_the_adaptive_policy_leaves_no_shadow_for_the_cycle_collector() -> None:
    """A cache under the default policy past its first eviction (the prior's replay made and dropped shadows):
    with the collector off, no shadow node is left unreachable."""
    reqs = make_workload("tools")[:300]
    gc.collect()
    gc.disable()
    try:
        cache = RadixCache(sim_config(20_000, 1, "adaptive", max(len(r.tokens) for r in reqs)))
        for r in reqs:
            m = cache.match_prefix(r.tokens)
            cache.lock(m.node)
            cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
            cache.unlock(m.node)
        assert cache.stats.evicted_tokens > 0
        live = _shadow_nodes()
        gc.collect()
        assert _shadow_nodes() == live
    finally:
        gc.enable()
