"""`lrfu`: a continuation-aware LRFU that learns between LRU and LFU from the traffic (the default
before `adaptive` became a follower of shadow caches; kept for comparison in bench/RESULTS.md).

No fixed policy wins every prefix workload. In shared-prefix traffic (gsp, RAG, tree-of-thought,
few-shot) how often a node was reused predicts its next reuse, so LFU wins; in session traffic
(multi-turn chat, agent loops) a session's oldest, most-hit nodes die with the session while its
newest leaf is about to be extended, so LRU wins (measured in bench/RESULTS.md).

`lrfu` ranks an evictable leaf by LRFU's combined recency-frequency value (Lee et al., 2001),
CRF = sum over its references of 2^(-(now - t_ref) / H). Keys must not change while a leaf waits
in the index; LRFU's order is time-invariant, so the key is `t_last / H + log2(CRF at t_last)`,
with the node's `hit_count` references assumed evenly spaced between `created` and `last_access`.
The half-life H (in ticks of the tree's logical clock) slides from H_MAX (hit counts dominate:
LFU-like) to H_MIN (recency only: LRU) as one learned number, the chain rate r, rises from R_LO
to R_HI. Over recent insertions of fresh leaves, r is the decayed fraction of
  * chain events: the new leaf extends a leaf that the same request matched whole for the first
    time (seen live), or it re-creates a never-hit leaf that eviction took and extends it (seen
    through a ghost: a fingerprint of the victim kept in a bounded LRU dict; a victim that ended
    where eviction or a split cut an edge, rather than where a sequence ended, proves nothing);
among chain events and
  * branch events: the new leaf is its parent's second child (each node counts once, so a system
    prompt shared by a thousand requests is one event, not a thousand), or it starts where an
    evicted never-hit leaf started and diverges from it (the sibling that eviction hid).
Sessions continue their last sequence (r near 1); shared prefixes fan out (r near 0); a tree of
thought continues each path once per branch (r near 1/2: still frequency-led). Counting ghosts
keeps r honest when eviction removes the leaves that would have been continued.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Final

from radixkv.eviction.policies import EvictionPolicy

if TYPE_CHECKING:
    from radixkv.eviction.view import CachedNodeView, NodeView


class LRFU(EvictionPolicy):
    """Continuation-aware LRFU (module docstring). It learns in its hooks; `key()` only reads the
    learned half-life, so a leaf's key is fixed when it enters the index (or is touched), as in
    GreedyDual."""

    name = "lrfu"
    learns = True
    stable_keys = False  # keys read the half-life, which moves with every event
    # insert_is_use stays False although the key reads hit_count: on_hit spots a leaf's first match by it
    H_MIN: Final = 8.0  # ticks (2 per request): the frequency term vanishes, pure LRU order
    H_MAX: Final = 4096.0  # ~2,000 requests: log2(hit count) dominates recency, LFU-like
    R_LO: Final = 0.6  # chain rate at which H starts to fall from H_MAX
    R_HI: Final = 0.85  # ... and reaches H_MIN
    DECAY: Final = 0.999  # per counted event: r remembers the last ~1,000 events
    GHOSTS: Final = 8192  # evicted never-hit leaves remembered
    _FP: Final = 8 * 4  # leading key bytes (8 tokens) in a ghost's fingerprint

    def __init__(self) -> None:
        self._chains = 0.0  # decayed count of chain events (prior: r = 0, weight 1)
        self._events = 1.0  # decayed count of chain + branch events
        self._first_hit: tuple[int, int] | None = None  # (id, end) of the leaf just matched whole once
        # (depth, first key bytes) -> (length, hash of key, ended at a cut) of evicted never-hit leaves
        self._ghosts: OrderedDict[tuple[int, bytes], tuple[int, int, bool]] = OrderedDict()
        self._cut_ends: OrderedDict[int, None] = OrderedDict()  # ids of nodes whose end is a split point

    @property
    def rate(self) -> float:
        """The chain rate r in [0, 1]."""
        return self._chains / self._events

    @property
    def half_life(self) -> float:
        t = min(1.0, max(0.0, (self.R_HI - self.rate) / (self.R_HI - self.R_LO)))
        return self.H_MIN * (self.H_MAX / self.H_MIN) ** t

    def on_hit(self, node: CachedNodeView) -> None:
        if node.hit_count == 1 and not any(map(node.tree.on_device, node.children.values())):
            self._first_hit = (node.id, node.end)

    def on_insert(self, leaf: CachedNodeView) -> None:
        parent = leaf.parent
        assert parent is not None
        chain = self._first_hit == (parent.id, parent.end)
        branch = len(parent.children) == 2
        ghost = self._ghosts.pop((leaf.depth, leaf.key[:self._FP]), None)
        if ghost is not None:  # an evicted leaf started here: the new one extends it or diverges
            extends = len(leaf.key) > ghost[0] and hash(leaf.key[:ghost[0]]) == ghost[1]
            chain, branch = extends and not ghost[2], not extends  # extending a cut proves nothing
        self._first_hit = None
        if chain or branch:
            self._chains = self._chains * self.DECAY + chain
            self._events = self._events * self.DECAY + 1.0

    def key(self, node: NodeView) -> tuple:
        lam = 1.0 / self.half_life
        crf = 1.0
        if node.hit_count:
            gap = max(1.0, (node.last_access - node.created) / node.hit_count)
            decay = 2.0 ** (-lam * gap)
            crf = (1.0 - decay ** (node.hit_count + 1)) / (1.0 - decay)
        return (lam * node.last_access + math.log2(crf), node.id)

    def on_evict(self, victim: CachedNodeView) -> None:
        parent = victim.parent
        if parent is not None and parent.parent is not None and parent.id > victim.id:
            self._cut_ends[parent.id] = None  # parent came from a split of this edge: a cut, not a sequence end
            if len(self._cut_ends) > self.GHOSTS:
                self._cut_ends.popitem(last=False)
        cut = victim.id in self._cut_ends
        self._cut_ends.pop(victim.id, None)
        if victim.hit_count == 0:
            self._ghosts[(victim.depth, victim.key[:self._FP])] = (len(victim.key), hash(victim.key), cut)
            if len(self._ghosts) > self.GHOSTS:
                self._ghosts.popitem(last=False)
