"""The default policy's lead-in: from the first eviction to the first switch, while the prior's pick is followed.

Round 23 (bench/switch_transient.py) put 0.05-0.15 of every grid's mean margin in the lead-in's decision part:
following the prior's expert P where the trace, by whole-trace hit rate, favours the other (E). In the lead-in the
real cache is plain P's request for request and the other expert's shadow is plain P's twin's (a copy taken at the
first eviction, when both hold what the real cache holds), so the policy's per-lookup lead there is exactly plain
E's hits minus plain P's, decayed over WINDOW: what the evidence could say, and when, reads off one run.

Per cell (pure core: it wraps the prior's replay to count the lookups that differ in it) this logs, before each
request, the expert followed and the evidence over WINDOW (lead, its squares, the sign count, the differing lookups,
the tokens asked) with the cache's size and the tokens newly cached, and prints for each cell whose lead-in loses:
the prior's pick and how it was made (`dense`: no replay, the reuse test; `replay k`: a replay in which k lookups
differed), whether it was wrong (P is not E), the lead-in's length in requests and turnovers (tokens newly cached
over the cache's size), its loss (points), the first request (after the first eviction) at which the experts'
matches differed, and the evidence when the lead-in ended (a switch): lead in cache sizes, zeff (lead^2 over the
squares' sum), sign over count. Summed by the prior's pick and how: the cells, those it got wrong, the lead-in's
loss, and the part of it after the first lookup where E matched more (what a switch right after that lookup,
an oracle's, would not have lost). `--tests` names first-switch tests to read off the same evidence: each is the
policy's `_clear` and veto with other constants, MIN_LEAD/UNANIMOUS/Z/VETO (VETO 0: no sign veto), and for each the
cells where it passes before the policy's first switch: with P wrong, the lead-in loss it would end sooner (the
experts' gap from its pass to the switch, an upper bound: a switch still has a transient); with P right (a pass
the policy does not make), the other expert's gap over the next `--horizon` of the requests (a loss).
bench/RESULTS.md, round 24.

    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/switch_leadin.py fit --jobs 2 [--tests 0.02/4/0.5/1]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the scripts it imports, beside it

from policy_grid import gathered, grid_args, grid_names, held_names, shares  # noqa: E402
from switch_features import per_request  # noqa: E402
from switch_transient import LEAD, observe  # noqa: E402

import radixkv.eviction.prior as prior_module  # noqa: E402
from radixkv import COMPILED_CORE  # noqa: E402
from radixkv.cli_args import HelpFormatter  # noqa: E402
from radixkv.eviction.adaptive import Adaptive  # noqa: E402

EVIDENCE = ("lead", "var", "sign", "count", "asked")
BASE = "base"  # the policy's own first-switch test


class Traced(Adaptive):
    """Adaptive counting the tokens newly cached (as its evidence decays by them) and, at the first eviction, how
    its prior decided."""

    def __init__(self) -> None:
        super().__init__()
        self.added = 0
        self.how = ""
        self.after: tuple[float, ...] = (0.0,) * len(EVIDENCE)  # the evidence as the last lookup's test read it

    def on_lookup(self, start, key: bytes, length: int) -> None:  # noqa: ANN001 - a CachedNodeView
        super().on_lookup(start, key, length)
        self.after = tuple(getattr(self._long, x) for x in EVIDENCE)

    def _decay(self, added: int) -> None:
        self.added += added
        super()._decay(added)

    def on_evict(self, victim) -> None:  # noqa: ANN001 - a CachedNodeView
        if self._tree is not None:
            super().on_evict(victim)
            return
        real, seen, had = prior_module.replay, [], self._history is not None

        def counted(*args):  # noqa: ANN002, ANN202 - replay's
            got = real(*args)
            seen.append(sum(1 for x in got[0] if x))
            return got

        prior_module.replay = counted
        try:
            super().on_evict(victim)
        finally:
            prior_module.replay = real
        self.how = f"replay {seen[0]}" if seen else "dense" if had else "no history"


@dataclass
class Cell:
    """One cell's per-request log: `mode` (expert followed), `lead_in` (in the lead-in), the evidence over WINDOW
    (`ev[name]`), `cap`, `added` (cumulative), each expert's hits and the tokens asked; `how`: the prior's."""

    cell: str
    share: float
    how: str
    mode: np.ndarray
    lead_in: np.ndarray
    ev: dict[str, np.ndarray]
    cap: np.ndarray
    added: np.ndarray
    hits: list[np.ndarray]
    asked: np.ndarray
    pre: int

    @property
    def better(self) -> int:
        return int(self.hits[1].sum() > self.hits[0].sum())

    @property
    def prior(self) -> int:
        return int(self.mode[self.pre]) if self.pre < len(self.mode) else 0

    def points(self, at: slice | np.ndarray) -> float:
        """Plain E's hits minus plain P's over `at`, in points of the trace's hit rate."""
        gap = self.hits[1 - self.prior] - self.hits[self.prior]
        return 100 * float(gap[at].sum()) / max(int(self.asked.sum()), 1)


def trace_cell(reqs: list, cap: int, page: int, name: str = "", share: float = 0.0) -> Cell:
    """Run the policy request by request beside plain LRU and LFU, logging what Cell holds."""
    policy, log = Traced(), []
    prior: list[int] = []

    def before() -> None:
        lead_in = observe(policy, prior)[1] == LEAD
        log.append((policy.mode, lead_in, policy._capacity, policy.added) + policy.after)

    per_request(reqs, cap, policy, page, before)
    cols = list(zip(*log))
    lead_in = np.array(cols[1], dtype=bool)
    pre = int(np.argmax(lead_in)) if lead_in.any() else len(reqs)
    return Cell(name, share, policy.how, np.array(cols[0]), lead_in,
                {x: np.array(cols[4 + i], dtype=float) for i, x in enumerate(EVIDENCE)},
                np.array(cols[2], dtype=float), np.array(cols[3], dtype=float),
                [np.array(per_request(reqs, cap, p, page)) for p in ("lru", "lfu")],
                np.array([r.prompt_len for r in reqs]), pre)


def passes(c: Cell, test: tuple[float, float, float, float], k: np.ndarray) -> np.ndarray:
    """Whether the first-switch `test` (MIN_LEAD, UNANIMOUS, Z, VETO) passes on the evidence the lookups of requests
    `k - 1` were tested on (the next request's log holds it)."""
    min_lead, unanimous, z, veto = test
    lead, var, sign, count, asked = (c.ev[x][k] for x in EVIDENCE)
    cap = c.cap[k]
    ok = (lead > Adaptive.MARGIN * asked) & ((lead > min_lead * cap) | ((sign >= count) & (count >= unanimous)))
    ok &= lead * lead > z * z * var
    if c.prior == 0 and veto > 0:  # to LFU: the sign veto (SIGN_VETO, SIGN_LEAD), unless VETO is 0
        ok &= ~((sign <= -Adaptive.SIGN_VETO) | ((sign <= 0) & (lead <= Adaptive.SIGN_LEAD * cap)))
    return ok


def lead_in_row(c: Cell) -> dict[str, object]:
    """The lead-in's numbers (module docstring)."""
    at = np.flatnonzero(c.lead_in)
    if not len(at):
        return {}
    first, last = int(at[0]), int(at[-1])
    switched = last + 1 < len(c.mode)
    gap = (c.hits[1 - c.prior] - c.hits[c.prior])[first:last + 1]
    differ = np.flatnonzero(gap)
    toward = np.flatnonzero(gap > 0)  # lookups where the other expert matched more
    end = last + 1 if switched else last  # the evidence read after the lead-in's last lookup
    lead, var, sign, count = (c.ev[x][end] for x in EVIDENCE[:4])
    if switched:  # read after the switch's flip: as the policy read it before
        lead, sign = -lead, -sign
    return {"prior": c.prior, "wrong": c.prior != c.better, "requests": len(at), "of": len(c.mode),
            "turnovers": (c.added[last] - c.added[first]) / c.cap[first],
            "loss": -c.points(slice(first, last + 1)) if c.prior != c.better else 0.0,
            "first_differ": int(differ[0]) if len(differ) else -1,
            "after": -c.points(slice(first + int(toward[0]) + 1, last + 1)) if c.prior != c.better and len(toward)
            else 0.0, "differ": len(differ), "switched": switched,
            "lead": lead / c.cap[end], "zeff": lead * lead / var if var else 0.0,
            "ratio": sign / count if count else 0.0, "count": count}


def test_reads(c: Cell, test: tuple[float, float, float, float], horizon: float) -> tuple[int, float]:
    """(lead-in requests sooner, points): where `test` passes in the lead-in before the policy's first switch; P
    wrong: the gap it would end sooner (>= 0 wins), P right: the other expert's gap over `horizon` (<= 0 loses)."""
    at = np.flatnonzero(c.lead_in)
    if not len(at):
        return 0, 0.0
    k = at + 1
    k = k[k < len(c.mode)]
    ok = np.flatnonzero(passes(c, test, k))
    if not len(ok) or k[ok[0]] > at[-1]:
        return 0, 0.0
    r = int(k[ok[0]])  # its switch is before request r (after r - 1's lookup)
    if c.prior != c.better:
        return int(at[-1]) + 1 - r, c.points(slice(r, int(at[-1]) + 1))
    return int(at[-1]) + 1 - r, c.points(slice(r, r + max(1, int(horizon * len(c.mode)))))


def cell_logs(name: str) -> list[Cell]:
    reqs, page, caps = shares(name)
    return [trace_cell(reqs, cap, page, name, f) for f, cap in caps]


def parse_test(s: str) -> tuple[float, float, float, float]:
    if s == BASE:
        return (Adaptive.MIN_LEAD, Adaptive.UNANIMOUS, Adaptive.Z, 1.0)
    p = [float(x) for x in s.split("/")]
    if len(p) != 4:
        raise argparse.ArgumentTypeError(f"a test is MIN_LEAD/UNANIMOUS/Z/VETO, not {s!r}")
    return (p[0], p[1], p[2], p[3])


def group(how: str) -> str:
    """The prior's decision as `dense`, `replay 0` (no lookup differed: the replay cannot judge) or `replay 1+`."""
    return how if how in ("dense", "replay 0") else "replay 1+" if how.startswith("replay") else how


def report(cells: list[Cell], tests: list[str], horizon: float, least: float) -> list[str]:
    """The lead-in table (cells losing more than `least` points in it), the summary by the prior's pick and how,
    and a line per test."""
    rows = [(c, lead_in_row(c)) for c in cells]
    rows = [(c, r) for c, r in rows if r]
    out = ["| cell | share | E | prior | how | requests (of) | turnovers | loss | first differ | differ | "
           "switched | lead | zeff | sign/count |", "|---|---|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---|"]
    for c, r in sorted(rows, key=lambda x: x[1]["loss"]):
        if r["loss"] >= -least:
            continue
        out.append(f"| {c.cell} | {c.share:.0%} | {'LRU LFU'.split()[c.better]} | {'LRU LFU'.split()[c.prior]} | "
                   f"{c.how} | {r['requests']} ({r['of']}) | {r['turnovers']:.2f} | {r['loss']:+.2f} | "
                   f"{r['first_differ']} | {r['differ']} | {'yes' if r['switched'] else 'no'} | {r['lead']:+.3f} | "
                   f"{r['zeff']:.1f} | {r['ratio']:+.2f} of {r['count']:.1f} |")
    n = max(len(cells), 1)
    out += ["", "| prior | how | cells | wrong | lead-in loss (share of the mean) | after the first lookup for E | "
            "median requests, turnovers |", "|---|---|---:|---:|---:|---:|---|"]
    for pick in (0, 1):
        for how in ("dense", "replay 0", "replay 1+", "no history"):
            part = [r for c, r in rows if c.prior == pick and group(c.how) == how]
            if part:
                loss = sum(float(r["loss"]) for r in part)
                after = sum(float(r["after"]) for r in part)
                req = np.median([r["requests"] for r in part])
                turn = np.median([r["turnovers"] for r in part])
                out.append(f"| {'LRU LFU'.split()[pick]} | {how} | {len(part)} | {sum(bool(r['wrong']) for r in part)}"
                           f" | {loss:+.2f} ({loss / n:+.3f}) | {after:+.2f} | {req:.0f}, {turn:.2f} |")
    out += ["", "| test | prior's how | P wrong: cells sooner, requests, gap (points) | P right: cells passing, gap "
            "over the horizon |", "|---|---|---|---|"]
    for t in tests:
        got = [(c, test_reads(c, parse_test(t), horizon)) for c, _ in rows]
        for how in ("dense", "replay 0", "replay 1+"):
            part = [(c, r) for c, r in got if group(c.how) == how]
            win = [(s, g) for c, (s, g) in part if s and c.prior != c.better]
            lose = [(s, g) for c, (s, g) in part if s and c.prior == c.better]
            out.append(f"| {t} | {how} | {len(win)}, {sum(s for s, _ in win)}, {sum(g for _, g in win):+.2f} | "
                       f"{len(lose)}, {sum(g for _, g in lose):+.2f} |")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    grid_args(ap)
    ap.add_argument("--tests", default=BASE, help="first-switch tests, MIN_LEAD/UNANIMOUS/Z/VETO, comma-separated")
    ap.add_argument("--horizon", type=float, default=0.2, help="a wrong pass's horizon, a share of the requests")
    ap.add_argument("--least", type=float, default=0.1, help="list the cells whose lead-in loses more points")
    a = ap.parse_args(argv)
    if COMPILED_CORE:
        ap.error("needs the pure-Python core: run with RADIXKV_PURE_PYTHON=1")
    cells = gathered(cell_logs, grid_names(a.grid, held_names([]), a.only), a.jobs, lambda c: (c.cell, c.share))
    print("\n".join(report(cells, a.tests.split(","), a.horizon, a.least)))


if __name__ == "__main__":
    main()
