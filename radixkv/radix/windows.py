"""Where a match may end across secondary layer groups, and which window KV a lock keeps.

To resume at position p a request needs full KV for [0, p) (the device match) and, per secondary
group (`Reach`, one per group of the tree):

  window W   window KV for [p - W + 1, p): a query at q sees keys q - W < k <= q;
  chunk C    chunk KV for [p // C * C, p): a query sees keys of its own chunk only, so at a chunk
             boundary nothing (on average C / 2 tokens: what a chunk group keeps, vs W - 1 = C - 1
             for a window of the chunk's size);
  state      a snapshot held by a node ending exactly at p (the state after p tokens), or p = 0.

A window or chunk group keeps, per node, the KV of the node's edge as a per-page component, or a
tombstone (radix/node.py); a state group one slot at the node.

  resumable(...)   the longest p <= the device match where every group can resume: each group's
                   own limit (the longest p below the current bound it can resume from) applied in
                   turn until none lowers the bound, a fixed point across groups, as vLLM's hybrid
                   coordinator finds its longest hit. Never claims more than the match; work is
                   O(nodes on the path x groups) per round.
  protected(...)   how many trailing tokens of a node's window / chunk component a lock keeps: a
                   lock on node m (a Sequence whose committed prefix ends at m, or a lock() caller)
                   reads positions >= first(m.end) only, so the KV below that is evictable even on
                   a locked path; the component is cut at a page boundary (evict.py splits).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode


class Reach(NamedTuple):
    """What resuming needs of one secondary group (module docstring)."""

    kind: str  # "window" | "chunk" | "state" (a GroupSpec kind)
    size: int  # window: W; chunk: C; state: 0

    def first(self, p: int) -> int:
        """The first position whose KV in this group a query at `p` reads (p: none; window, chunk)."""
        return p - self.size + 1 if self.kind == "window" else p // self.size * self.size

    @property
    def lookback(self) -> int:
        """The most positions before a query whose KV in this group it reads (window, chunk)."""
        return self.size - 1


def resumable(path: list[TreeNode], length: int, reaches: tuple[Reach, ...], page_size: int) -> int:
    """Tokens a match from a namespace root may claim: the longest p <= `length` (whole pages;
    `path`: the device nodes it walked, in order) from which every group of `reaches` (group g + 1
    is reaches[g]) can resume. Reads only."""
    best, moved = length, True
    while moved and best:
        moved = False
        for g, reach in enumerate(reaches):
            limit = _group_limit(path, best, g, reach, page_size)
            if limit < best:
                best, moved = limit, True
    return best


def _group_limit(path: list[TreeNode], length: int, g: int, reach: Reach, page_size: int) -> int:
    """The longest p <= length from which group g can resume."""
    if reach.kind == "state":
        return max((n.end for n in path if n.end <= length and n.secondary[g] is not None), default=0)
    if reach.lookback <= 0:
        return length  # W = 1 or C = 1: a query reads only itself
    step = math.lcm(reach.size, page_size) if reach.kind == "chunk" else 0
    best = length // step * step if step else 0  # whole-page chunk boundaries need nothing
    run = 0  # where the run of nodes holding the component starts (the root: 0; -1: in a tombstone)
    for node in path:
        if node.depth >= length:
            break
        if node.secondary[g] is None:
            run = -1
            continue
        if run < 0:
            run = node.depth
        end = min(node.end, length)
        if run == 0 or run <= reach.first(end):
            best = max(best, end)
    return best


def protected(node: TreeNode, reach: Reach, page_size: int) -> int:
    """Trailing tokens of `node`'s edge whose window / chunk KV some lock at or below it will still
    read (0..node.size, whole pages)."""
    if not node.lock_ref:
        return 0
    lo, stack, bound = node.end, [node], node.end + reach.lookback
    while stack:
        n = stack.pop()
        if n.user_locks or n.seq_locks:
            lo = min(lo, reach.first(n.end))
        stack.extend(c for c in n.children.values() if c.lock_ref and c.depth < bound)
    keep = node.end - max(lo, node.depth)
    return 0 if keep <= 0 else min(node.size, -(-keep // page_size) * page_size)
