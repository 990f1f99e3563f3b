"""Where the default policy's margin is lost: its decisions on one grid cell, request by request.

For each cell (a bench/policy_grid.py entry at a share of its unique tokens) this prints the request
at which the real cache first evicted (and how many history entries the prior replayed then), and every
switch: the request, the expert followed from then on, and the evidence it acted on (decayed lead in
tokens, tokens asked, and the sign count: lookups where the other expert matched more minus those
where it matched less, out of the lookups where they differed), and when ghost counts go off (the
plain-LFU twin's lead since the switch to LFU: eviction/adaptive.py). With the fixed policies' hit rates
beside it, this says whether a cell lost to lag, a wrong prior or a round trip (bench/RESULTS.md).

    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/policy_switches.py wl:chat:1:0@0.25 seed:2012@0.5 \\
        [--set NAME=VALUE]

`--lfu-from R` replaces the policy's decisions by one switch: LRU until request R, LFU from then on
(no prior, no switch on evidence). With R the request of a cell's first switch to LFU, its hit rate
against LFU's says what the switch itself costs, apart from deciding when (bench/RESULTS.md, round 7).
`--lru-from R` is the other order: LFU from the first eviction (the prior's LFU verdict, forced), LRU from R.

`--scan N` is a switch-time oracle: per cell, both orders with R at N requests evenly spaced from the first
eviction to the end, and each order never switching (its first expert forced, no decision at all); it prints the
best fixed policy, each order's best R and margin against it, and the best of all (one switch at the best
request). A cell no one-switch schedule brings within a margin needs more than when to switch: round trips, or
contents neither expert keeps (bench/RESULTS.md, round 26). The runs go to `--jobs` processes.

Needs the pure-Python core: it wraps the Adaptive class's methods, which a compiled class ignores (`--scan`
runs on either: a forced schedule overrides only the hooks the tree calls).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_grid, beside this file

from policy_grid import FIXED, each, load  # noqa: E402

from radixkv import COMPILED_CORE  # noqa: E402
from radixkv.bench.opt import build_segments  # noqa: E402
from radixkv.bench.runner import capacity, replay  # noqa: E402
from radixkv.cli_args import HelpFormatter  # noqa: E402
from radixkv.eviction.adaptive import Adaptive  # noqa: E402


class Traced(Adaptive):
    """Adaptive, recording its first eviction and its switches against a request counter."""

    def __init__(self, at: int = 0, first: int = 0) -> None:
        super().__init__()
        self.at, self.first = at, first  # at > 0: `first` (0 LRU, 1 LFU) until request `at`, then the other
        if at:  # (no other decision)
            self._history = None  # no prior: `first` at the first eviction
        self.request = 0
        self.start = 0  # the request of the first eviction
        self.off = 0  # lookups with the other expert's shadow stopped
        self.log: list[str] = []

    def on_evict(self, victim) -> None:  # noqa: ANN001 - a CachedNodeView
        first, mode = self._tree is None, self.mode
        if first and self.at and mode != self.first:
            self._follow(self.first)
        super().on_evict(victim)
        if first:
            self.start = self.request
            self.log.append(f"first eviction at request {self.request}: the prior follows {self.leader}"
                            + (" (switched)" if self.mode != mode else ""))

    def on_lookup(self, start, key: bytes, length: int) -> None:  # noqa: ANN001
        if self.at:
            if self.request >= self.at and self.mode == self.first and self._shadows:
                self._switch()
                self.log.append(f"request {self.request}: -> {self.leader} (forced)")
            return
        switches = self.switches
        self.off += self._tree is not None and not self._shadows
        super().on_lookup(start, key, length)
        if self.switches != switches:  # the evidence it switched on, flipped by the switch
            ev = self._long
            self.log.append(f"request {self.request}: -> {self.leader}, lead {-ev.lead:.0f} of {ev.asked:.0f} "
                            f"asked, sign {-ev.sign:+.1f} of {ev.count:.1f}")

    def on_cache(self, start, key: bytes, cached: int, use: bool) -> None:  # noqa: ANN001
        ghosts, twin, on = self._ghosts.active, self._twin, bool(self._shadows)
        super().on_cache(start, key, cached, use)
        if self._tree is not None and on != bool(self._shadows):
            self.log.append(f"request {self.request}: shadow " + ("restarted" if self._shadows else
                            f"stopped, lead {self._long.lead:.0f} of {self._long.asked:.0f} asked"))
        if ghosts and not self._ghosts.active:
            self.log.append(f"request {self.request}: ghost counts off" + (
                f" (the plain-LFU twin's lead since the switch: {self._twin_lead} tokens)" if twin else ""))


def cell_of(cell: str) -> tuple[list, int, int]:
    """NAME@SHARE's requests, page size and capacity."""
    name, _, frac = cell.rpartition("@")
    reqs, page = load(name)
    unique = build_segments(reqs, page).total_pages * page
    return reqs, page, capacity(float(frac), unique, max(len(r.tokens) for r in reqs), page)


def traced(reqs: list, cap: int, page: int, policy: Traced) -> float:
    """`policy`'s hit rate on the cell, its request counter kept."""
    from radixkv.eviction import POLICIES
    POLICIES["traced"] = lambda: policy
    try:
        return replay(reqs, cap, "traced", page,
                      on_request=lambda: setattr(policy, "request", policy.request + 1)).hit_rate
    finally:
        del POLICIES["traced"]


def trace(cell: str, at: int = 0, first: int = 0) -> str:
    reqs, page, cap = cell_of(cell)
    policy = Traced(at, first)
    hit = traced(reqs, cap, page, policy)
    fixed = {p: replay(reqs, cap, p, page).hit_rate for p in FIXED}
    lines = [f"{cell}: {len(reqs)} requests, capacity {cap}, adaptive {hit:.4f} ("
             + ", ".join(f"{p} {h:.4f}" for p, h in fixed.items())
             + f"), margin {100 * (hit - max(fixed.values())):+.2f}, shadow stopped for "
             + f"{policy.off} of {len(reqs)} lookups"]
    return "\n".join(lines + [f"  {line}" for line in policy.log])


NEVER = 1 << 40  # a forced schedule's switch past any trace's end: its first expert throughout


def forced(job: tuple[str, int, int]) -> tuple[str, int, int, float, int, int]:
    """(cell, first, at, hit rate, first eviction's request, requests) of one forced schedule (`Traced`)."""
    cell, first, at = job
    reqs, page, cap = cell_of(cell)
    policy = Traced(at, first)
    return cell, first, at, traced(reqs, cap, page, policy), policy.start, len(reqs)


def fixed_rates(cell: str) -> tuple[str, dict[str, float]]:
    reqs, page, cap = cell_of(cell)
    return cell, {p: replay(reqs, cap, p, page).hit_rate for p in FIXED}


def scan(cells: list[str], n: int, jobs: int, fixed: dict[str, dict[str, float]]) -> list[str]:
    """The switch-time oracle's table (module docstring): margins in points against the best fixed policy."""
    fixed = {**fixed, **dict(each(fixed_rates, [c for c in cells if c not in fixed], jobs))}
    never = {(c, f): (h, s, total) for c, f, _, h, s, total in
             each(forced, [(c, f, NEVER) for c in cells for f in (0, 1)], jobs)}
    ats = [(c, f, s + k * (total - s) // n) for (c, f), (_, s, total) in never.items() for k in range(n)]
    best = {(c, f): (h, NEVER) for (c, f), (h, _, _) in never.items()}
    for c, f, at, h, _, _ in sorted(each(forced, ats, jobs)):
        if h > best[c, f][0]:
            best[c, f] = (h, at)
    lines = ["| cell | best fixed | lru - lfu | first eviction | lru only | lru->lfu (at) | lfu only "
             "| lfu->lru (at) | one-switch oracle |", "|---|---|---:|---:|---:|---|---:|---|---:|"]
    for c in cells:
        top = max(fixed[c].values())
        parts = []
        for f in (0, 1):
            h, at = best[c, f]
            parts += [f"{100 * (never[c, f][0] - top):+.2f}",
                      f"{100 * (h - top):+.2f} ({'never' if at == NEVER else at})"]
        oracle = max(best[c, 0][0], best[c, 1][0])
        gap = 100 * (fixed[c]["lru"] - fixed[c]["lfu"])
        lines.append(f"| {c} | {max(FIXED, key=lambda p: fixed[c][p])} | {gap:+.2f} | {never[c, 0][1]} of "
                     f"{never[c, 0][2]} | " + " | ".join(parts) + f" | {100 * (oracle - top):+.2f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("cells", nargs="+", metavar="NAME@SHARE", help="e.g. wl:chat:1:0@0.25, moon:1@0.05")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override an Adaptive constant")
    ap.add_argument("--lfu-from", type=int, default=0, metavar="R",
                    help="LRU until request R, then LFU (module docstring)")
    ap.add_argument("--lru-from", type=int, default=0, metavar="R", help="LFU until request R, then LRU")
    ap.add_argument("--scan", type=int, default=0, metavar="N", help="the switch-time oracle at N requests a cell")
    ap.add_argument("--jobs", type=int, default=1, help="processes (--scan)")
    ap.add_argument("--fixed-cache", help="policy_grid.py's --fixed-cache file: the fixed policies' hit rates")
    a = ap.parse_args(argv)
    if COMPILED_CORE and (a.set or not a.scan):  # (a forced schedule overrides only hooks the tree calls)
        ap.error("needs the pure-Python core: run with RADIXKV_PURE_PYTHON=1")
    for k, _, v in (s.partition("=") for s in a.set):
        if not k.isupper() or not hasattr(Adaptive, k):
            ap.error(f"Adaptive has no constant {k}")
        setattr(Adaptive, k, ast.literal_eval(v))
    if a.scan:
        fixed: dict[str, dict[str, float]] = {}
        if a.fixed_cache:
            with open(a.fixed_cache) as f:
                rates = json.load(f)
            for cell in a.cells:
                name, _, share = cell.rpartition("@")
                if f"{name}|{float(share)}|lru" in rates:
                    fixed[cell] = {p: rates[f"{name}|{float(share)}|{p}"] for p in FIXED}
        print("\n".join(scan(a.cells, a.scan, a.jobs, fixed)))
        return
    for cell in a.cells:
        print(trace(cell, *((a.lru_from, 1) if a.lru_from else (a.lfu_from, 0))), flush=True)


if __name__ == "__main__":
    main()
