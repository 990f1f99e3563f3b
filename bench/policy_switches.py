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

Needs the pure-Python core: it wraps the Adaptive class's methods, which a compiled class ignores.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_grid, beside this file

from policy_grid import FIXED, load  # noqa: E402

from radixkv import COMPILED_CORE  # noqa: E402
from radixkv.bench.opt import build_segments  # noqa: E402
from radixkv.bench.runner import capacity, replay  # noqa: E402
from radixkv.cli_args import HelpFormatter  # noqa: E402
from radixkv.eviction.adaptive import Adaptive  # noqa: E402


class Traced(Adaptive):
    """Adaptive, recording its first eviction and its switches against a request counter."""

    def __init__(self, lfu_from: int = 0) -> None:
        super().__init__()
        self.lfu_from = lfu_from  # > 0: LRU until this request, then LFU (no other decision)
        if lfu_from:
            self._history = None  # no prior: LRU at the first eviction
        self.request = 0
        self.off = 0  # lookups with the other expert's shadow stopped
        self.log: list[str] = []

    def on_evict(self, victim) -> None:  # noqa: ANN001 - a CachedNodeView
        first, mode = self._tree is None, self.mode
        super().on_evict(victim)
        if first:
            self.log.append(f"first eviction at request {self.request}: the prior follows {self.leader}"
                            + (" (switched)" if self.mode != mode else ""))

    def on_lookup(self, start, key: bytes, length: int) -> None:  # noqa: ANN001
        if self.lfu_from:
            if self.request >= self.lfu_from and self.mode == 0 and self._shadows:
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


def trace(cell: str, lfu_from: int = 0) -> str:
    name, _, frac = cell.rpartition("@")
    reqs, page = load(name)
    unique = build_segments(reqs, page).total_pages * page
    cap = capacity(float(frac), unique, max(len(r.tokens) for r in reqs), page)
    policy = Traced(lfu_from)
    from radixkv.eviction import POLICIES
    POLICIES["traced"] = lambda: policy
    try:
        hit = replay(reqs, cap, "traced", page, on_request=lambda: setattr(policy, "request", policy.request + 1))
    finally:
        del POLICIES["traced"]
    fixed = {p: replay(reqs, cap, p, page).hit_rate for p in FIXED}
    lines = [f"{cell}: {len(reqs)} requests, capacity {cap}, adaptive {hit.hit_rate:.4f} ("
             + ", ".join(f"{p} {h:.4f}" for p, h in fixed.items())
             + f"), margin {100 * (hit.hit_rate - max(fixed.values())):+.2f}, shadow stopped for "
             + f"{policy.off} of {len(reqs)} lookups"]
    return "\n".join(lines + [f"  {line}" for line in policy.log])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("cells", nargs="+", metavar="NAME@SHARE", help="e.g. wl:chat:1:0@0.25, moon:1@0.05")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override an Adaptive constant")
    ap.add_argument("--lfu-from", type=int, default=0, metavar="R",
                    help="LRU until request R, then LFU (module docstring)")
    a = ap.parse_args(argv)
    if COMPILED_CORE:
        ap.error("needs the pure-Python core: run with RADIXKV_PURE_PYTHON=1")
    for k, _, v in (s.partition("=") for s in a.set):
        if not k.isupper() or not hasattr(Adaptive, k):
            ap.error(f"Adaptive has no constant {k}")
        setattr(Adaptive, k, ast.literal_eval(v))
    for cell in a.cells:
        print(trace(cell, a.lfu_from), flush=True)


if __name__ == "__main__":
    main()
