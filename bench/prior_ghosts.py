"""Ghost counts from the prior's LFU verdict, with stops, scored on policy_grid.py's grids (a subclass, not the policy).

Round 24 (bench/RESULTS.md, margin42's g1) turned the real cache's ghost counts (eviction/ghosts.py) on where the
prior (eviction/prior.py) picks LFU at the first eviction, as a switch to LFU does: tune's mean margin -0.073 ->
-0.013, but new cells below -0.5 on tune and bench and check's mean -0.376 -> -0.412. `PriorGhosts` is that
policy with the stops round 25 tried, each a class constant that `--set` scans (pure core only):

  SIGN_OFF  the ghosts go off once this many more of the lookups where the LRU shadow and the real cache differed
            favoured LRU (the policy's decayed sign count over WINDOW; 0: never): the LFU verdict is in doubt
  AGE       until the first switch, the ghosts halve every AGE evictions (eviction/ghosts.py: every GHOSTS, 1024):
            the prior's ghosts are counts LFU itself evicted, a memory of the first traffic's frequencies
  DUTY_OFF  the ghosts go off when the duty cycle first stops the LRU shadow (eviction/duty.py)
  TWIN_OFF  (>= 0) a plain-LFU twin, copied from the real cache at the first eviction, is fed the same traffic while
            the LRU shadow runs (a third shadow, as after a switch to LFU); the ghosts go off once it has matched
            TWIN_OFF x the cache's size more than the real cache since then (its lead, undecayed)

GHOSTS_ON False is the policy itself (main's decisions: the script's base row). Every other argument is
policy_grid.py's; its fixed policies do not run this class.

    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/prior_ghosts.py tune --jobs 2 --cells --set SIGN_OFF=1.0 --set AGE=256
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_grid, beside this file

import policy_grid  # noqa: E402

from radixkv.eviction.adaptive import Adaptive  # noqa: E402
from radixkv.eviction.ghosts import GhostLFU  # noqa: E402

if TYPE_CHECKING:
    from radixkv.eviction.view import ShadowView


class AgingGhosts(GhostLFU):
    """GhostLFU whose ghosts halve every `age` evictions instead of every GHOSTS."""

    def __init__(self) -> None:
        super().__init__()
        self.age = self.GHOSTS
        self.aged = 0  # evictions since the ghosts last halved (GhostLFU's own count never reaches GHOSTS)

    def remember(self, victim) -> None:  # noqa: ANN001 - a CachedNodeView
        self._evictions = 0
        super().remember(victim)
        self.aged += 1
        if self.aged >= self.age:
            self.aged = 0
            self.halve()


class PriorGhosts(Adaptive):
    """Adaptive with ghost counts on from the prior's LFU verdict until the first switch or a stop (docstring)."""

    GHOSTS_ON = True
    SIGN_OFF = 0.0
    AGE = 1024
    DUTY_OFF = False
    TWIN_OFF = -1.0

    def __init__(self) -> None:
        super().__init__()
        self._ghosts = AgingGhosts()
        self.experts = (self.experts[0], self._ghosts)
        self._current = self.experts[self.mode]
        self.lead_ghosts = False  # on from the prior, not stopped yet
        self.twin: ShadowView | None = None  # plain LFU from the first eviction (TWIN_OFF)
        self.twin_lead = 0  # tokens it matched more than the real cache

    def _off(self) -> None:
        self.lead_ghosts = False
        self.twin = None
        self._ghosts.active = False
        self.epoch += 1

    def on_evict(self, victim) -> None:  # noqa: ANN001 - a CachedNodeView
        first = self._tree is None
        super().on_evict(victim)
        if first and self.GHOSTS_ON and self.mode == 1:  # the prior's verdict: LFU
            self._ghosts.active = self.lead_ghosts = True
            self._ghosts.age = self.AGE
            if self.TWIN_OFF >= 0 and self._tree is not None:
                self.twin = self._tree.shadow_copy(self._shadowed[1])

    def on_lookup(self, start, key: bytes, length: int) -> None:  # noqa: ANN001 - a CachedNodeView
        shadows = bool(self._shadows)
        super().on_lookup(start, key, length)  # (its key from the root: _looked, where a shadow runs)
        if self.twin is not None and shadows:
            self.twin_lead += self.twin.match(start.ns, self._looked) - start.end - length
        if self.lead_ghosts and 0 < self.SIGN_OFF <= self._long.sign:
            self._off()

    def on_cache(self, start, key: bytes, cached: int, use: bool) -> None:  # noqa: ANN001 - a CachedNodeView
        twin = self.twin if self._shadows else None
        if twin is not None:
            whole, head, cut = self._split_key(start, key)
            tail = self._leaf.key if self._leaf is not None else None
        super().on_cache(start, key, cached, use)
        if twin is not None:
            twin.insert(start.ns, whole, cached, use, tail, head, cut)
            if self.twin_lead > self.TWIN_OFF * self._capacity:
                self._off()
        if not self._shadows:  # stopped (eviction/duty.py): the twin with them
            self.twin = None
            if self.lead_ghosts and self.DUTY_OFF:
                self._off()

    def _switch(self) -> None:
        self.lead_ghosts = False
        self.twin = None
        self._ghosts.age = self._ghosts.GHOSTS
        super()._switch()


def main(argv: list[str] | None = None) -> None:
    policy_grid.Adaptive = PriorGhosts  # type: ignore[misc] - run() and --set read the module's name
    policy_grid.main(argv)


if __name__ == "__main__":
    main()
