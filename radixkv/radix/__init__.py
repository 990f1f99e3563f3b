"""The radix index: nodes, match / insert / split returning results, lock counts by holder, and the
eviction walks that return the pages they let go."""

from radixkv.radix.check import check_tree
from radixkv.radix.evict import evict_device, evict_host
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree
from radixkv.radix.types import SEQUENCE, USER, InsertResult, MatchInfo

__all__ = ["RadixTree", "TreeNode", "MatchInfo", "InsertResult", "USER", "SEQUENCE", "check_tree",
           "evict_device", "evict_host"]
