"""A shadow's (radix/shadow.py) keys with a partial last page, its binary-search common prefix, its int-keyed
heap's members and its trimmed leaves."""

from __future__ import annotations

import numpy as np
import pytest

from radixkv.bench.workloads import agent
from radixkv.eviction import make_policy
from radixkv.radix.shadow import ShadowTree

def _state(shadow: ShadowTree) -> list[tuple]:
    nodes = list(shadow.roots.values())
    for node in nodes:
        nodes.extend(node.children.values())
    return [(n.key, n.id, n.depth, n.size, n.last_access, n.hit_count, n.hkey) for n in nodes]


REQS = agent(num_agents=24, steps=8, tools_prompt_len=256, action_len=32, tool_output_len=96)


@pytest.mark.parametrize("page_size", [4, 16])
def test_a_partial_last_page_is_neither_cached_nor_matched(page_size: int) -> None:
    """A key's trailing partial page (the real tree caches whole pages only) is dropped by an insert and never
    matched, at every page size: tokens cached and matched are whole pages of the key's own."""
    ps = page_size
    tokens = np.random.default_rng(0).integers(0, 2**31 - 1, size=10 * ps + 3, dtype=np.int32)
    shadow = ShadowTree(make_policy("lru"), ps)
    assert shadow.insert(b"", tokens[:2 * ps + 3].tobytes(), 100 * ps) == 2 * ps
    assert shadow.match(b"", tokens[:2 * ps + 3].tobytes()) == 2 * ps
    assert shadow.match(b"", tokens[:ps + 1].tobytes()) == ps
    assert shadow.insert(b"", tokens.tobytes(), 100 * ps) == 8 * ps and shadow.used == 10 * ps
    assert shadow.match(b"", tokens[:ps - 1].tobytes()) == 0 and shadow.match(b"", tokens.tobytes()) == 10 * ps


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_match_of_a_keys_first_bytes_is_the_match_of_their_copy(page_size: int) -> None:
    """`match(ns, key, end)` (the prior's replay: a lookup that the next insert's key extends) matches, splits
    and refreshes exactly what `match(ns, key[:end])` does, for ends anywhere (inside pages too)."""
    ps, rng = page_size, np.random.default_rng(1)
    cut, copied = ShadowTree(make_policy("lfu"), ps), ShadowTree(make_policy("lfu"), ps)
    keys = [rng.integers(0, 4, size=int(rng.integers(1, 24)) * ps, dtype=np.int32) for _ in range(8)]
    for i in range(200):
        key = np.concatenate([keys[int(rng.integers(8))], keys[int(rng.integers(8))]]).tobytes()
        end = int(rng.integers(0, len(key) + 1))
        assert cut.match(b"", key, end) == copied.match(b"", key[:end])
        if i % 3:
            assert cut.insert(b"", key, 40 * ps) == copied.insert(b"", key, 40 * ps)
        assert _state(cut) == _state(copied)



def _common_pages(a: bytes, b: bytes, pos: int, page_bytes: int) -> int:
    """Bytes of whole pages of `a` equal to `b[pos:]` from the start (numpy: the reference)."""
    n = min(len(a), len(b) - pos) // 4
    diff = np.frombuffer(a, np.int32, n) != np.frombuffer(b, np.int32, n, pos)
    same = int(np.argmax(diff)) if diff.any() else n
    return same * 4 // page_bytes * page_bytes


def test_common_pages_by_binary_search() -> None:
    """The core's `parting` (a binary search, every tree's: the real one's and a shadow's) gives the whole pages
    an edge and a key share, as a numpy compare does, for every place they can part, and when one ends."""
    shadow = ShadowTree(make_policy("lru"), 2)  # 8-byte pages
    pb = shadow.page_bytes
    rng = np.random.default_rng(5)
    edge = rng.integers(0, 2**31 - 1, size=2 * 9, dtype=np.int32)  # 9 pages
    for part in range(1, 9):
        key = edge.copy()
        key[2 * part + int(rng.integers(0, 2))] += 1
        prefix = rng.integers(0, 2**31 - 1, size=4, dtype=np.int32)  # 2 pages before the walk's position
        full = np.concatenate([prefix, key]).tobytes()
        assert shadow.parting(edge.tobytes(), full, 16) == pb * part == _common_pages(edge.tobytes(), full, 16, pb)
    for a, b, pages in ((edge, edge[:2 * 5], 5), (edge[:2 * 3], edge, 3)):  # the key ends first; the edge does
        x, y = a.tobytes(), b.tobytes()
        assert shadow.parting(x, y, 0) == pb * pages == _common_pages(x, y, 0, pb)


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_an_int_keyed_heap_holds_exactly_the_evictable_leaves(policy: str) -> None:
    """Under LRU and LFU the heap's entries hold int keys: its live entries are exactly the leaves, one each, each
    under its node's current key, after matches, inserts, evictions and trims."""
    shadow = ShadowTree(make_policy(policy), 4)
    cap = 4000  # tokens: longer than any request, a tenth of the trace
    for r in REQS:
        shadow.match(b"", r.tokens[:r.prompt_len].tobytes())
        shadow.insert(b"", r.tokens.tobytes(), cap)
        nodes = [n for root in shadow.roots.values() for n in root.children.values()]
        for n in nodes:
            nodes.extend(n.children.values())
        leaves = {n.id for n in nodes if not n.children}
        live = [e for e in shadow._heap if shadow._entry(e) is not None]
        assert sorted(e[1].id for e in live) == sorted(leaves) and len(live) == len(shadow) == len(leaves)
        assert all(e[0] is e[1].hkey for e in live)
        assert all(isinstance(n.hkey, int) for n in nodes if not n.children)
        assert shadow.used <= cap and sum(n.size for n in nodes) == shadow.used



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
