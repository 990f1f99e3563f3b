"""GhostLFU: LFU whose use counts survive eviction (the adaptive policy's LFU expert).

Plain LFU forgets a prefix's uses when eviction takes it: re-inserted, it starts at one use and is
LFU's first victim again, so an LFU that takes over a cache another policy ran (adaptive.py's switch
from LRU) never rebuilds the counts an LFU-from-the-start cache has (bench/RESULTS.md, round 4:
the "lag" cells lose 78-100% of their points after the switch). Here an evicted node leaves a ghost,
its uses (its hit_count plus its own ghost), keyed by where its edge starts: the namespace, the depth
and the edge's first page. A later edge that starts there again (the prefix re-inserted below the
same cached parent, or the tail of a trimmed leaf) is ordered by its hit_count plus that ghost.

    key = (hit_count + ghost(ns, depth, first page), last_access, id)

Ghosts are bounded (GHOSTS entries, oldest dropped first) and age: every `period` evicted tokens
(adaptive.py: GHOST_AGE turnovers; 0: every GHOSTS evictions) all ghosts halve, so a count no longer
earned fades. A tree and each shadow of it run their own instance, fed by their own evictions (a
shadow calls `on_evict` of a policy that `remembers`); a shadow copied from the tree copies its
ghosts where both key pages alike (pages 1 and 2; from page 3 on a shadow keeps page hashes).
Keys read the table live, so they drift when a ghost changes: `stable_keys = False`.

A MEASURED VARIANT, reverted (bench/RESULTS.md, issue 23 round 7, helper margin24): it fixes the lag
cells on Mooncake-shaped traffic and loses gsp 5-10% and longchat 5% by 1.5-5 points.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Final

from radixkv.eviction.policies import LFU

if TYPE_CHECKING:
    from radixkv.eviction.view import NodeView


class GhostLFU(LFU):
    name = "lfu"  # the adaptive policy's LFU expert (not registered on its own)
    stable_keys = False
    remembers = True  # a shadow running it calls on_evict (radix/shadow.py)
    GHOSTS: Final = 4096  # ghosts kept
    page_bytes = 4  # key bytes of the first page (a hashing shadow: 8)

    def __init__(self, page_bytes: int = 4, shift: int = 0, period: int = 0) -> None:
        self.page_bytes = page_bytes
        self.shift = shift  # a ghost keeps uses >> shift
        self.period = period  # tokens evicted between halvings (0: GHOSTS evictions)
        self._evicted = 0
        self.ghosts: OrderedDict[int, int] = OrderedDict()  # sig -> uses
        self._age = 0  # evictions since the last halving
        self.active = True  # False: plain LFU's key

    def fork(self, page_bytes: int) -> GhostLFU:
        """A fresh instance for another tree (no ghosts)."""
        return GhostLFU(page_bytes, self.shift, self.period)

    def copy(self, page_bytes: int) -> GhostLFU:
        twin = GhostLFU(page_bytes, self.shift, self.period)
        twin.ghosts = OrderedDict(self.ghosts) if page_bytes == self.page_bytes else OrderedDict()
        return twin

    def _sig(self, node: NodeView) -> int:
        return hash((node.ns, node.depth, node.key[:self.page_bytes]))

    def key(self, node: NodeView) -> tuple:
        if not self.active:
            return (node.hit_count, node.last_access, node.id)
        return (node.hit_count + self.ghosts.get(self._sig(node), 0), node.last_access, node.id)

    def on_evict(self, victim: NodeView) -> None:  # type: ignore[override]
        ghosts, sig = self.ghosts, self._sig(victim)
        uses = victim.hit_count + ghosts.pop(sig, 0)
        if uses > 0:
            ghosts[sig] = uses >> self.shift
            if len(ghosts) > self.GHOSTS:
                ghosts.popitem(last=False)
        self._age += 1
        self._evicted += victim.size
        if (self._evicted >= self.period) if self.period else (self._age >= self.GHOSTS):
            self._age = self._evicted = 0
            for s in list(ghosts):
                if ghosts[s] > 1:
                    ghosts[s] >>= 1
                else:
                    del ghosts[s]
