"""The radix index: nodes, match / insert / split / evict returning results, lock counts by holder."""

from radixkv.radix.check import check_tree
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import SEQUENCE, USER, InsertResult, MatchInfo, RadixTree

__all__ = ["RadixTree", "TreeNode", "MatchInfo", "InsertResult", "USER", "SEQUENCE", "check_tree"]
