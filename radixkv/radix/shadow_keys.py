"""ShadowKeys: where the real cache's last match ended, told to a tree's shadows so they share its key objects.

A shadow (radix/shadow.py) keys its edges as the real tree does, int32 token bytes, at every page size, so its
tree has the real cache's shape, splits and matches under its own policy. Where one of its edges spans the same
tokens as a real node's edge, it keeps that node's bytes object itself instead of a copy of its own: a shadow
costs the key bytes the real tree does not hold, not its whole content again. A shadow finds such edges by the
real node where the real cache's match of the same key ended: the adaptive policy tells it (`along`) on every
lookup, the prior's replay (eviction/prior.py) with the real leaf whose path spells the key; a shadow's match
reads it back (`real_end`) for that very key object only. One per tree, shared by its shadows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from radixkv.eviction.view import ShadowKeysView
from radixkv.radix.core import PrefixNode

if TYPE_CHECKING:
    from radixkv.eviction.view import NodeView


class ShadowKeys(ShadowKeysView):
    """The last key a shadow was told about and the real node its real match reached (module docstring)."""

    def __init__(self) -> None:
        self._looked = b""  # token bytes: the last key told (from its root) ...
        self._hit: PrefixNode[Any] | None = None  # ... and a real node on that key's path, where its match ended

    def along(self, key: bytes, node: NodeView) -> None:
        """Real node `node` is where the real cache's match of `key` (token bytes from a root) ended, or a node
        below it on a real path that goes on from there: a shadow's match of this very key object may share the keys of
        node's path. Holds `node` until the next call."""
        self._looked, self._hit = key, cast("PrefixNode[Any]", node)

    def real_end(self, key: bytes) -> PrefixNode[Any] | None:
        """The real node `along` was told for `key` (this very object, the last told), else None. The real
        tree may have changed since: a reader compares what it takes from that node's path."""
        return self._hit if key is self._looked else None
