"""The default policy's prior: which expert to follow first, chosen once, at the first eviction.

Where the traffic reuses most of what it caches within one cache size, the policy keeps the expert it
follows (START: LRU) with no replay: when the inserts' keys held at least 1 / (1 - PRIOR_REUSE) tokens for
each token the real cache holds at its first eviction (their reuse, the share already cached, PRIOR_REUSE or
more). Reuse that dense is sessions (chat, agents, tool calls, the random traces' conversations), which
recency serves at the real size, while the small replay below, where it no longer fits, favours LFU more
often than the real size bears out. The tune grid's clear LFU wins where a replay finds a lead (RAG and
Mooncake-shaped traffic) reuse 0.24-0.49 (bench/RESULTS.md, round 20: the rule fit on tune and bench, scored on
all four grids).

Otherwise: before the first eviction both experts hold exactly what the real cache holds, so no shadow runs;
that traffic is kept (eviction/history.py) and, at the first eviction, replayed through both experts
in caches of PRIOR_SIZE x the real size, where they already differ. The policy leaves the expert it
follows only on the evidence it would switch on (MARGIN and Z) from the later lookups (PRIOR_FROM: the
small caches warm): the whole history's lead at one small size, MARGIN alone, followed LFU where LRU won at
the real size (bench/RESULTS.md, round 9). The constants are the policy's (eviction/adaptive.py), so a
subclass tunes them in one place.

The replay is most of the prior's cost: it runs one shadow for both experts until its caches could first evict
(they hold the same until then), then forks it. Until round 19 a second replay, at 0.75 x the size, could veto
leaving where it favoured the followed expert by 2 sd; behind the reuse test it changes no verdict of the 608
grid cells (bench/RESULTS.md, round 20), so it is gone (bench/prior_rules.py still scores such rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from radixkv.eviction.history import History
    from radixkv.eviction.policies import EvictionPolicy
    from radixkv.eviction.view import ShadowView, TreeView


class Rule(Protocol):
    """The constants the prior reads (eviction/adaptive.py's, where they are explained)."""

    PRIOR_SIZE: float
    PRIOR_FROM: float
    PRIOR_REUSE: float
    MARGIN: float
    Z: float


def leaves_start(rule: Rule, tree: TreeView, history: History, own: EvictionPolicy, other: EvictionPolicy,
                 capacity: int) -> bool:
    """Whether the history says to follow `other` instead of `own` (the expert followed now): the test of the
    module docstring, with `rule`'s constants; `capacity`: the tokens the real cache holds."""
    if dense(history, capacity, rule.PRIOR_REUSE):  # stay, no replay
        return False
    leads, asked, _ = replay(tree, history, own, other, int(rule.PRIOR_SIZE * capacity))
    first = int(rule.PRIOR_FROM * len(leads))
    return clear(leads[first:], asked[first:], rule.MARGIN, rule.Z)


def dense(history: History, capacity: int, reuse: float) -> bool:
    """Whether the history's inserts held at least 1 / (1 - `reuse`) tokens for each of the `capacity` the real
    cache holds: their reuse, the share of those tokens cached already, is `reuse` or more (the module docstring)."""
    return capacity <= (1.0 - reuse) * history.inserted


def clear(leads: list[int], asked: list[int], margin: float, z: float) -> bool:
    """Whether a replay's per-lookup leads favour the other expert: their sum above `margin` of the tokens asked
    and above `z` standard deviations (the sum's square above z^2 x the sum of their squares)."""
    lead = sum(leads)
    return lead > margin * sum(asked) and lead * lead > z * z * sum(x * x for x in leads)


def replay(tree: TreeView, history: History, own: EvictionPolicy, other: EvictionPolicy,
           size: int) -> tuple[list[int], list[int], int]:
    """Per lookup of the history replayed through both experts in shadows of `size` tokens: `other`'s
    match minus `own`'s, and the tokens asked; and the history entry (an insert) before which it forked, or the
    history's length. Until a shadow of `size` could first evict, both experts hold the same (their leads are
    0): one shadow runs for both, under the expert that counts insert uses if one does (the other's key reads no
    hit counts: policies.py), and is forked for the other before that insert."""
    keys = tree.shadow_keys
    first = other if other.insert_is_use else own
    one = tree.shadow(first)
    held, forked = 0, len(history)
    leads: list[int] = []
    asked: list[int] = []
    mine = theirs = one
    alone: ShadowView | None = one
    for i, (ns, key, end, use, leaf) in enumerate(history.replay()):  # leaf: whose key objects the shadows share
        if use is not None:
            tail = leaf.key if leaf is not None else None
            if alone is not None:
                if held + len(key) // 4 <= size:  # (no eviction: at most the key is new)
                    held += alone.insert(ns, key, size, use, tail)
                    continue
                twin = alone.fork(own if first is other else other)
                mine, theirs = (twin, alone) if first is other else (alone, twin)
                alone, forked = None, i
            mine.insert(ns, key, size, use, tail)
            theirs.insert(ns, key, size, use, tail)
            continue
        if leaf is not None:
            keys.along(key, leaf)
        asked.append(end // 4)
        if alone is not None:
            alone.match(ns, key, end)
            leads.append(0)
        else:
            leads.append(theirs.match(ns, key, end) - mine.match(ns, key, end))
    return leads, asked, forked
