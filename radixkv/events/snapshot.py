"""The resync snapshot: every block a cache holds now, as the KV events that would rebuild an index.

AllBlocksCleared, then BlockStored for everything cached now, parents first, each secondary
group's blocks after their node's full KV. A hybrid model first announces its groups: one
BlockStored per group >= 1 with no blocks and the group's fields, so an index knows every group
before any of its blocks (cluster/groups.py). Recorded by a fork of the cache's recorder
(EventRecorder.fork: its digests and multimodal names, every block counted once), never into it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from radixkv.events.records import DEVICE, HOST, AllBlocksCleared, BlockStored, KVEvent

if TYPE_CHECKING:
    from radixkv.events.groups import GroupEvents
    from radixkv.radix.node import TreeNode
    from radixkv.radix.tree import RadixTree


class Recording(Protocol):
    """What the snapshot needs of a fresh EventRecorder (events/recorder.py imports this module)."""

    events: list[KVEvent]
    block_size: int
    fields: list[tuple]
    groups: GroupEvents | None

    def stored(self, node: TreeNode, medium: str) -> None: ...


def snapshot(fresh: Recording, tree: RadixTree) -> list[KVEvent]:
    """The events above, recorded by `fresh` (a fork with nothing recorded yet)."""
    fresh.events = [AllBlocksCleared()]
    fresh.events += [BlockStored([], None, [], fresh.block_size, None, DEVICE, None, None, *f)
                     for f in fresh.fields[1:]]
    for node in tree.nodes():
        if node.parent is not None:
            for medium, resident in ((DEVICE, node.pages is not None), (HOST, node.host_pages is not None)):
                if resident:
                    fresh.stored(node, medium)
            if fresh.groups is not None and node.pages is not None:
                for g, comp in enumerate(node.secondary, 1):
                    if comp is not None:
                        fresh.groups.changed(node, g)
    return fresh.events
