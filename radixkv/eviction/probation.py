"""ProbationLRU: the adaptive policy's recency expert, LRU with new leaves entering behind the old.

Plain LRU puts a leaf just cached at the head of the order, beside prefixes that were just asked for
again. A leaf nobody has matched since its insert (fewer than PROTECTED uses, an insert counting one)
is more often a one-off (a request's own output, a scan) than a prefix that came back, so it enters
the order as if it had been touched DEMOTE ticks earlier (one tick: one match or insert of the tree,
about two a request); its first hit puts it back at its own time. DEMOTE 0 is plain LRU, a huge
DEMOTE is SLRU (every unhit leaf before every hit one).

Measured as fixed policies on bench/policy_grid.py's cells (bench/RESULTS.md, round 10): a small
DEMOTE keeps most of LRU's wins and takes part of SLRU's (scan resistance), so the best of it and LFU
comes nearer the best fixed policy than the best of LRU and LFU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixkv.eviction.policies import LRU

if TYPE_CHECKING:
    from radixkv.eviction.view import NodeView


class ProbationLRU(LRU):
    insert_is_use = True  # its uses count the insert, as the adaptive policy's tree does

    def __init__(self, demote: int, protected: int = 2) -> None:
        self.demote = demote  # ticks a leaf with fewer than `protected` uses is set back
        self.protected = protected

    def key(self, node: NodeView) -> tuple:
        if node.hit_count < self.protected:
            return (node.last_access - self.demote, node.id)
        return (node.last_access, node.id)
