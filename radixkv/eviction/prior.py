"""The default policy's prior: which expert to follow first, chosen once, at the first eviction.

Where the traffic reuses most of what it caches within one cache size, the policy keeps the expert it
follows (START: LRU) with no replay: when the inserts' keys held at least 1 / (1 - PRIOR_REUSE) tokens for
each token the real cache holds at its first eviction (their reuse, the share already cached, PRIOR_REUSE or
more). Reuse that dense is sessions (chat, agents, tool calls, the random traces' conversations), which
recency serves at the real size, while the small replays below, where it no longer fits, favour LFU more
often than the real size bears out. LFU's clear wins on the tune grid (RAG and Mooncake-shaped traffic) reuse
less: 0.24-0.49 (bench/RESULTS.md, round 20, has the rule scored on the four grids, fit on tune and bench).

Otherwise: before the first eviction both experts hold exactly what the real cache holds, so no shadow runs;
that traffic is kept (eviction/history.py) and, at the first eviction, replayed through both experts
in caches of PRIOR_SIZE x the real size, where they already differ. The policy leaves the expert it
follows only on the evidence it would switch on (MARGIN and Z) from the later lookups (PRIOR_FROM: the
small caches warm), and only if a second replay, at PRIOR_CHECK x the size, does not favour the
followed expert by PRIOR_VETO standard deviations: the whole history's lead at one small size, MARGIN
alone, followed LFU where LRU won at the real size (bench/RESULTS.md, round 9). The constants are the
policy's (eviction/adaptive.py), so a subclass tunes them in one place.

The replays are most of the prior's cost, so the second is made only when the first says to leave; a replay
runs one shadow for both experts until its caches could first evict (they hold the same until then), then forks
it, and the second goes on from a copy of the first's one shadow where that one forked. Its size, PRIOR_CHECK
0.75 (0.5 until round 18), vetoes the same grid cells as 0.5 did (one of 584: bench/RESULTS.md, round 18); a
cache of 0.75 first evicts once three quarters of the history's new tokens are in.
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
    PRIOR_CHECK: float
    PRIOR_VETO: float
    PRIOR_REUSE: float
    MARGIN: float
    Z: float


def leaves_start(rule: Rule, tree: TreeView, history: History, own: EvictionPolicy, other: EvictionPolicy,
                 capacity: int) -> bool:
    """Whether the history, replayed in small caches, says to follow `other` instead of `own` (the
    expert followed now): the test of the module docstring, with `rule`'s constants."""
    if capacity <= (1.0 - rule.PRIOR_REUSE) * history.inserted:  # dense reuse: stay, no replay
        return False
    resume = rule.PRIOR_CHECK >= rule.PRIOR_SIZE  # the second replay goes on from where the first forked
    leads, asked, fork = replay(tree, history, own, other, int(rule.PRIOR_SIZE * capacity), None, resume)
    first = int(rule.PRIOR_FROM * len(leads))
    if not clear(leads[first:], asked[first:], rule.MARGIN, rule.Z):
        return False
    checks, asked, _ = replay(tree, history, own, other, int(rule.PRIOR_CHECK * capacity), fork, False)
    return not clear([-x for x in checks], asked, rule.MARGIN, rule.PRIOR_VETO)  # the veto: own leads by VETO sd


def clear(leads: list[int], asked: list[int], margin: float, z: float) -> bool:
    """Whether a replay's per-lookup leads favour the other expert: their sum above `margin` of the tokens asked
    and above `z` standard deviations (the sum's square above z^2 x the sum of their squares)."""
    lead = sum(leads)
    return lead > margin * sum(asked) and lead * lead > z * z * sum(x * x for x in leads)


class Fork:
    """Where a replay's one shadow forked: a copy of it then, the history entry (an insert) it forked before, the
    tokens it held and the tokens asked by the lookups before that entry (their leads were 0)."""

    def __init__(self, shadow: ShadowView, entry: int, held: int, asked: list[int]) -> None:
        self.shadow, self.entry, self.held, self.asked = shadow, entry, held, asked


def replay(tree: TreeView, history: History, own: EvictionPolicy, other: EvictionPolicy, size: int,
           start: Fork | None = None, keep: bool = False) -> tuple[list[int], list[int], Fork | None]:
    """Per lookup of the history replayed through both experts in shadows of `size` tokens: `other`'s
    match minus `own`'s, and the tokens asked. Until a shadow of `size` could first evict, both experts hold
    the same (their leads are 0): one shadow runs for both, under the expert that counts insert uses if one
    does (the other's key reads no hit counts: policies.py), and is forked for the other before that insert.
    `start`: go on from another replay's fork (at a size no larger, so this one's leads were 0 up to there too);
    `keep`: also return this one's (a copy), else None."""
    keys = tree.shadow_keys
    first = other if other.insert_is_use else own
    if start is None:
        one, i, held, asked = tree.shadow(first), -1, 0, []
    else:
        one, i, held, asked = start.shadow, start.entry - 1, start.held, list(start.asked)
    leads = [0] * len(asked)
    mine = theirs = one
    alone: ShadowView | None = one
    kept: Fork | None = None
    for ns, key, end, use, leaf in history.replay(i + 1):  # leaf: a real one whose key objects the shadows may share
        i += 1
        if use is not None:
            tail = leaf.key if leaf is not None else None
            if alone is not None:
                if held + len(key) // 4 <= size:  # (no eviction: at most the key is new)
                    held += alone.insert(ns, key, size, use, tail)
                    continue
                if keep:
                    kept = Fork(alone.fork(first), i, held, list(asked))
                twin = alone.fork(own if first is other else other)
                mine, theirs = (twin, alone) if first is other else (alone, twin)
                alone = None
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
    return leads, asked, kept
