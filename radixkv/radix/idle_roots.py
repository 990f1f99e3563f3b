"""IdleRoots: namespace roots with no children and no locks, kept while anyone else holds them.

A caller may hold an idle root (a match that found nothing returns it) and use it later (lock it,
open a Sequence on it); it must still be the namespace's root then, so the tree keeps it. A root
nobody holds is dropped, or memory would grow with every namespace ever seen. A
WeakValueDictionary did this, but nodes compiled by mypyc (radixkv/build.py) take no weak
references; so roots are kept strongly and the ones only this table references are dropped
lazily, when the table has doubled since the last sweep (amortized O(1) per root).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from radixkv.radix.node import TreeNode


def _refs(table: Mapping[bytes, object], key: bytes) -> int:
    """The reference count of `table[key]`. Both the baseline and the sweep read it through this one
    function, so they count the same temporaries, interpreted or compiled."""
    return sys.getrefcount(table[key])


def _refs_when_unheld() -> int:
    """What `_refs` reads for a value only its table holds."""
    return _refs({b"": object()}, b"")


class IdleRoots:
    def __init__(self) -> None:
        self._roots: dict[bytes, TreeNode] = {}  # namespace key -> idle root
        self._kept = 0  # roots left by the last sweep
        self._unheld = _refs_when_unheld()

    def __len__(self) -> int:
        return len(self._roots)

    def get(self, ns: bytes) -> TreeNode | None:
        return self._roots.get(ns)

    def put(self, ns: bytes, root: TreeNode) -> None:
        self._roots[ns] = root
        if len(self._roots) > 2 * self._kept + 64:
            self.sweep()

    def pop(self, ns: bytes) -> None:
        self._roots.pop(ns, None)

    def sweep(self) -> None:
        """Drop every root that only this table references."""
        table, unheld = self._roots, self._unheld
        for ns in [ns for ns in table if _refs(table, ns) <= unheld]:
            del table[ns]
        self._kept = len(table)
