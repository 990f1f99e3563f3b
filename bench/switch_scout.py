"""Scouts in the lead-in: a small LRU/LFU pair that sees a reuse's consequences sooner, scored on policy_grid.py's
grids (a subclass, not the policy).

Round 26's map (bench/RESULTS.md) puts most of the held grid's failing cells within reach of one switch at the right
request, and most of those where the prior follows LRU and LFU wins from early on, with a history of a few lookups
that no rule at the first eviction can judge: what they lack is evidence soon enough. The policy's evidence comes
from the other expert's shadow at the real size, so it shows only once an evicted prefix is asked again within a
cache size. `Scout` adds a new signal, from the first eviction to the first switch after it (the lead-in): two
shadows of SCOUT x the real size (each a copy of the real cache, shrunk by its own expert's order at the first
insert), one per expert, the prior's replay running on (eviction/prior.py) but live. Their paired lead (the other
expert's scout's match minus the followed one's, per lookup) is summed over WINDOW as the policy's (an Evidence of
its own), and the policy also leaves its expert where that evidence is clear by the policy's own test (`_clear`,
MIN_LEAD of the scouts' size) while its own evidence does not favour staying (sign >= 0, lead >= 0), and, to LFU, the
sign veto (`_vetoed`'s, read on the scouts' evidence and size) allows it. After the first switch the scouts are
dropped. SCOUT 0 is the policy itself; SCOUT_TO keeps them to one direction (none run where the
prior's verdict is already the expert they may switch to). SCOUT_QUIET lets them speak only while the real size is
silent: they are dropped at the first lookup where the two experts' matches at the real size (the policy's own
evidence) differ, and from then on that evidence alone decides. SMALL_MAX adds a second pair at half their size: a
clear lead for LFU while that pair's lead exceeds SMALL_MAX of its size ends the lead-in without a switch. PROBE puts
the scouts' switch to LFU on probation: an LRU shadow copied from the real cache at the switch runs beside it at the
real size for PROBE lookups, and the first lookup where it matches more than the real cache switches straight back
(PROBE_FIRST: the first lookup where they differ ends the probation either way; PROBE_BACK off: no switch back of its
own; PROBE_KEEP: a switch back in the probation, its own or the policy's, keeps the LFU shadow that ran from the first
eviction).

Round 26 (bench/RESULTS.md): at SCOUT 0.5, to LRU only, after the warmup, every in-sample grid gains (tune -0.073 ->
-0.065, bench -0.122 -> -0.109, fit -0.325 -> -0.313), check and held too, but val loses (-0.521 -> -0.524, one more
cell below -0.5); at 0.25 or 0.75, or towards LFU, tune loses: the scouts' size is a coin per cell, as the prior's is.
Round 27: on fit, all four of the scouts' LRU switches that lost came after lookups had differed at the real size,
four of the five that gained before; quiet (SCOUT_QUIET), no grid's mean falls (val -0.521 -> -0.519). Quiet in
both directions, the silent switches to LFU that lose are those the real size takes back (or an LFU spell it ends
anyway); SMALL_MAX 0.25 drops 6 of fit's 13 losses and 5 of its gains (fit -0.282 -> -0.272, tune and bench
unchanged), but val falls (-0.498 -> -0.503). Round 28: 7 of fit's 9 bounces lose all they lose in the first lookup
that differs at the real size (the evictions made under LFU before it), and the policy already switches back there:
no undo can come sooner; a probation that undoes at the first word for LRU loses more gains than it saves (fit -0.282
-> -0.299); by the first word either way with the LFU shadow kept (PROBE_FIRST, PROBE_KEEP) fit -0.281, val -0.498
-> -0.499; the kept shadow alone (PROBE_BACK off) fit -0.284, val -0.493, tune and bench B's to the digit.

    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/switch_scout.py tune --jobs 2 --cells --set SCOUT=0.5 \
        --set SCOUT_TO=0 --set SCOUT_WARM=True --set SCOUT_QUIET=True
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, cast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_grid, beside this file

import policy_grid  # noqa: E402

from radixkv.eviction.adaptive import Adaptive  # noqa: E402
from radixkv.eviction.evidence import Evidence  # noqa: E402
from radixkv.eviction.history import absolute_key  # noqa: E402
from radixkv.eviction.view import NodeFields  # noqa: E402

if TYPE_CHECKING:
    from radixkv.eviction.view import CachedNodeView, ShadowView


class Scout(Adaptive):
    """Adaptive with scouts in its lead-in (module docstring)."""

    SCOUT = 0.0  # the scouts' size, a share of the real cache's (0: none)
    SCOUT_AGREE = False  # ... only once the policy's own evidence leans the same way (sign and lead > 0), not just
    # does not favour staying
    SCOUT_WARM = False  # their leads count only after they turned over WARMUP times (the shrunk copies' transient)
    SCOUT_TO = -1  # the expert they may switch to (0: LRU, 1: LFU; -1: either); none run where the prior follows it
    SCOUT_QUIET = False  # ... only while the real size is silent: no lookup yet where the experts' matches at the
    # real size differed (the policy's own evidence counts none); from the first such lookup that evidence decides
    SMALL_MAX = 0.0  # a second pair at half the scouts' size: where the scouts are clear for LFU while its lead (per
    # token of its size) exceeds this, the lead-in is over, no switch (a lead that grows as the cache shrinks is a
    # small cache's); 0: no second pair
    PROBE = 0  # after the scouts' switch to LFU, a probation of this many lookups (0: none): an LRU shadow copied from
    # the real cache at the switch runs beside it at the real size, and the first lookup where it matched more than
    # the real cache switches straight back (no further evidence)
    PROBE_FIRST = False  # ... and the first lookup where they differ ends the probation whichever way it goes
    PROBE_BACK = True  # ... (False: no switch back of its own; PROBE_KEEP still acts on the policy's)
    PROBE_KEEP = False  # ... and a switch back in it (its own or the policy's) keeps the LFU shadow that ran from the
    # first eviction (not a copy of the real cache, which LFU's evictions in the probation made)

    def __init__(self) -> None:
        super().__init__()
        self._scouts: list[ShadowView] = []  # per expert (0: LRU, 1: LFU), from the first eviction to a switch
        self._small: list[ShadowView] = []  # the second pair (SMALL_MAX), alive as long as the scouts
        self._small_ev = Evidence()
        self._small_warm = 0
        self._scouted = Evidence()
        self._left = 0  # the policy's switch count when the scouts started
        self._warm = 0  # tokens the scouts must still cache before their leads count (their transient: WARMUP)
        self._probe: ShadowView | None = None  # PROBE's LRU shadow, during the probation
        self._probe_left = 0  # lookups the probation still lasts

    def on_evict(self, victim: CachedNodeView) -> None:
        first = self._tree is None
        super().on_evict(victim)
        if first and self.SCOUT > 0 and self._tree is not None and self.mode != self.SCOUT_TO:
            self._scouts = [self._tree.shadow_copy(p) for p in self._shadowed]
            self._left = self.switches
            self._warm = int(self.SCOUT_WARM * self.WARMUP * self.SCOUT * self._capacity)
            if self.SMALL_MAX > 0.0:
                self._small = [self._tree.shadow_copy(p) for p in self._shadowed]
                self._small_warm = int(self.SCOUT_WARM * self.WARMUP * self.SCOUT / 2 * self._capacity)

    def on_lookup(self, start: CachedNodeView, key: bytes, length: int) -> None:
        scouts, mode, probe = self._scouts, self.mode, self._probe
        lead = 0
        if scouts or probe is not None:
            s = cast(NodeFields, start)
            full = key if s.parent is None else absolute_key(start, key)
        if scouts:
            lead = self._lead(scouts, s, full)
            if self._small and self._small_warm <= 0:
                self._small_ev.add(self._lead(self._small, s, full), len(key) // 4)
        lfu = self._shadows.get(1) if probe is not None else None
        super().on_lookup(start, key, length)
        if probe is not None:
            lru = probe.match(s.ns, full) - s.end
            back = (lru if lru > 0 else 0) - length  # LRU's match at the real size minus the real cache's
            self._probe_left -= 1
            if back > 0 and self.mode == 1 and self.PROBE_BACK:
                self._switch()  # the real size's first word is for LRU: undone
            if self.mode == 0 and self.PROBE_KEEP and lfu is not None:
                self._shadows[1] = lfu
            if back > 0 or (back < 0 and self.PROBE_FIRST) or self._probe_left <= 0 or self.mode == 0:
                self._probe = None
        if not scouts:
            return
        if self.switches != self._left or (self.SCOUT_QUIET and self._long.count > 0.0):
            self._scouts = self._small = []  # the policy switched, or (SCOUT_QUIET) the real size spoke: it is over
            return
        if self._warm > 0:
            return
        ev = self._scouted
        ev.add(lead, len(key) // 4)
        own = self._long
        if not self._shadows or own.sign < 0.0 or own.lead < 0.0 or (self.SCOUT_AGREE and own.sign * own.lead <= 0.0):
            return
        capacity = self._capacity
        size = self._capacity = max(1, int(self.SCOUT * capacity))  # _clear's MIN_LEAD, of the scouts' size
        clear = self._clear(ev)
        self._capacity = capacity
        vetoed = ev.sign <= -self.SIGN_VETO or (ev.sign <= 0.0 and ev.lead <= self.SIGN_LEAD * size)
        small = self.SMALL_MAX > 0.0 and self._small_ev.lead > self.SMALL_MAX * self.SCOUT / 2 * capacity
        if clear and small and mode == 0:
            self._scouts = self._small = []  # SMALL_MAX: a small cache's lead, the lead-in is over
        elif clear and (mode == 1 or not vetoed):
            self._switch()
            self._scouts = self._small = []
            if mode == 0 and self.PROBE > 0 and self._tree is not None:
                self._probe = self._tree.shadow_copy(self._shadowed[0])
                self._probe_left = self.PROBE

    def _lead(self, pair: list[ShadowView], s: NodeFields, full: bytes) -> int:
        """The other expert's match minus the followed one's, in one pair of shadows."""
        other = pair[1 - self.mode].match(s.ns, full) - s.end
        own = pair[self.mode].match(s.ns, full) - s.end
        return (other if other > 0 else 0) - (own if own > 0 else 0)

    def on_cache(self, start: CachedNodeView, key: bytes, cached: int, use: bool) -> None:
        scouts, probe = self._scouts, self._probe
        if not scouts and probe is None:
            super().on_cache(start, key, cached, use)
            return
        ns = cast(NodeFields, start).ns
        split, head, cut = self._split_key(start, key)
        leaf = self._leaf
        tail = cast(NodeFields, leaf).key if leaf is not None else None
        if probe is not None:
            probe.insert(ns, split, cached, use, tail, head, cut)
        if not scouts:
            super().on_cache(start, key, cached, use)
            return
        if self._small:  # sized before this insert's growth of the real cache (as round 27's screen logged it)
            size = max(1, int(self.SCOUT / 2 * self._capacity))
            added = max(s.insert(ns, split, size, use, tail, head, cut) for s in self._small)
            self._small_warm -= added
            self._fade(self._small_ev, added, size)
        super().on_cache(start, key, cached, use)
        size = max(1, int(self.SCOUT * self._capacity))
        added = max(s.insert(ns, split, size, use, tail, head, cut) for s in scouts)
        self._warm -= added
        self._fade(self._scouted, added, size)

    def _fade(self, ev: Evidence, added: int, size: int) -> None:
        """Evidence over WINDOW turnovers of its pair's size."""
        decay = 1.0 - added / (self.WINDOW * size)
        if decay < 1.0:
            ev.decay(decay if decay > 0.0 else 0.0)


def main(argv: list[str] | None = None) -> None:
    policy_grid.Adaptive = Scout  # type: ignore[misc]  # run() and --set read the module's name
    policy_grid.main(argv)


if __name__ == "__main__":
    main()
