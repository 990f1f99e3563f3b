"""`adaptive` (the default): follow whichever of LRU and LFU has been winning, measured by shadow.

No fixed policy wins every prefix workload: LFU wins shared-prefix traffic (system prompts, RAG
documents, trees of thought), LRU wins sessions (chat, agents, long documents read once), and on
a real long-context trace LFU lost to LRU by 8 points. A policy that guesses from features of the
traffic can guess wrong on a trace it has not seen; this one measures instead.

The real cache evicts in the order of one expert (LRU or LFU). A shadow (radix/shadow.py: the tree's
own core with sizes and times only, handed out by the tree through eviction/view.py) replays the
same traffic on metadata only under the other expert, with a capacity that follows the real cache's
occupancy (so in-flight reservations shrink both alike); it reproduces, request for request, what a
real cache under that expert would match. Per lookup the policy takes the paired lead (tokens the
other expert matched minus those the followed one matched) and keeps decayed sums of the leads,
their squares and the asked tokens (eviction/evidence.py; horizon: WINDOW cache-sizes of newly cached tokens). It
switches when the lead exceeds MARGIN of the asked tokens, MIN_LEAD of the cache's size (or, instead,
every one of UNANIMOUS or more differing lookups favoured the other expert: over WINDOW that happens
in the first turnovers after the first eviction, where it undoes sooner a prior's pick that the traffic
at the real size contradicts), and Z standard deviations, to LFU only while fewer than SIGN_VETO more
of the differing lookups favoured LRU, and, unless the lead is SIGN_LEAD of the cache's size, more of
them favoured LFU (not on a few long lookups the others contradict: on agent traces such leads come
and go faster than a switch's transient). Once the real cache stands for LFU, the same tests over
LEAVE_WINDOW, with LEAVE_SIGN more lookups for LRU (or more of LEAVE_COUNT or more differing lookups,
with a lead of LEAVE_LEAD of the cache's size), also leave it: on conversations LFU's lead collapses as
old sessions' counts go stale, and the lead banked over WINDOW held the switch back. The tree then
re-keys its index (`epoch`). The expert just left gets a shadow copied from the real cache (its steady
state); the expert now followed keeps its shadow as its reference until the real cache has turned over
once (WARMUP), so the comparison never pits a steady expert against one in transient.

In steady state the other expert's shadow runs on every request, most of the policy's cost. Where
it keeps losing it is stopped (freed) and later restarted as a copy of the real cache (eviction/duty.py
says when: QUIET windows judged by QUIET_Z, alone or with up to QUIET_SPAN - 1 windows before them,
or by a sign test of QUIET_SIGN differing lookups, OFF to OFF_MAX turnovers off, a CANARY on the real
cache's hit ratio, REWARM turnovers of transient).
The twin stops with it (the ghosts stay as they are) and, unless they are on, evictions write no
ghosts meanwhile. Switching waits for the restart: what a stop costs is a later switch when the
traffic changes, which the windows and the canary bound.

Before the first eviction both experts hold exactly what the real cache holds, so no shadow runs;
that traffic is kept (eviction/history.py: as leaves of the real tree and lengths, not key bytes) and
replayed at the first eviction to choose the expert followed first (eviction/prior.py). That history
is charged its real bytes from the first lookup; past HISTORY bytes it is dropped and START is followed.

It cannot stay behind the better expert for long: a clear lead is acted on, and a switch that was a
mistake is undone the same way. What it pays is the lag before it has evidence: the consequences of
evicting differently show only when the evicted prefix is asked for again. bench/RESULTS.md has the
margins, on the bench workloads and on random held-out traces, and what did not help.

After a switch to LFU the real cache's LFU adds ghost counts (eviction/ghosts.py: the uses that
eviction took from a re-inserted prefix) for the first turnover, and past it while they pay: a
plain-LFU shadow copied from the real cache at the switch (the twin) is fed the same traffic, and the
ghosts go off (a re-key) once the real cache's matches since the switch no longer lead the twin's by
GHOST_KEEP x the size. The twin lives only while they are on (a third shadow, after a switch only).

Learning happens only in the hooks; `key` is the current expert's own key function, so stored keys
are always exact (`stable_keys`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from mypy_extensions import mypyc_attr

from radixkv.eviction.duty import DutyCycle
from radixkv.eviction.evidence import Evidence
from radixkv.eviction.ghosts import GhostLFU
from radixkv.eviction.history import History, absolute_key
from radixkv.eviction.policies import LFU, LRU, EvictionPolicy
from radixkv.eviction.prior import leaves_start
from radixkv.eviction.view import NodeFields

if TYPE_CHECKING:
    from radixkv.eviction.view import CachedNodeView, NodeView, ShadowKeysView, ShadowView, TreeView


@mypyc_attr(allow_interpreted_subclasses=True)
class Adaptive(EvictionPolicy):
    """Follow the leader of LRU and LFU (module docstring)."""

    name = "adaptive"
    learns = True
    stable_keys = False  # after a switch to LFU its keys read ghost counts (eviction/ghosts.py), which evictions change
    insert_is_use = True  # its LFU expert reads hit_count
    PRIOR = True  # choose the first expert by replaying the traffic before the first eviction in small caches
    PRIOR_SIZE = 0.25  # ... of this share of the real cache's size, judged as a switch is (MARGIN and Z)
    PRIOR_FROM = 0.5  # ... on the lookups from this share of the history on (the small caches warm)
    PRIOR_REUSE = 0.55  # no replay, START, where this share of the tokens inserted before then was cached already
    HISTORY = 1 << 24  # bytes that replay's history (eviction/history.py) may take (16 MiB, freed at the
    # first eviction); past it, START. A request of the bench lifecycle costs two entries, 224 bytes
    START = 0  # the expert followed until the evidence says otherwise: LRU (SGLang's default)
    WINDOW = 8.0  # decay horizon: tokens newly cached, as a multiple of the cache's size
    SIGN_VETO = 5.0  # no switch to LFU while this many more differing lookups favoured LRU (decayed as the lead)
    SIGN_LEAD = 0.2  # ... nor while any more did (or as many), unless the lead is this share of the cache's size
    LEAVE_WINDOW = 3.0  # once settled on LFU, leave it also on the tests over this shorter horizon,
    LEAVE_SIGN = 4.0  # ... when at least this many more differing lookups over it favoured LRU
    LEAVE_LEAD = 0.2  # ... or when more did and the lead over it is this share of the cache's size,
    LEAVE_COUNT = 20.0  # ... over at least this many differing lookups (decayed as its lead is)
    WARMUP = 1.0  # after a switch, turnovers before the real cache stands for its expert
    MARGIN = 0.002  # switch when the other expert matched this share of the asked tokens more (0.2 points)
    MIN_LEAD = 0.05  # ... by at least this share of the cache's size in tokens (a switch costs a transient)
    UNANIMOUS = 4.0  # ... or, instead of MIN_LEAD, every one of at least this many differing lookups (decayed)
    # favoured it: a sign test (k of k at even odds: 2^-k), no few long lookups that the rest contradict
    Z = 0.5  # ... and its lead is Z standard deviations of the paired per-lookup leads from zero
    GHOST_TWIN = True  # past the first turnover after a switch to LFU, keep ghost counts on while they pay:
    GHOST_KEEP = 0.0  # while the real cache matched more than a plain-LFU twin, by this share of the cache's size
    QUIET = 1.0  # the other expert's shadow stops (eviction/duty.py) when, over a window of QUIET turnovers
    QUIET_Z = 3.0  # ... in steady state, the leads favoured the followed expert by QUIET_Z sd (0: never),
    QUIET_SPAN = 2  # ... or over the last QUIET_SPAN windows, each in its favour;
    QUIET_SIGN = 10  # ... or every one of at least QUIET_SIGN differing lookups in a window favoured it (0: never);
    OFF = 2.0  # ... for OFF turnovers, twice as long after each stop since the last switch, up to
    OFF_MAX = 8.0  # ... OFF_MAX; then it restarts as a copy of the real cache,
    REWARM = 0.5  # ... whose leads count after REWARM turnovers (its transient)
    DROP = 0.05  # ... or earlier: when the real cache's hit ratio over a window of CANARY turnovers
    CANARY = 0.5  # ... falls DROP below the ratio over the window that stopped it

    def __init__(self) -> None:
        self._ghosts = GhostLFU()  # the real cache's LFU: ghost counts while it turns over after a switch
        self.experts: tuple[EvictionPolicy, ...] = (LRU(), self._ghosts)
        self._shadowed: tuple[EvictionPolicy, ...] = (self.experts[0], LFU())  # what the shadows run
        self.mode = self.START  # the expert the real cache follows
        self._current: EvictionPolicy = self.experts[self.START]  # the expert followed: `key` is its key
        self.switches = 0
        self._tree: TreeView | None = None
        self._shadows: dict[int, ShadowView] = {}  # expert -> its shadow (none before the first eviction)
        # The paired leads (other expert's hit - current expert's hit, each read from the real cache or its
        # shadow, whichever is in steady state) over WINDOW, and over LEAVE_WINDOW from the last switch:
        self._long = Evidence()
        self._short = Evidence()  # (read while LFU is followed and settled)
        self._capacity = 1  # the most tokens the real cache has held
        self._settle = 0  # tokens the real cache must still cache after a switch before it counts
        # the traffic before the first eviction (eviction/history.py), and the leaf its last insert made:
        self._history: History | None = History() if self.PRIOR else None
        self._leaf: NodeView | None = None
        self._keys: ShadowKeysView | None = None  # the shadows' keys (from the first eviction)
        self._hit: NodeView | None = None  # where the real cache's match ended (on_hit, then on_lookup)
        self._looked = b""  # a lookup's key (from its root; the last but while the shadow is stopped) and its
        self._looked_at: NodeView | None = None  # _hit: the key spells that node's path (_split_key)
        self._twin: ShadowView | None = None  # plain LFU, copied from the real cache at a switch to LFU
        self._twin_lead = 0  # tokens the twin matched more than the real cache since that switch
        self._duty = DutyCycle(self.QUIET, self.QUIET_Z, self.QUIET_SPAN, self.OFF, self.OFF_MAX, self.REWARM,
                               self.DROP, self.CANARY, self.QUIET_SIGN)

    @property
    def leader(self) -> str:
        return self.experts[self.mode].name

    def key(self, node: NodeView) -> tuple:
        return self._current.key(node)

    def on_evict(self, victim: CachedNodeView) -> None:
        if self._tree is None:  # until now every expert held what the real cache holds
            self._tree = tree = victim.tree
            self._keys = tree.shadow_keys
            self._ghosts.page_bytes = 4 * tree.page_size
            history, shadowed, mode = self._history, self._shadowed, self.mode
            if history and leaves_start(self, tree, history, shadowed[mode], shadowed[1 - mode],
                                        tree.evictable_size + tree.protected_size):
                self._follow(1 - mode)
            self._history = None
            self._leaf = None
            self._copy_real(1 - self.mode)
        if self._shadows or self._ghosts.active:  # (no switch to LFU while the shadow is stopped)
            self._ghosts.remember(victim)

    def on_insert(self, leaf: CachedNodeView) -> None:
        self._leaf = leaf  # the history keeps it; a shadow's new leaf shares its key bytes

    def on_hit(self, node: CachedNodeView) -> None:
        self._hit = node

    def on_lookup(self, start: CachedNodeView, key: bytes, length: int) -> None:
        shadows, hit, self._hit = self._shadows, self._hit, None
        s = cast(NodeFields, start)  # its fields read natively, compiled (eviction/view.py)
        if not shadows:  # before the first eviction, or the shadow stopped
            if self._tree is not None:
                self._duty.idle_lookup(length, len(key) // 4)
                return
            history = self._history
            if history is not None:
                full = key if s.parent is None else absolute_key(start, key)
                self._looked, self._looked_at = full, hit
                history.lookup(s.ns, full)
                if history.bytes > self.HISTORY:
                    self._history = None
            return
        full = key if s.parent is None else absolute_key(start, key)
        self._looked, self._looked_at = full, hit
        if hit is not None and self._keys is not None:  # the shadows share its path's key objects
            self._keys.along(full, hit)
        mode, end, ns = self.mode, s.end, s.ns
        other = shadows[1 - mode].match(ns, full) - end  # the expert left always has a shadow
        own = shadows[mode].match(ns, full) - end if mode in shadows else length
        lead = (other if other > 0 else 0) - (own if own > 0 else 0)
        twin = self._twin
        if twin is not None:
            self._twin_lead += twin.match(ns, full) - end - length
        duty = self._duty
        if duty.warm > 0:  # a restarted shadow in its transient
            return
        asked = len(key) // 4
        duty.lookup(lead, length, asked)
        self._long.add(lead, asked)
        self._short.add(lead, asked)
        if self._clear(self._long) and (mode == 1 or not self._vetoed()):
            self._switch()
        elif mode == 1 and mode not in shadows and self._leaves():
            self._switch()

    def _vetoed(self) -> bool:
        """Whether the sign count vetoes a switch to LFU: SIGN_VETO more of the differing lookups favoured
        LRU, or no fewer favoured it while the lead is under SIGN_LEAD of the cache's size."""
        sign = self._long.sign
        return sign <= -self.SIGN_VETO or (sign <= 0.0 and self._long.lead <= self.SIGN_LEAD * self._capacity)

    def _leaves(self) -> bool:
        """Whether the statistics over LEAVE_WINDOW leave LFU: clear, with LEAVE_SIGN more of the differing
        lookups for LRU, or more of them and a lead of LEAVE_LEAD of the cache's size."""
        short = self._short
        sign = short.sign
        return ((sign >= self.LEAVE_SIGN or (sign > 0.0 and short.lead > self.LEAVE_LEAD * self._capacity
                                             and short.count >= self.LEAVE_COUNT))
                and self._clear(short))

    def _clear(self, ev: Evidence) -> bool:
        """Whether `ev` makes the other expert's lead clear: MARGIN of the asked tokens, MIN_LEAD of the
        cache's size (or UNANIMOUS differing lookups, all for it), Z sd."""
        lead = ev.lead
        return (lead > self.MARGIN * ev.asked
                and (lead > self.MIN_LEAD * self._capacity or ev.sign >= ev.count >= self.UNANIMOUS)
                and lead * lead > self.Z * self.Z * ev.var)

    def on_cache(self, start: CachedNodeView, key: bytes, cached: int, use: bool) -> None:
        if cached > self._capacity:
            self._capacity = cached
        shadows = self._shadows
        if not shadows:
            if self._tree is not None:
                self._idle()
                return
            history = self._history
            if history is not None:
                key, head, cut = self._split_key(start, key)
                history.insert(cast(NodeFields, start).ns, key, self._leaf, use, head, cut)
                self._leaf = None
                if history.bytes > self.HISTORY:
                    self._history = None
            return
        ns = cast(NodeFields, start).ns
        key, head, cut = self._split_key(start, key)
        mode, leaf = self.mode, self._leaf
        tail = cast(NodeFields, leaf).key if leaf is not None else None
        self._leaf = None
        added = shadows[1 - mode].insert(ns, key, cached, use, tail, head, cut)
        if mode in shadows:
            own = shadows[mode].insert(ns, key, cached, use, tail, head, cut)
            added = own if own > added else added
            self._settle -= added
            if self._settle <= 0:  # the real cache now holds what its expert would: it counts
                del shadows[mode]
                if self._ghosts.active and self._twin is None:  # from now on the real cache is plain LFU's
                    self._ghosts.active = False
                    self.epoch += 1
        twin = self._twin
        if twin is not None:
            twin.insert(ns, key, cached, use, tail, head, cut)
            if mode not in shadows and -self._twin_lead <= self.GHOST_KEEP * self._capacity:
                self._twin = None  # turned over, and the ghosts no longer pay: plain LFU from now on
                self._ghosts.active = False
                self.epoch += 1
        self._decay(added)
        if self._duty.cached(added, self._capacity, mode not in shadows):
            self._shadows = {}  # stopped (freed), and the twin with it: the ghosts stay as they are
            self._twin = None

    def _split_key(self, start: CachedNodeView, key: bytes) -> tuple[bytes, bytes | None, int]:
        """An insert's `key` below `start` as (key, head, cut), the whole being head[:cut] + key: where the insert
        walked on from the last lookup's end, that lookup's key (it spells start's path), else the whole key from
        the root (history.py's absolute_key where `start` is not a root)."""
        s = cast(NodeFields, start)
        if s.parent is None:
            return key, None, 0
        if start is self._looked_at:
            return key, self._looked, 4 * s.end
        return absolute_key(start, key), None, 0

    def _idle(self) -> None:
        """An insert while the other expert's shadow is stopped: its new tokens (its new leaf's) count
        down to the restart, a copy of the real cache (warming: eviction/duty.py)."""
        leaf, self._leaf = self._leaf, None
        added = cast(NodeFields, leaf).size if leaf is not None else 0
        self._decay(added)
        if self._duty.idle(added, self._capacity):
            self._copy_real(1 - self.mode)

    def _decay(self, added: int) -> None:
        """`added` tokens newly cached: the evidence decays over WINDOW cache sizes, its short copy over
        LEAVE_WINDOW."""
        decay = 1.0 - added / (self.WINDOW * self._capacity)
        if decay < 1.0:
            self._long.decay(decay if decay > 0.0 else 0.0)
            decay = 1.0 - added / (self.LEAVE_WINDOW * self._capacity)
            self._short.decay(decay if decay > 0.0 else 0.0)

    def _switch(self) -> None:
        """Follow the other expert. Its shadow stays as its reference until the real cache has
        turned over; the expert left gets a shadow copied from the real cache (its steady state)."""
        old = self.mode
        self._follow(1 - old)
        self._ghosts.active = self.mode == 1
        self._long.flip()  # the same evidence, seen from the other side
        self._short.reset()  # from the switch on
        self._copy_real(old)
        assert self._tree is not None  # (_copy_real's)
        self._twin = self._tree.shadow_copy(self._shadowed[1]) if self.mode == 1 and self.GHOST_TWIN else None
        self._twin_lead = 0
        self._settle = int(self.WARMUP * self._capacity)
        self._duty.switched()

    def _follow(self, expert: int) -> None:
        self.mode = expert
        self._current = self.experts[expert]
        self.epoch += 1
        self.switches += 1

    def _copy_real(self, expert: int) -> None:
        assert self._tree is not None
        self._shadows[expert] = self._tree.shadow_copy(self._shadowed[expert])

