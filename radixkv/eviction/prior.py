"""The default policy's prior: which expert to follow first, chosen once, at the first eviction.

Before the first eviction both experts hold exactly what the real cache holds, so no shadow runs;
that traffic is kept (eviction/history.py) and, at the first eviction, replayed through both experts
in caches of PRIOR_SIZE x the real size, where they already differ. The policy leaves the expert it
follows only on the evidence it would switch on (MARGIN and Z) from the later lookups (PRIOR_FROM: the
small caches warm), and only if a second replay, at PRIOR_CHECK x the size, does not favour the
followed expert by PRIOR_VETO standard deviations: the whole history's lead at one small size, MARGIN
alone, followed LFU where LRU won at the real size (bench/RESULTS.md, round 9). The constants are the
policy's (eviction/adaptive.py), so a subclass tunes them in one place; the replays are most of the
prior's cost, so the second is made only when the first says to leave.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from radixkv.eviction.history import History
    from radixkv.eviction.policies import EvictionPolicy
    from radixkv.eviction.view import TreeView


class Rule(Protocol):
    """The constants the prior reads (eviction/adaptive.py's, where they are explained)."""

    PRIOR_SIZE: float
    PRIOR_FROM: float
    PRIOR_CHECK: float
    PRIOR_VETO: float
    MARGIN: float
    Z: float


def leaves_start(rule: Rule, tree: TreeView, history: History, own: EvictionPolicy, other: EvictionPolicy,
                 capacity: int) -> bool:
    """Whether the history, replayed in small caches, says to follow `other` instead of `own` (the
    expert followed now): the test of the module docstring, with `rule`'s constants."""
    leads, asked = replay(tree, history, own, other, int(rule.PRIOR_SIZE * capacity))
    first = int(rule.PRIOR_FROM * len(leads))
    late = leads[first:]
    lead = sum(late)
    if lead <= rule.MARGIN * sum(asked[first:]) or lead * lead <= rule.Z * rule.Z * sum(x * x for x in late):
        return False
    checks, asked = replay(tree, history, own, other, int(rule.PRIOR_CHECK * capacity))
    check = sum(checks)
    return not (-check > rule.MARGIN * sum(asked) and check * check > rule.PRIOR_VETO ** 2 * sum(x * x for x in checks))


def replay(tree: TreeView, history: History, own: EvictionPolicy, other: EvictionPolicy,
           size: int) -> tuple[list[int], list[int]]:
    """Per lookup of the history replayed through both experts in shadows of `size` tokens: `other`'s
    match minus `own`'s, and the tokens asked."""
    mine, theirs, keys = tree.shadow(own), tree.shadow(other), tree.shadow_keys
    leads: list[int] = []
    asked: list[int] = []
    for ns, key, end, use, leaf in history.replay():  # leaf: a real one whose key objects the shadows may share
        if use is not None:
            tail = leaf.key if leaf is not None else None
            mine.insert(ns, key, size, use, tail)
            theirs.insert(ns, key, size, use, tail)
            continue
        if leaf is not None:
            keys.along(key, leaf)
        asked.append(end // 4)
        leads.append(theirs.match(ns, key, end) - mine.match(ns, key, end))
    return leads, asked
