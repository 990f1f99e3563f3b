"""The device part of a walked path (radix/core.py's `walk`): what a match or an insert finds cached.

Device residency is prefix-closed: along a path from a root, the nodes on the device come first and
host-only ones (a host tier's) after. So the device-cached part of a walk is a count of nodes and of
tokens (`device_prefix`), and its pages are those nodes' pages in order (`device_pages`). Read-only;
radix/tree.py's match and insert and radix/lookup.py use it.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from radixkv.radix.node import TreeNode
from radixkv.radix.residency import ResidentTree

_EMPTY: Final = np.empty(0, dtype=np.int64)  # (Final: compiled, a C static, not a module-dict lookup)
_I64: Final = np.dtype(np.int64)
_cat: Final = np.concatenate


def device_prefix(tree: ResidentTree, path: list[TreeNode], length: int, start: TreeNode) -> tuple[int, int]:
    """How many nodes of a walked path, and how many of its `length` tokens, are on the device."""
    if tree.host_index is not None:
        for i, node in enumerate(path):
            if node.pages is None:
                return i, node.depth - start.end
    return len(path), length


def device_pages(path: list[TreeNode], k: int, n: int) -> np.ndarray:
    """int64 `[n]`, a fresh array: the first n device pages of the nodes `path[:k]` (all on the device)."""
    first = path[0].pages if k else None
    if first is None:
        return _EMPTY
    if k == 1:  # the usual case: one edge (int32 kept; int64 like the caller's pages)
        return (first if n == len(first) else first[:n]).astype(_I64)
    return _cat([p.pages for p in path[:k] if p.pages is not None], dtype=_I64)[:n]
