"""Promotion from the host tier: the host-only continuation of a match comes back to the device.

RadixCache.open calls `promote` when a match reports `host_length > 0`: fresh device pages are
taken (evicting as needed, the device prefix locked meanwhile), the host copy is copied into them
(host_tier.py) and the tree takes them as the device copy of those nodes. When the device cannot
make room, the match stays the device part alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from radixkv.errors import OutOfSlotsError
from radixkv.pools import CACHED, PRIVATE, PageLedger
from radixkv.radix import USER, MatchInfo, RadixTree, locks, lookup
from radixkv.runs import runs_of

if TYPE_CHECKING:
    from radixkv.host_tier import HostTier


def promote(tree: RadixTree, ledger: PageLedger, host: HostTier, take: Callable[[int, int], np.ndarray],
            toks: np.ndarray, m: MatchInfo) -> MatchInfo:
    """Copy the host-only continuation of match `m` of `toks` into fresh device pages (`take(k,
    state)` pops them, evicting) and hand them to the tree; returns the longer match."""
    ps, base = tree.page_size, m.length
    locks.lock(tree, m.node, USER)  # the device prefix must survive the allocation
    try:
        pages = take(m.host_length // ps, PRIVATE)
    except OutOfSlotsError:
        locks.unlock(tree, m.node, USER)
        return m
    key = toks[base:base + m.host_length].tobytes()
    host_pages = lookup.host_pages_below(tree, key, m.node)  # making room may have dropped some
    avail = len(host_pages)
    ledger.release(pages[avail:])
    host.promote(host_pages, pages[:avail])
    result = tree.insert(key[:avail * ps * 4], pages[:avail], m.node)
    ledger.move(pages[:avail], CACHED)
    locks.unlock(tree, m.node, USER)
    return MatchInfo(result.node, base + avail * ps, m.runs + runs_of(pages[:avail]),
                     m.host_length - avail * ps)
