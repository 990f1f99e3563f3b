"""GhostLFU's table (eviction/ghosts.py) and the class that policies read nodes as (eviction/view.py's NodeFields).

The table's keys are one int a start (`_start`: no tuple built or hashed); a reference kept here with the exact
(namespace, depth, first page) tuples as keys must hold the same ghosts in the same order, compiled and pure.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.eviction import make_policy
from radixkv.eviction.ghosts import _END, GhostLFU
from radixkv.eviction.view import NodeFields
from radixkv.radix.shadow import ShadowTree


def _victim(first: int, uses: int, ns: bytes = b"", depth: int = 0, pages: int = 1, page: int = 1) -> NodeFields:
    """An evicted edge as GhostLFU reads it: `pages` pages of `page` tokens from token `first`, at `depth`."""
    key = np.arange(first, first + pages * page, dtype=np.int32).tobytes()
    node: NodeFields = NodeFields(first, ns, None, key, 0)
    node.depth, node.hit_count = depth, uses
    return node


def _remember(table: dict, evictions: list[int], victim: NodeFields, page_bytes: int) -> None:
    """GhostLFU.remember's rules over a dict keyed by the exact start (ns, depth, first page)."""
    start, end = (victim.ns, victim.depth, victim.key[:page_bytes]), victim.depth + victim.size
    old = table.pop(start, 0)
    uses = victim.hit_count + (old >> 40 if old and end <= old & _END else 0)
    if old >> 40 > uses:
        table[start] = old
    elif uses:
        table[start] = uses << 40 | end
        if len(table) > GhostLFU.GHOSTS:
            del table[next(iter(table))]
    evictions[0] += 1
    if evictions[0] >= GhostLFU.GHOSTS:
        evictions[0] = 0
        for s, ghost in list(table.items()):
            if ghost >> 41:
                table[s] = ghost >> 41 << 40 | ghost & _END
            else:
                del table[s]


@pytest.mark.parametrize("page", [1, 16])
def test_the_int_starts_hold_what_exact_starts_hold(page: int) -> None:
    """Victims drawn to share starts (a few first pages, depths and namespaces; edges of one to three pages,
    so some end past an old ghost's end): the table, keyed by `_start`'s ints, holds the same ghosts in the
    same order as a reference keyed by the exact tuples, through drops of the oldest and halvings."""
    rng = random.Random(page)
    ghosts = GhostLFU()
    ghosts.page_bytes = 4 * page
    table: dict = {}
    evictions = [0]
    for _ in range(3 * GhostLFU.GHOSTS):
        victim = _victim(rng.randrange(400) * page, rng.randrange(6), rng.choice([b"", b"\x01a", b"\x01b"]),
                         rng.randrange(4) * page, rng.randrange(1, 4), page)
        ghosts.remember(victim)
        _remember(table, evictions, victim, 4 * page)
        assert list(ghosts.ghosts.values()) == list(table.values())
    assert len(ghosts.ghosts) == len(table) > GhostLFU.GHOSTS // 2


@pytest.mark.parametrize("size", [1, 16])
def test_starts_are_distinct_at_every_depth_namespace_and_first_page(size: int) -> None:
    """One first page at 2,000 depths, 2,000 first pages at one depth, and namespaces whose bytes are a
    page's (P ^ M(ns) would be symmetric without M's odd factor): no two starts share an int. (Pages of `size`
    tokens: at 1 the start is the token's own value, at 16 its page's hash.)"""
    ghosts = GhostLFU()
    ghosts.page_bytes = 4 * size
    page, tok = np.full(size, 7, np.int32).tobytes(), [np.full(size, t, np.int32).tobytes() for t in range(2000)]
    exact = {(b"", depth, page) for depth in range(2000)} | {(b"", 5, p) for p in tok}
    exact |= {(p, 0, page) for p in tok[:8]} | {(page, 0, p) for p in tok[:8]}
    starts = {ghosts._start(ns, depth, p) for ns, depth, p in exact}
    assert len(starts) == len(exact) == 4014
    assert all(0 <= s < 1 << 62 for s in starts)


def test_page_one_starts_are_exact_over_every_token_and_depth_below_two_to_the_thirty() -> None:
    """At page 1 a start reads the token's 4 bytes (no hash): the extreme tokens (negative int32 too, read
    unsigned) at the extreme depths, in two namespaces, are 36 distinct ints of 62 bits, whatever follows the
    first page in the key; the same values compiled and pure (the test runs both). Starts at one depth differ in
    their low bits (the table's slots) where their tokens do."""
    ghosts = GhostLFU()
    tokens = [0, 1, 2**31 - 1, -2**31, -1, 12345]
    depths = [0, 1, 2**30 - 1]
    keys = {t: np.array([t, 99], np.int32).tobytes() for t in tokens}
    starts = {(ns, t, d): ghosts._start(ns, d, keys[t]) for ns in (b"", b"\x01a") for t in tokens for d in depths}
    assert len(set(starts.values())) == len(starts) == 36
    assert all(0 <= s < 1 << 62 for s in starts.values())
    assert all(ghosts._start(b"", d, keys[t][:4]) == starts[b"", t, d] for t in tokens for d in depths)
    low = {ghosts._start(b"", 7, np.int32(t).tobytes()) & 0x3FF for t in range(1024)}
    assert len(low) == 1024


def test_the_ghost_table_drops_its_oldest_ghost_and_a_rewritten_one_is_the_newest() -> None:
    """GhostLFU keeps GHOSTS ghosts in a plain dict: past GHOSTS the oldest goes, where a ghost written
    again (the same start evicted again) counts as new, as an OrderedDict's pop and re-insert did."""
    ghosts = make_policy("adaptive")._ghosts  # type: ignore[attr-defined]
    n = ghosts.GHOSTS
    for i in range(n):
        ghosts.remember(_victim(i, 4))  # the n-th eviction halves them all: 2 uses each
    ghosts.remember(_victim(0, 4))  # start 0 again: 4 + 2 uses, now the newest
    ghosts.remember(_victim(n, 4))  # one ghost too many: start 1 is the oldest
    table = ghosts.ghosts
    assert len(table) == n and [g >> 40 for g in table.values()][-2:] == [6, 4]
    start = [ghosts._start(b"", 0, np.int32(i).tobytes()) for i in range(2)]
    assert start[1] not in table and start[0] in table


def test_every_node_a_policy_reads_is_a_node_fields() -> None:
    """Compiled policies read a node's fields as NodeFields (a cast, checked): the real tree's nodes and a
    shadow's are both one, and keys read them as the NodeView fields they are."""
    cache = RadixCache(sim_config(64, 1, "adaptive", 64))
    cache.insert(np.arange(8, dtype=np.int32), cache.alloc(8))
    shadow = ShadowTree(make_policy("lru"), 1)
    shadow.insert(b"", np.arange(8, dtype=np.int32).tobytes(), 64, True)
    nodes = [cache.match_prefix(np.arange(8, dtype=np.int32)).node, *shadow.roots[b""].children.values()]
    assert len(nodes) == 2 and all(isinstance(n, NodeFields) for n in nodes)
    for n in nodes:
        assert make_policy("lfu").key(n) == (n.hit_count, n.last_access, n.id)
        assert make_policy("lru").key(n) == (n.last_access, n.id) and n.end == n.depth + n.size == 8
