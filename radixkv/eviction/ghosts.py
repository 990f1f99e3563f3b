"""GhostLFU: the adaptive policy's LFU expert, which can give re-inserted prefixes back the uses
eviction took from them.

An LFU that takes over a cache another policy ran (adaptive.py's switch from LRU) does not reach
the hit rate of an LFU that ran from the start: the prefixes LRU evicted come back with one use and
are LFU's first victims again, so they never rebuild their counts (bench/RESULTS.md, round 4: the
"lag" cells lose 78-100% of their points after the switch, not before). So every eviction of the
real cache (but while adaptive.py's shadow is stopped and the ghosts are off) leaves a ghost: the
victim's uses (its hit_count, plus its own ghost if it had one) and where its edge ended, keyed by
where its edge starts (the namespace, the depth and the edge's first page, as one int: `_start`; an
edge re-inserted below the same cached parent, or the tail of a trimmed leaf, starts there again).
While `active`, an edge that starts where a ghost's did and ends within that ghost's edge is ordered
by its hit_count plus the ghost's uses:

    key = (hit_count [+ ghost uses], last_access, id)

An edge that runs past the ghost's end (a prefix re-inserted with a new suffix, in one leaf) gets
nothing until a split or a trim cuts it back: the ghost's uses were the prefix's, not the suffix's.

The adaptive policy turns it on at a switch to LFU, for the real cache only (its shadows run plain
LFU, so they predict what they always predicted), and keeps it on past the first turnover only while
it pays: while the real cache has matched more, since the switch, than a plain-LFU twin copied from
it at the switch (adaptive.py). Measured, ghosts that stay on help Mooncake-shaped traffic and lose
gsp 5-10% by 1.5-8 points (bench/RESULTS.md, round 7); the twin tells the two apart (round 8).

Ghosts are bounded (GHOSTS, oldest dropped first) and age (all halve every GHOSTS evictions). One
entry is an int key and an int value (uses << 40 | end), in a plain dict (insertion order: a re-written
ghost is popped and re-inserted, so the first key is the oldest; compiled, its calls are direct C calls
where an OrderedDict's are generic method calls). Keys read the table live, so a ghost
written under a live edge that shares its start would move that edge's key: `stable_keys = False`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

from mypy_extensions import i64

from radixkv.eviction.policies import LFU
from radixkv.eviction.view import NodeFields

if TYPE_CHECKING:
    from radixkv.eviction.view import NodeView

_END: Final = (1 << 40) - 1  # a ghost's value: uses << 40 | end (tokens)
_MASK: Final = (1 << 62) - 1  # a start's bits: a short int compiled, never a boxed one
_ODD: Final = 0x9E3779B97F4A7C15  # a namespace's hash times this, masked: a bijection of its low 62 bits


class GhostLFU(LFU):
    stable_keys = False
    GHOSTS: Final = 1024  # ghosts kept (about 100 bytes each: 0.1 MB)

    def __init__(self) -> None:
        self.page_bytes = 4  # key bytes of an edge's first page (the tree's: set at its first eviction)
        self.active = False  # False: plain LFU's key
        self.ghosts: dict[object, int] = {}  # where an evicted edge started (_start, an int) -> uses << 40 | end
        self._evictions = 0  # since the ghosts last halved
        self._ns = b""  # the namespace _start saw last, and its hash mixed (_start)
        self._ns_mix: i64 = hash(b"") * _ODD & _MASK

    def _start(self, ns: bytes, depth: int, key: bytes) -> int:
        """Where an edge starts (namespace `ns`, `depth` tokens, its first page `key[:page_bytes]`), as one int of
        62 bits: P ^ M(ns), M the namespace's hash times an odd constant, masked (computed once a namespace, not once
        a call). At page 1, P = depth << 32 | T, T the token's 4 bytes unsigned: no slice, no hash, exact within a
        namespace for depths below 2**30, the token in the low bits that pick the table's slots (with the depth
        there, T << 30 ^ depth, starts at one depth shared their first slot: measured, more probes than the hash
        saves). At larger pages P = H(page) ^ depth, H the page's hash masked: two starts with the same first page at
        two depths never collide. Two distinct starts collide only where 62 bits of hash values do (about 2**-62 a
        pair), where the hash of the tuple (ns, depth, page) that it replaces collided where 64 bits did. No tuple
        is built or hashed: i64 operations, compiled, with identical values interpreted."""
        if ns is not self._ns:
            self._ns, self._ns_mix = ns, hash(ns) * _ODD & _MASK
        if self.page_bytes == 4:
            token: i64 = key[0] | key[1] << 8 | key[2] << 16 | key[3] << 24
            return (depth << 32 | token) ^ self._ns_mix
        page: i64 = hash(key[:self.page_bytes])
        return (page & _MASK) ^ self._ns_mix ^ depth

    def key(self, node: NodeView) -> tuple:
        n = cast(NodeFields, node)  # a real node (the shadows run plain LFU): native field reads, compiled
        if self.active:
            depth = n.depth
            ghost = self.ghosts.get(self._start(n.ns, depth, n.key), 0)
            if ghost and depth + n.size <= ghost & _END:
                return (n.hit_count + (ghost >> 40), n.last_access, n.id)
        return (n.hit_count, n.last_access, n.id)

    def remember(self, victim: NodeView) -> None:
        """`victim` (a node of the real cache) is about to be evicted: keep its uses."""
        v = cast(NodeFields, victim)
        ghosts, depth = self.ghosts, v.depth
        start: object = self._start(v.ns, depth, v.key)  # (an int boxed once for the dict's calls, not once each)
        end = depth + v.size
        old = ghosts.get(start, 0)  # (a ghost is never 0)
        if old:
            del ghosts[start]  # written again below, if at all, as the newest (dict.pop: a generic call, compiled)
        uses = v.hit_count + (old >> 40 if old and end <= old & _END else 0)
        if old >> 40 > uses:  # an edge past the old one's end, used less: the old ghost says more
            ghosts[start] = old
        elif uses:
            ghosts[start] = uses << 40 | end
            if len(ghosts) > self.GHOSTS:
                del ghosts[next(iter(ghosts))]  # the oldest
        self._evictions += 1
        if self._evictions >= self.GHOSTS:
            self._evictions = 0
            self.halve()

    def halve(self) -> None:
        """Every ghost's uses halved (every GHOSTS evictions: old counts fade); a ghost left with none goes."""
        ghosts = self.ghosts
        for s, ghost in list(ghosts.items()):
            if ghost >> 41:
                ghosts[s] = ghost >> 41 << 40 | ghost & _END
            else:
                del ghosts[s]
