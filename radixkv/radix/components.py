"""Secondary layer-group components of the index's nodes (radix/node.py has the interface).

Part of the radix index (only radix/ writes nodes). `groups` is the tree's `group_index`: entry
g - 1 holds, in policy order, every node with a group-g component; evict_secondary (radix/evict.py)
pops from it. Full KV (group 0) is a node's `pages` and never goes through here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from radixkv.errors import InvalidSlotsError

if TYPE_CHECKING:
    from radixkv.eviction import EvictableIndex
    from radixkv.radix.node import TreeNode


def set_component(groups: tuple[EvictableIndex, ...], node: TreeNode, group: int, pages: np.ndarray) -> None:
    """Give device node `node` group `group`'s (>= 1) pages (int64, the caller's; kept as given)."""
    if (not 1 <= group <= len(groups) or node.parent is None or node.pages is None
            or node.secondary[group - 1] is not None):
        raise InvalidSlotsError(f"set_component: {node} cannot take a component of group {group} "
                                f"(groups 1..{len(groups)}, device nodes with a tombstone there)")
    if not isinstance(pages, np.ndarray) or pages.dtype != np.int64 or pages.ndim != 1 or not len(pages):
        raise InvalidSlotsError("set_component: pages must be a non-empty 1-D int64 array")
    node.secondary[group - 1] = pages
    groups[group - 1].add(node)
    if node.tree.listener is not None:  # KV events of the group (radixkv/events/groups.py)
        node.tree.listener.attached(node, group)


def drop_component(groups: tuple[EvictableIndex, ...], node: TreeNode, group: int) -> np.ndarray | None:
    """Tombstone `node`'s group `group` component; returns its pages (None if it had none)."""
    pages = node.secondary[group - 1]
    if pages is not None:
        node.secondary[group - 1] = None
        groups[group - 1].discard(node)
        if node.tree.listener is not None:
            node.tree.listener.detached(node, group)
    return pages


def split_components(groups: tuple[EvictableIndex, ...], upper: TreeNode, lower: TreeNode, kp: int,
                     page_size: int) -> None:
    """`lower` was cut after kp pages below a new `upper`: per-page components (sliding-window KV)
    are cut there too; a one-slot state snapshot stays with `lower` (it is the state after the
    edge's last token) and `upper` gets a tombstone."""
    upper.secondary = [None] * len(groups)
    for g, pages in enumerate(lower.secondary):
        if pages is not None and len(pages) == lower.size // page_size + kp:
            upper.secondary[g], lower.secondary[g] = pages[:kp].copy(), pages[kp:].copy()
            groups[g].add(upper)
