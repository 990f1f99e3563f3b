"""The radix tree: nodes, match / insert / split, lock counts, eviction of leaves, checks."""

from radixkv.radix.check import check_tree
from radixkv.radix.node import TreeNode
from radixkv.radix.tree import RadixTree

__all__ = ["RadixTree", "TreeNode", "check_tree"]
