"""The default policy's prior under other rules: each grid cell's verdict, what it replays, and the margins.

    .venv/bin/python bench/policy_grid.py tune --cells --first lru > L.txt    # every cell's margin, each verdict
    .venv/bin/python bench/policy_grid.py tune --cells --first lfu > F.txt
    .venv/bin/python bench/prior_rules.py tune --lru L.txt --lfu F.txt --rules base,round19,0.25/0.5/-/0.5

The prior's verdict (eviction/prior.py) is its only output, so a cell's margin under a rule is the margin of
the run forced to that rule's verdict (policy_grid.py `--first`), one of the two files'. Per cell, the real
cache serves the bench lifecycle up to its first eviction; there each rule judges the history, and its replays'
shadow work is counted: history entries replayed, twice where two shadows run (after a replay's fork). Per rule:
the grid's summary (policy_grid.py's, from the verdicts' margins), the entries replayed summed over the cells,
and every cell whose verdict differs from the first rule's, with both margins. Verdicts are deterministic;
the counts stand in for the replays' instructions (bench/events_instructions.py measures those). A rule is
`base` (the policy's), `round19` (its prior before round 20: 0.25/0.5/0.75/0.5) or
SIZE/FROM/CHECK/Z[/REUSE[/HITS/REPEATS]] (`rule`): a replay at SIZE judged from FROM of the lookups by Z, a veto
replay at CHECK (- for none), no replay where the history's reuse is REUSE or more, nor where HITS or more of its
lookups matched and under REPEATS of the tokens they matched were matched before (`reuse_shape`, round 21's test,
not the policy's). `--cells` prints per cell the history's reuse, its lookups, their hits and repeats, how many
of them differ in the policy's replay (0: its leads are all 0), then each rule's verdict and entries.
bench/RESULTS.md, rounds 19-21, have the rules measured.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_grid, beside this file

from policy_grid import FRACS, each, grid_args, grid_names, held_names, load, summary  # noqa: E402

from radixkv import RadixCache  # noqa: E402
from radixkv.bench.opt import build_segments  # noqa: E402
from radixkv.bench.runner import capacity, sim_config  # noqa: E402
from radixkv.cli_args import HelpFormatter  # noqa: E402
from radixkv.eviction import POLICIES  # noqa: E402
from radixkv.eviction.adaptive import Adaptive  # noqa: E402
from radixkv.eviction.history import History  # noqa: E402
from radixkv.eviction.prior import clear, dense, replay  # noqa: E402
from radixkv.eviction.view import CachedNodeView  # noqa: E402

Replay = Callable[[int], tuple[list[int], list[int], int]]  # a replay at a size (Judged.on_evict's, kept per size)
Judge = Callable[[History, int, Replay], tuple[bool, int]]
Verdicts = dict[tuple[str, float], tuple[dict[str, tuple[bool, int]], tuple[float, ...]]]


K = Adaptive()  # the constants (compiled, they are an instance's fields)
VETO = 2.0  # a veto replay's sd (round 19's PRIOR_VETO)


def work(history: History, fork: int) -> int:
    """History entries a replay runs through its shadows: once before `fork`, twice from it."""
    return fork + 2 * (len(history) - fork)


def reuse(history: History, cap: int) -> float:
    """The share of the tokens the history's inserts held that were cached already (eviction/prior.py), with the
    real cache holding `cap` tokens at its first eviction."""
    return 1.0 - cap / max(history.inserted, 1)


def reuse_shape(history: History) -> tuple[int, float, float]:
    """How the history's lookups reused the cache, read from the real tree's hit counts at the first eviction: (the
    lookups, the share of them that matched a cached token, the share of the tokens they matched that an earlier
    lookup had matched too). Until then each request counted one use of every node on its path, match and insert
    together (radix/core.py count_insert_use), the first the request that made it: a node was matched
    hit_count - 1 times, and a lookup that matched passed one child of its namespace's root. The nodes: the
    history's leaves and their ancestors (none is removed before the first eviction)."""
    seen: set[int] = set()
    lookups = hits = matched = repeated = 0
    for _, item, use in history.entries:
        lookups += use is None
        if isinstance(item, (bytes, int)):
            continue
        node, parent = item, item.parent
        while parent is not None and node.id not in seen:
            seen.add(node.id)
            uses = node.hit_count - 1
            if uses > 0:
                matched += uses * node.size
                repeated += (uses - 1) * node.size
                hits += uses if parent.parent is None else 0
            node, parent = parent, parent.parent
    return lookups, hits / max(lookups, 1), repeated / max(matched, 1)


def rule(spec: str) -> Judge:
    """A rule from SIZE/FROM/CHECK/Z[/REUSE[/HITS/REPEATS]][@K[s]]: eviction/prior.py's with PRIOR_SIZE, PRIOR_FROM,
    Z and PRIOR_REUSE (none: no such test); with HITS and REPEATS also no replay where `reuse_shape` finds HITS or
    more of the lookups hit and under REPEATS of their tokens matched before (round 21's test); and, unless CHECK is
    -, round 19's veto: a second replay, at CHECK x the size, keeps the expert followed where it favours it by VETO
    sd (counted as a replay from the start: round 19's went on from the first one's fork). With @K it leaves only
    where K or more of the judged lookups differ (round 24), with s only where more of them favour leaving than
    not (the switch's sign test). MARGIN is the policy's."""
    spec, _, tail = spec.partition("@")
    least, signed = int(tail.rstrip("s") or 0), tail.endswith("s")
    size, late, check, z, reuse_at, hits_at, repeats_at = (
        float(x) if x != "-" else -1.0 for x in (spec + "/-/-/-").split("/")[:7])

    def judge(history: History, cap: int, run: Replay) -> tuple[bool, int]:
        if 0 <= reuse_at and dense(history, cap, reuse_at):  # as leaves_start: stay, no replay
            return False, 0
        if 0 <= hits_at:  # sessions (round 21's test): no replay
            _, hits, repeats = reuse_shape(history)
            if hits >= hits_at and repeats < repeats_at:
                return False, 0
        leads, asked, fork = run(int(size * cap))
        cost = work(history, fork)
        first = int(late * len(leads))
        judged = leads[first:]
        leaves = (clear(judged, asked[first:], K.MARGIN, z) and sum(x != 0 for x in judged) >= least
                  and (not signed or sum(x > 0 for x in judged) > sum(x < 0 for x in judged)))
        if not leaves or check < 0:
            return leaves, cost
        checks, asked, fork = run(int(check * cap))
        return not clear([-x for x in checks], asked, K.MARGIN, VETO), cost + work(history, fork)
    return judge


NAMED = {"base": f"{K.PRIOR_SIZE}/{K.PRIOR_FROM}/-/{K.Z}/{K.PRIOR_REUSE}",
         "round19": f"{K.PRIOR_SIZE}/{K.PRIOR_FROM}/0.75/{K.Z}"}  # round 19's prior: a veto replay, no reuse test


def named(spec: str) -> str:
    """`spec` with a NAMED rule (before any @K) spelt out."""
    body, at, tail = spec.partition("@")
    return NAMED.get(body, body) + at + tail


class Stop(Exception):
    """The first eviction came: the verdicts are in."""


class Judged(Adaptive):
    """Adaptive that, at the first eviction, judges its history by each of `rules` and stops the run."""

    rules: list[str] = []

    def on_evict(self, victim: CachedNodeView) -> None:
        if self._tree is None:
            history, tree, mode = self._history, victim.tree, self.mode
            if history is None:  # past HISTORY: no prior
                raise Stop({}, (0.0, 0, 0.0, 0.0, 0))
            cap = tree.evictable_size + tree.protected_size
            own, other = self._shadowed[mode], self._shadowed[1 - mode]
            replays: dict[int, tuple[list[int], list[int], int]] = {}

            def run(size: int) -> tuple[list[int], list[int], int]:  # each size replayed once, for every rule
                if size not in replays:
                    replays[size] = replay(tree, history, own, other, size)
                return replays[size]
            differ = sum(x != 0 for x in run(int(K.PRIOR_SIZE * cap))[0])
            raise Stop({r: rule(named(r))(history, cap, run) for r in self.rules},
                       (reuse(history, cap), *reuse_shape(history), differ))
        super().on_evict(victim)


def verdicts(job: tuple[str, list[str]]) -> Verdicts:
    """(cell, share) -> (rule -> (leaves LRU, entries replayed), the history's (reuse, *reuse_shape, the lookups
    whose leads differ in the policy's replay at PRIOR_SIZE, `replay`)); ({}, 0s) where the cell never evicts or
    has no prior."""
    name, rules = job
    Judged.rules = rules
    reqs, page = load(name)
    unique = build_segments(reqs, page).total_pages * page
    longest = max(len(r.tokens) for r in reqs)
    out = {}
    POLICIES["prior-rules"] = Judged
    try:
        for f in FRACS:
            cache = RadixCache(sim_config(capacity(f, unique, longest, page), page, "prior-rules", longest))
            got: tuple[dict[str, tuple[bool, int]], tuple[float, ...]] = ({}, (0.0, 0, 0.0, 0.0, 0))
            try:
                for r in reqs:  # the bench lifecycle (radixkv/bench/runner.py)
                    m = cache.match_prefix(r.tokens[:r.prompt_len])
                    cache.lock(m.node)
                    cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
                    cache.unlock(m.node)
            except Stop as s:
                got = (s.args[0], s.args[1])
            out[(name, f)] = got
    finally:
        del POLICIES["prior-rules"]
    return out


def margins(path: str) -> dict[tuple[str, float], float]:
    """(cell, share) -> margin, from policy_grid.py's `--cells` lines."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.strip().strip("|").split("|")]
            if line.startswith("| ") and len(parts) == 8:
                out[(parts[0], float(parts[1].rstrip("%")) / 100)] = float(parts[7])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    grid_args(ap)
    ap.add_argument("--lru", required=True, help="policy_grid.py GRID --cells --first lru's output")
    ap.add_argument("--lfu", required=True, help="... --first lfu's")
    ap.add_argument("--rules", default="base", help="comma-separated: base, round19 or "
                    "SIZE/FROM/CHECK/Z[/REUSE[/HITS/REPEATS]]; the first is the reference")
    ap.add_argument("--trace", action="append", default=[], metavar="FILE:PAGE", help="add a trace to the held grid")
    ap.add_argument("--cells", action="store_true", help="print every cell's reuse, lookups, hits, repeats and "
                    "differing lookups, verdicts and entries replayed")
    a = ap.parse_args(argv)
    rules = a.rules.split(",")
    for r in rules:
        body, _, tail = r.partition("@")
        fields = NAMED.get(body, body).split("/")
        if len(fields) not in (4, 5, 7) or not all(x == "-" or x.replace(".", "", 1).isdigit() for x in fields) or (
                tail and not tail.rstrip("s").isdigit()):
            ap.error(f"a rule is base, round19 or SIZE/FROM/CHECK/Z[/REUSE[/HITS/REPEATS]], each [@K[s]], not {r}")
    names = grid_names(a.grid, held_names(a.trace), a.only)
    by = {False: margins(a.lru), True: margins(a.lfu)}
    got: Verdicts = {}
    for r in each(verdicts, [(n, rules) for n in names], a.jobs):
        got.update(r)
    cells = [(n, f) for n in names for f in FRACS]
    verdict = {c: [got[c][0].get(r, (False, 0)) for r in rules] for c in cells}  # (no prior: START, LRU)
    for c in cells if a.cells else []:
        print(f"| {c[0]} | {c[1]:.0%} | " + " | ".join(f"{x:.3f}" if isinstance(x, float) else f"{x}"
                                                  for x in got[c][1]) + " | "
              + " | ".join(f"{'LFU' if v else 'LRU'} {e:,}" for v, e in verdict[c]) + " |")
    for i, r in enumerate(rules):
        rows = [(n, f, by[verdict[(n, f)][i][0]][(n, f)]) for n, f in cells]
        print(summary(r, rows) + f", entries replayed {sum(verdict[c][i][1] for c in cells):,}")
        for n, f in cells:
            ref, mine = verdict[(n, f)][0][0], verdict[(n, f)][i][0]
            if mine != ref:
                print(f"  {n} {f:.0%}: {'LFU' if mine else 'LRU'}, margin {by[ref][(n, f)]:+.2f} -> "
                      f"{by[mine][(n, f)]:+.2f}")


if __name__ == "__main__":
    main()
