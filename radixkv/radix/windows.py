"""Sliding-window groups on the radix index: where a match may end, and which window KV a lock keeps.

A window group g (window W: a query at position q sees keys q - W < k <= q) keeps, per node, the
window KV of the node's edge as a per-page component, or a tombstone (radix/node.py). To resume
at position p a request needs full KV for [0, p) and window KV for [p - W + 1, p) (the keys its
first new query sees; nothing when W == 1). So:

  resumable(...)   the longest p <= the device match where every window group covers
                   [p - W + 1, p): a run of consecutive nodes holding the component that starts
                   at the root (any p in it) or at least W - 1 tokens before p. The match
                   shortens to p, never claims more; work is O(nodes on the path x groups) per
                   round of the fixed point.
  protected(...)   how many trailing tokens of a node's component a lock keeps: a lock on node m
                   (a Sequence whose committed prefix ends at m, or a lock() caller) will read
                   positions >= m.end - W + 1 only, so the window KV below that is evictable even
                   on a locked path; the component is cut at a page boundary (evict.py splits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode


def resumable(path: list[TreeNode], length: int, windows: tuple[int, ...]) -> int:
    """Tokens a match from a namespace root may claim: the longest p <= `length` (whole pages;
    `path`: the device nodes it walked, in order) where every group g with windows[g] = W > 1
    holds window KV for [p - W + 1, p). Each group's limit is the longest p valid for it below the
    current bound; they are applied in turn until none lowers it (a fixed point across groups, as
    vLLM's hybrid coordinator finds its longest hit). Reads only."""
    best, moved = length, True
    while moved:
        moved = False
        for g, w in enumerate(windows):
            limit = _group_limit(path, best, g, w) if w > 1 and best else best
            if limit < best:
                best, moved = limit, True
    return best


def _group_limit(path: list[TreeNode], length: int, g: int, w: int) -> int:
    """The longest p <= length where group g covers [p - w + 1, p)."""
    best, run = 0, 0  # run: where the run of nodes holding the component starts (the root: 0)
    for node in path:
        if node.depth >= length:
            break
        if node.secondary[g] is None:
            run = -1
            continue
        if run < 0:
            run = node.depth
        end = min(node.end, length)
        if run == 0 or end - run >= w - 1:
            best = end
    return best


def protected(node: TreeNode, window: int, page_size: int) -> int:
    """Trailing tokens of `node`'s edge whose window KV some lock at or below it will still read
    (0..node.size, whole pages)."""
    if not node.lock_ref:
        return 0
    lo, stack, bound = node.end, [node], node.end + window - 1
    while stack:
        n = stack.pop()
        if n.user_locks or n.seq_locks:
            lo = min(lo, n.end - window + 1)
        stack.extend(c for c in n.children.values() if c.lock_ref and c.depth < bound)
    keep = node.end - max(lo, node.depth)
    return 0 if keep <= 0 else min(node.size, -(-keep // page_size) * page_size)
