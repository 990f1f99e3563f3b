"""Who makes `auto`'s tail, and what admitted them: one run of a bench/sched_sweep.py cell under fcfs and under
auto (an instrumented copy of the class: decisions unchanged), and for every request whose TTFT under auto is above
fcfs's p99: its prompt blocks, the share of it the tree held when auto first ordered it, the work waiting when it
arrived (caches), how many later arrivals were admitted before it, whether it was aged, and which side of auto's
order admitted it (first: aged or at risk; due: the due share; late / deadline: the deadline order, its deadline
at K = SLOWDOWN passed or not). The same over all requests that aged and over all requests; and how many requests' waits
(in tokens admitted, or clock) crossed m x max(work ahead at arrival, a quantile of it): the bound of round 25's
rescue probes (a75cf9b, bench/RESULTS.md).

    python bench/sched_tail_who.py base-s2 1 1.2 [--set OVERTAKEN=8]
(from a git worktree, prefix `PYTHONPATH=.`.)
"""

from __future__ import annotations

import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_tail  # noqa: E402  (bench/ is no package)

from radixkv.scheduling.auto import Auto  # noqa: E402
from radixkv.scheduling.simulate import Outcome, Simulation  # noqa: E402


class Watched(Auto):
    """Auto, recording per request what its order saw; the order itself is Auto's."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: dict[int, dict] = {}
        self.route: dict = {}  # each request's side of the last order it was in
        self.merged: list = []  # the last order's interleaved part (after those that go first)

    def arrived(self, req, now: float) -> None:
        slots = self.estimates.cache.config.num_slots
        self.log[req.index] = {"ahead": self.backlog / slots, "at": self.admitted_tokens,
                               "q": {q: self.shape.ahead_quantile(q) for q in (0.9, 0.96, 0.99)}}
        super().arrived(req, now)

    def _interleave(self, due, by_deadline):
        self.merged = super()._interleave(due, by_deadline)
        return self.merged

    def order(self, window, now: float):
        out = super().order(window, now)
        first = set(out[:len(out) - len(self.merged)])
        for r in window:
            self.log[r.index].setdefault("cached0", self.lengths.get(r, 0))
            if self.lpm_order:  # lpm's order with the valve (auto.py, LPM_UNTIL)
                self.route[r] = "valve" if self.overtaken.get(r, 0) >= self.VALVE else "lpm"
                continue
            if r not in self.turn:
                continue
            deadline = r.arrival + self.SLOWDOWN * (len(r.tokens) - 2 * self.lengths[r])
            self.route[r] = ("first" if r in first else "due" if r in self.picked
                             else "late" if deadline <= now else "deadline")
        return out

    def admitted(self, req, now: float) -> None:
        if req.index in self.log and "how" not in self.log[req.index]:
            self.log[req.index]["how"] = self.route.get(req, "resumed")
            self.log[req.index]["aged"] = req in self.aged
            self.log[req.index]["wait"] = (now - req.arrival) / self.estimates.cache.config.num_slots
            self.log[req.index]["passed_work"] = (self.admitted_tokens - self.log[req.index]["at"]) / (
                self.estimates.cache.config.num_slots)
        super().admitted(req, now)


def watch(name: str, cap: str, load: float, requests: int, traces_dir: str) -> tuple[Simulation, Outcome]:
    """One run of the cell under `Watched` in auto's place (sim.sched.policy holds what it recorded)."""
    return sched_tail.simulate_as(Watched, name, cap, load, requests, traces_dir)


def main(argv: list[str] | None = None) -> int:
    p = sched_tail.cell_parser(__doc__)
    a = sched_tail.cell_args(p, argv)
    _, fcfs = sched_tail.simulate(a.trace, a.capacity, a.load, "fcfs", a.requests, a.traces_dir)
    sim, out = watch(a.trace, a.capacity, a.load, a.requests, a.traces_dir)
    pol = sim.sched.policy
    reqs = sim.reqs
    line = float(np.percentile(fcfs.ttft_s, 99))
    passed_by = sched_tail.passers(sim)
    passed = {i: len(passed_by(i)) for i in range(len(reqs))}
    print(f"## {a.trace} {a.capacity} {a.load}: fcfs p99 {line:.2f} s, auto p99 {np.percentile(out.ttft_s, 99):.2f}"
          f" s, auto mean {out.ttft_s.mean():.3f} s, fcfs mean {fcfs.ttft_s.mean():.3f} s")
    tail = [i for i in np.argsort(-out.ttft_s, kind="stable") if out.ttft_s[i] > line]
    print(f"{len(tail)} requests over fcfs's p99 under auto")
    print("| req | TTFT s | fcfs TTFT s | blocks | cached0 | ahead caches | passed by | aged | how |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for i in tail[:40]:
        r, rec = reqs[i], pol.log[i]
        print(f"| {i} | {out.ttft_s[i]:.2f} | {fcfs.ttft_s[i]:.2f} | {r.prompt_len} | {rec['cached0']} | "
              f"{rec['ahead']:.2f} | {passed[i]} | {rec.get('aged')} | {rec.get('how')} |")

    def summary(ids: list[int]) -> str:
        if not ids:
            return "none"
        recs = [pol.log[i] for i in ids]
        how = collections.Counter(r.get("how") for r in recs)
        return (f"n {len(ids)}, blocks median {np.median([reqs[i].prompt_len for i in ids]):.0f}, cached0 share "
                f"{np.mean([r['cached0'] / reqs[i].prompt_len for i, r in zip(ids, recs)]):.2f}, ahead median "
                f"{np.median([r['ahead'] for r in recs]):.2f}, passed median {np.median([passed[i] for i in ids]):.0f}"
                f", aged {sum(bool(r.get('aged')) for r in recs)}, how {dict(how)}")
    aged = [i for i in range(len(reqs)) if pol.log[i].get("aged")]
    print("tail: " + summary(tail))
    print("aged: " + summary(aged))
    print("all:  " + summary(list(range(len(reqs)))))
    print("work admitted since arrival >= m x max(ahead at arrival, quantile q of ahead): requests crossing "
          "(of them in the tail), tail requests crossing")
    tails = set(tail)
    for q in (0.9, 0.96, 0.99):
        for m in (1.0, 1.25, 1.5, 2.0):
            cross = [i for i in range(len(reqs)) if reqs[i].index in pol.log and
                     pol.log[i]["passed_work"] >= m * max(pol.log[i]["ahead"], pol.log[i]["q"][q])]
            wait = [i for i in range(len(reqs)) if reqs[i].index in pol.log and
                    pol.log[i]["wait"] >= m * max(pol.log[i]["ahead"], pol.log[i]["q"][q])]
            print(f"q {q} m {m}: work {len(cross)} ({len(tails.intersection(cross))}) of {len(tails)}; "
                  f"wait {len(wait)} ({len(tails.intersection(wait))})")
    per = sim.sched.clock() / sim.now / sim.cache.config.num_slots
    print(f"a cache-time {1 / per:.2f} s; final q 0.9/0.96/0.99 of ahead: "
          f"{[pol.shape.ahead_quantile(q) for q in (0.9, 0.96, 0.99)]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
