"""Two more eviction policies: SLRU (SGLang's) and `adaptive`, a continuation-aware LRFU.

No fixed policy wins every prefix workload: in shared-prefix traffic (gsp, RAG, tree-of-thought)
how often a node was reused predicts its next reuse, so LFU wins; in session traffic (multi-turn
chat, agent loops) a session's oldest, most-hit nodes die with the session, so LRU wins.

`adaptive` ranks a leaf by LRFU's combined recency-frequency value (Lee et al., 2001):
CRF = sum over its references of 2^(-(now - t_ref) / H). Keys must not change while a leaf waits
in the index, and LRFU's ordering is time-invariant, so the key is `t_last / H + log2(CRF(t_last))`,
with the references assumed evenly spaced between `created` and `last_access` (the node keeps only
a hit count). The half-life H moves between H_MIN (recency: LRU-like) and H_MAX (frequency:
LFU-like) with one learned number, the continuation rate r: the fraction of freshly inserted
leaves whose whole key is later extended by a request, either seen live (a leaf matched for the
first time as a whole) or through a ghost (a never-hit leaf that was evicted and then re-inserted
as the start of a longer leaf at the same depth). Sessions continue their last sequence (r near 1,
short H); shared-prefix traffic branches below a common prefix (r near 0, long H). Counting ghosts
keeps r honest when eviction itself removes the leaves that would have been continued.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING

from radixkv.eviction.policies import EvictionPolicy

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode


class SLRU(EvictionPolicy):
    """Segmented LRU: nodes hit at least `protected_threshold` times outlive all others (SGLang's
    SLRUStrategy); LRU inside each segment."""

    name = "slru"
    stateless = True

    def __init__(self, protected_threshold: int = 2) -> None:
        self.protected_threshold = protected_threshold

    def key(self, node: TreeNode) -> tuple:
        return (node.hit_count >= self.protected_threshold, node.last_access, node.id)


class Adaptive(EvictionPolicy):
    """Continuation-aware LRFU (module docstring). Stateful: keys depend on the learned rate."""

    name = "adaptive"
    H_MIN = 64.0  # ticks (2 per request): a few dozen requests of memory, LRU-like
    H_MAX = 4096.0  # thousands of requests: hit counts dominate, LFU-like
    ALPHA = 0.02  # EMA step per inserted leaf: r follows the last ~50 insertions
    GHOSTS = 8192  # evicted never-hit leaves remembered (a fingerprint and a hash each)
    _FP = 8  # tokens of a key used to find its ghost

    def __init__(self) -> None:
        self.rate = 0.0  # continuation rate r in [0, 1]
        self._continued = False  # a continuation was seen since the last inserted leaf
        self._clock = -1  # newest last_access seen: tells fresh events from re-keyed old leaves
        self._ghosts: OrderedDict[tuple[int, bytes], tuple[int, int]] = OrderedDict()

    @property
    def half_life(self) -> float:
        """H in ticks: H_MIN * (H_MAX / H_MIN) ** ((1 - r) ** 2)."""
        return self.H_MIN * (self.H_MAX / self.H_MIN) ** ((1.0 - self.rate) ** 2)

    def _observe(self, node: TreeNode) -> None:
        if node.last_access <= self._clock:
            return  # an old leaf re-keyed (its child was evicted or it was unlocked)
        self._clock = node.last_access
        if node.hit_count == 1:  # a fresh leaf matched as a whole: continued live
            self._continued = True
        elif node.hit_count == 0 and node.created == node.last_access:  # just inserted
            ghost = self._ghosts.pop((node.depth, node.key[:self._FP].tobytes()), None)
            if ghost is not None and len(node.key) > ghost[0] \
                    and hash(node.key[:ghost[0]].tobytes()) == ghost[1]:
                self._continued = True  # an evicted fresh leaf came back, extended
            self.rate += self.ALPHA * (float(self._continued) - self.rate)
            self._continued = False

    def key(self, node: TreeNode) -> tuple:
        self._observe(node)
        lam = 1.0 / self.half_life
        h = node.hit_count
        crf = 1.0
        if h:
            gap = max(1.0, (node.last_access - node.created) / h)
            decay = 2.0 ** (-lam * gap)
            crf = (1.0 - decay ** (h + 1)) / (1.0 - decay)
        return (lam * node.last_access + math.log2(crf), node.id)

    def on_evict(self, node: TreeNode) -> None:
        if node.hit_count == 0:
            self._ghosts[(node.depth, node.key[:self._FP].tobytes())] = (len(node.key), hash(node.key.tobytes()))
            if len(self._ghosts) > self.GHOSTS:
                self._ghosts.popitem(last=False)
