"""The device part of a walked path (radix/core.py's `walk`): what a match or an insert finds cached.

Device residency is prefix-closed: along a path from a root, the nodes on the device come first and
host-only ones (a host tier's) after. So the device-cached part of a walk is a count of nodes and of
tokens (`device_prefix`), and its pages are those nodes' pages in order (`device_runs`, `device_pages`). Read-only;
radix/tree.py's match and insert and radix/lookup.py use it; `node_runs` gives insert a new node's runs.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from radixkv.radix.node import TreeNode
from radixkv.radix.residency import ResidentTree
from radixkv.runs import expand, runs_of, section

_EMPTY: Final = np.empty(0, dtype=np.int64)  # (Final: compiled, a C static, not a module-dict lookup)


def device_prefix(tree: ResidentTree, path: list[TreeNode], length: int, start: TreeNode) -> tuple[int, int]:
    """How many nodes of a walked path, and how many of its `length` tokens, are on the device."""
    if tree.host_index is not None:
        for i, node in enumerate(path):
            if node.pages is None:
                return i, node.depth - start.end
    return len(path), length


def device_runs(path: list[TreeNode], k: int) -> list[int]:
    """The device pages of the nodes `path[:k]` (all on the device) as runs: the one node's own list (the
    usual case: one edge; never written in place) or a new one."""
    first = path[0].pages if k else None
    if first is None or k == 1:
        return first or []
    runs: list[int] = []
    for node in path[:k]:
        pages = node.pages
        if pages is not None:
            runs += pages
    return runs


def device_pages(path: list[TreeNode], k: int, n: int) -> np.ndarray:
    """int64 `[n]`, a fresh array: the first n device pages of the nodes `path[:k]` (all on the device)."""
    return expand(device_runs(path, k), n) if n else _EMPTY


def node_runs(pages: np.ndarray, new: list[int] | None, first: int, n: int, lo: int) -> list[int]:
    """The runs of `pages[first:first + n]`: cut from `new` (the runs of `pages[lo:]`) when given."""
    if new is not None:
        return new if first == lo and n == len(pages) - lo else section(new, first - lo, n)
    return runs_of(pages[first:first + n])
