"""The radix index: one tree core (core.py) serving the index (tree.py: core + pages, locks, pins) and
the shadows learning policies replay into (shadow.py: core + sizes and times); match / insert /
split returning results, lock counts by holder, and the eviction walks that return the pages they let go."""

from radixkv.radix.check import check_tree
from radixkv.radix.evict import Evicted, evict_device, evict_host, evict_secondary
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree
from radixkv.radix.types import SEQUENCE, USER, InsertResult, MatchInfo

__all__ = ["RadixTree", "TreeNode", "MatchInfo", "InsertResult", "USER", "SEQUENCE", "check_tree",
           "evict_device", "evict_host", "evict_secondary", "Evicted"]
