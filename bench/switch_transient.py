"""Where the default policy's loss falls relative to its switches: the lead-in, a switch's transient, steady state.

Round 22 found most of the lag cells' loss is when the evidence arrives, not how it is tested; this measures what
happens after a decision. Each cell of a bench/policy_grid.py grid runs the policy (request by request) beside plain
LRU and LFU, and splits its loss against the better of the two (E, by whole-trace hit rate) over the requests by
phase: `lead-in` (from the first eviction to the first switch the evidence makes: the prior's verdict), `transient`
(from a switch until the real cache has turned over under the new expert: WARMUP, the policy's own reckoning), and
`steady` (after it, to the next switch). Before the first eviction every policy hits alike (no loss).

Each phase's loss is two parts, by an oracle `O` that follows the same decisions but hits, at every request, what
the plain expert it follows then hit (a cache that switched at the same request and started from that expert's own
contents: its shadow's, had the shadow run from the start):

  decision  O - E: following the expert that the trace, from here, does not favour (lag, a wrong prior, a wrong
            switch)
  state     adaptive - O: the real cache holds and orders what the expert it follows would not (contents kept
            from the expert left, LFU's counts rebuilt from the switch; the ghosts', eviction/ghosts.py's, part)

so the state part over `transient` bounds what a better transient (the new expert's keys seeded at the switch) can
win; a positive state part is the real cache beating the plain expert (the ghosts' gain). Cells are classed by the
switches after the lead-in (none, one to E, one from E, two or more); a second table splits each phase by the expert
followed. Points of hit rate, summed over the cells; `share` divides by the grid's cells (the part of the grid's mean
margin). Last, the grid's margins against the best fixed policy (policy_grid.py's) as run, without the transients'
state part, and the oracle's. It reads the policy's state between requests and overrides nothing: compiled or pure,
the same numbers.
bench/RESULTS.md, round 23.

    .venv/bin/python bench/switch_transient.py fit --jobs 2 [--cells]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_grid and switch_features, beside this file

from policy_grid import FIXED, gathered, grid_args, grid_names, held_names, shares  # noqa: E402
from switch_features import per_request  # noqa: E402

from radixkv.bench.runner import replay  # noqa: E402
from radixkv.cli_args import HelpFormatter  # noqa: E402
from radixkv.eviction.adaptive import Adaptive  # noqa: E402

PHASES = ("lead-in", "transient", "steady")
PARTS = ("decision", "state")
EXPERTS = ("lru", "lfu")
PRE, LEAD, TRANSIENT, STEADY = -1, 0, 1, 2  # a request's phase (PRE: before the first eviction)


def observe(policy: Adaptive, prior: list[int]) -> tuple[int, int]:
    """(expert followed, phase) of the policy before a request; `prior` keeps its switch count at the first
    eviction (the prior's switch is not the evidence's)."""
    if policy._tree is None:
        return policy.mode, PRE
    if not prior:
        prior.append(policy.switches)
    if policy.switches == prior[0]:
        return policy.mode, LEAD
    return policy.mode, TRANSIENT if policy.mode in policy._shadows else STEADY


@dataclass
class Row:
    """One cell, decomposed: `loss[phase, part]` and `loss[phase, part, expert followed]` in points; `moves`: the
    expert each switch after the lead-in went to; `better`: E (0: LRU, 1: LFU); `expert`: adaptive - E; `margin`:
    adaptive - the best fixed policy; `pre`: requests before the first eviction."""

    loss: dict[tuple[str, ...], float]
    moves: list[int]
    better: int
    expert: float
    margin: float = 0.0
    pre: int = 0
    cell: str = ""
    share: float = 0.0

    @property
    def kind(self) -> str:
        """Its class by the switches after its lead-in."""
        if not self.moves:
            return "no switch"
        if len(self.moves) > 1:
            return "two or more switches"
        return "one switch, to E" if self.moves[0] == self.better else "one switch, from E"


def decompose(reqs: list, cap: int, page: int) -> Row:
    """One cell: the adaptive policy's hits, the plain experts', the oracle's, and the loss by phase and part."""
    policy, prior, seen = Adaptive(), [], []
    hits = np.array(per_request(reqs, cap, policy, page, lambda: seen.append(observe(policy, prior))))
    experts = [np.array(per_request(reqs, cap, p, page)) for p in EXPERTS]
    mode = np.array([m for m, _ in seen])
    phase = np.array([p for _, p in seen])
    oracle = np.where(mode == 1, experts[1], experts[0])
    better = int(experts[1].sum() > experts[0].sum())
    asked = max(sum(r.prompt_len for r in reqs), 1)
    loss: dict[tuple[str, ...], float] = {}
    for i, name in enumerate(PHASES):
        for m, follows in enumerate(EXPERTS):
            at = (phase == i) & (mode == m)
            loss[name, "decision", follows] = 100 * float((oracle - experts[better])[at].sum()) / asked
            loss[name, "state", follows] = 100 * float((hits - oracle)[at].sum()) / asked
        for q in PARTS:
            loss[name, q] = sum(loss[name, q, follows] for follows in EXPERTS)
    moves = [int(m) for j, m in enumerate(mode[1:]) if m != mode[j] and phase[j] != PRE]
    best = max([float(e.sum()) / asked for e in experts]
               + [replay(reqs, cap, p, page).hit_rate for p in FIXED if p not in EXPERTS])
    return Row(loss, moves, better, 100 * float(hits.sum() - experts[better].sum()) / asked,
               100 * (float(hits.sum()) / asked - best), int((phase == PRE).sum()))


def cell_rows(name: str) -> list[Row]:
    """Every share of one grid entry, decomposed."""
    reqs, page, caps = shares(name)
    return [replace(decompose(reqs, cap, page), cell=name, share=f) for f, cap in caps]


def table(rows: list[Row]) -> list[str]:
    """A line per class: cells, adaptive - E summed, each phase's parts summed, and the grid's share of each."""
    head = [f"{p} {q}" for p in PHASES for q in PARTS]
    lines = ["| class | cells | adaptive - E | " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (1 + len(head))]
    for c in sorted({r.kind for r in rows}) + ["all"]:
        part = [r for r in rows if c in ("all", r.kind)]
        sums = [sum(r.loss[p, q] for r in part) for p in PHASES for q in PARTS]
        lines.append(f"| {c} | {len(part)} | {sum(r.expert for r in part):+.2f} | "
                     + " | ".join(f"{s:+.2f}" for s in sums) + " |")
    n = max(len(rows), 1)
    sums = [sum(r.loss[p, q] for r in rows) / n for p in PHASES for q in PARTS]
    lines.append(f"| share of the mean | | {sum(r.expert for r in rows) / n:+.3f} | "
                 + " | ".join(f"{s:+.3f}" for s in sums) + " |")
    return lines


def by_expert(rows: list[Row]) -> list[str]:
    """A line per phase and expert followed: both parts summed over the cells, and the grid's share of each."""
    n = max(len(rows), 1)
    lines = ["| phase | expert followed | decision | state | decision, share | state, share |",
             "|---|---|---:|---:|---:|---:|"]
    for p in PHASES:
        for e in EXPERTS:
            d, s = (sum(r.loss[p, q, e] for r in rows) for q in PARTS)
            lines.append(f"| {p} | {e} | {d:+.2f} | {s:+.2f} | {d / n:+.3f} | {s / n:+.3f} |")
    return lines


def bounds(rows: list[Row]) -> list[str]:
    """The grid's margins against the best fixed policy (policy_grid.py's summary) as run, with no transient's state
    part (a switch's transient as its plain expert's), and the oracle's (no state part at all)."""
    lines = []
    for label, cut in (("adaptive", ()), ("no transient state", ("transient",)), ("oracle", PHASES)):
        m = np.array([r.margin - sum(r.loss[p, "state"] for p in cut) for r in rows])
        lines.append(f"{label}: worst {m.min():+.2f}, mean {m.mean():+.3f}, below -0.5: {int((m < -0.5).sum())}, "
                     f"below -1: {int((m < -1).sum())}")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    grid_args(ap)
    ap.add_argument("--trace", action="append", default=[], metavar="FILE:PAGE", help="add a trace to the held grid")
    ap.add_argument("--cells", action="store_true", help="print every cell's parts")
    a = ap.parse_args(argv)
    rows = gathered(cell_rows, grid_names(a.grid, held_names(a.trace), a.only), a.jobs, lambda r: (r.cell, r.share))
    if a.cells:
        print("| cell | share | class | switches to | margin | adaptive - E | "
              + " | ".join(f"{p} {q}" for p in PHASES for q in PARTS) + " |")
        for r in rows:
            parts = " | ".join(f"{r.loss[p, q]:+.2f}" for p in PHASES for q in PARTS)
            print(f"| {r.cell} | {r.share:.0%} | {r.kind} | {r.moves} | {r.margin:+.2f} | {r.expert:+.2f} | {parts} |")
    print("\n".join(table(rows) + [""] + by_expert(rows) + [""] + bounds(rows)))


if __name__ == "__main__":
    main()
