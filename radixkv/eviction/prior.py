"""The default policy's prior: which expert to follow first, chosen once, at the first eviction.

Where the traffic reuses most of what it caches within one cache size, the policy keeps the expert it
follows (START: LRU) with no replay: when the inserts' keys held at least 1 / (1 - PRIOR_REUSE) tokens for
each token the real cache holds at its first eviction (their reuse, the share already cached, PRIOR_REUSE or
more). Reuse that dense is sessions (chat, agents, tool calls, the random traces' conversations), which
recency serves at the real size, while the small replay below, where it no longer fits, favours LFU more
often than the real size bears out. The tune grid's clear LFU wins where a replay finds a lead (RAG and
Mooncake-shaped traffic) reuse 0.24-0.49 (bench/RESULTS.md, round 20: the rule fit on tune and bench, scored on
all four grids).

It keeps START with no replay too where the reuse is by sessions, not by frequency: where at least PRIOR_HITS of
the lookups before the first eviction matched a cached token but under PRIOR_REPEATS of the tokens they matched
had been matched before (`reuse_shape`: most requests go on from an earlier one, each token reused once or twice,
as conversations and a long document's questions do). The small replay, where those sessions no longer fit,
favours LFU; recency serves them at the real size (bench/RESULTS.md, round 21: longchat, longdoc and chat traces
on a fit grid of fresh random traces). Frequency-shaped reuse (a few documents or prompts matched by many
requests: RAG's, 0.7-0.9 repeats) or rare hits (shared prompts of many groups, shuffled) still replay.

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

from typing import TYPE_CHECKING, Protocol, cast

from radixkv.eviction.view import NodeFields

if TYPE_CHECKING:
    from radixkv.eviction.history import History
    from radixkv.eviction.policies import EvictionPolicy
    from radixkv.eviction.view import ShadowView, TreeView


class Rule(Protocol):
    """The constants the prior reads (eviction/adaptive.py's, where they are explained)."""

    PRIOR_SIZE: float
    PRIOR_FROM: float
    PRIOR_REUSE: float
    PRIOR_HITS: float
    PRIOR_REPEATS: float
    MARGIN: float
    Z: float


def leaves_start(rule: Rule, tree: TreeView, history: History, own: EvictionPolicy, other: EvictionPolicy,
                 capacity: int) -> bool:
    """Whether the history says to follow `other` instead of `own` (the expert followed now): the test of the
    module docstring, with `rule`'s constants; `capacity`: the tokens the real cache holds."""
    if dense(history, capacity, rule.PRIOR_REUSE):  # stay, no replay
        return False
    hits, repeats = reuse_shape(history)
    if hits >= rule.PRIOR_HITS and repeats < rule.PRIOR_REPEATS:  # sessions: stay, no replay
        return False
    leads, asked, _ = replay(tree, history, own, other, int(rule.PRIOR_SIZE * capacity))
    first = int(rule.PRIOR_FROM * len(leads))
    return clear(leads[first:], asked[first:], rule.MARGIN, rule.Z)


def dense(history: History, capacity: int, reuse: float) -> bool:
    """Whether the history's inserts held at least 1 / (1 - `reuse`) tokens for each of the `capacity` the real
    cache holds: their reuse, the share of those tokens cached already, is `reuse` or more (the module docstring)."""
    return capacity <= (1.0 - reuse) * history.inserted


def reuse_shape(history: History) -> tuple[float, float]:
    """How the history's lookups reused the cache, read from the real tree's hit counts at the first eviction: (the
    share of the lookups that matched a cached token, the share of the tokens they matched that an earlier lookup
    had matched too). Until then each request counted one use of every node on its path, match and insert
    together (radix/core.py count_insert_use), the first the request that made it: a node was matched
    hit_count - 1 times, and a lookup that matched passed one child of its namespace's root. The nodes: the
    history's leaves and their ancestors (O(nodes), once; none removed before the first eviction)."""
    seen: set[int] = set()
    hits = matched = repeated = 0
    for _, item, _ in history.entries:
        if isinstance(item, (bytes, int)):
            continue
        node = cast(NodeFields, item)  # (its fields read natively, compiled: eviction/view.py)
        parent = node.parent
        while parent is not None and node.id not in seen:
            seen.add(node.id)
            uses = node.hit_count - 1
            if uses > 0:
                matched += uses * node.size
                repeated += (uses - 1) * node.size
                if parent.parent is None:
                    hits += uses
            node, parent = parent, parent.parent
    return hits / max(history.lookups, 1), repeated / max(matched, 1)


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
