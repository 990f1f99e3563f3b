"""Read-mostly lookups on a RadixTree besides `match`: what a match would report (`peek`), the host
pages of a host-only continuation (`host_pages_below`) and the node ending a prefix (`locate`).
Part of the radix index: `locate` may split an edge, through the tree's own split; nothing else
here changes the tree. Work is proportional to the pages compared, like `match`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from radixkv.radix.device_path import device_prefix

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode
    from radixkv.radix.tree import RadixTree

_EMPTY = np.empty(0, dtype=np.int64)


def peek(tree: RadixTree, key: bytes, start: TreeNode) -> tuple[int, int]:
    """Read-only: (device-cached tokens, further host-only tokens) of `key` (whole pages) below
    `start`: what `match` would report (before any window shortening), nothing split or refreshed."""
    path, matched = tree.walk(key, start)
    k, dev = device_prefix(tree, path, matched // 4, start)
    return dev, matched // 4 - dev


def host_pages_below(tree: RadixTree, key: bytes, start: TreeNode) -> np.ndarray:
    """Read-only: host pages of the host-only continuation of `key` below `start` (whole pages),
    where `start` ends a device match of the tokens before `key`."""
    path, matched = tree.walk(key, start)
    host = [n.host_pages for n in path if n.pages is None and n.host_pages is not None]
    return np.concatenate(host)[:matched // tree.page_bytes] if host else _EMPTY


def locate(tree: RadixTree, key: bytes, start: TreeNode) -> TreeNode:
    """The node ending the longest device-cached prefix of `key` below `start` (whole pages),
    splitting the edge where it ends. Unlike `match`, refreshes no recency or hit count."""
    path, matched = tree.walk(key, start)
    k, dev = device_prefix(tree, path, matched // 4, start)
    if not k:
        return start
    if path[k - 1].end > start.end + dev:
        return tree.split(path[k - 1], start.end + dev - path[k - 1].depth)
    return path[k - 1]
