"""Features of the adaptive policy's evidence at its switches, and how well each tells a right switch from a wrong one.

Round 21 asked for a feature of the traffic that tells a real change of regime from noise, to be measured before a
rule is built on it. For every cell of a bench/policy_grid.py grid this runs the policy (pure core) and logs, at
each switch and at the first lookup of each spell where a laxer test passes (MIN_LEAD `--lax-lead`, Z `--lax-z`:
the switch a quicker rule would make), what the evidence over WINDOW looked like:

  lead     the decayed lead, in cache sizes           zeff     lead^2 / the sum of the squared leads (the Z test's)
  count    the differing lookups (decayed)            ratio    the sign count over them (1: all for the other)
  sessions the effective number of sessions the lead came from, (sum g)^2 / sum g^2 over the decayed leads g of
           each session (a lookup's key through one token past the real cache's match)
  persist  how many of the last windows of a quarter cache size of inserts, in a row, the lead was for the other
  margin   the lead over the tokens asked

and labels the event by the fixed policies: the target expert's hit rate minus the followed one's over the next
`--horizon` of the trace's requests and to its end (plain LRU and LFU run per request, in points). Per kind and
direction it prints the events right (label above 0.3 points) and wrong (below -0.3) and each feature's AUC (the
chance a right event's value exceeds a wrong one's; 0.5: no separating power). bench/RESULTS.md, round 22.

    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/switch_features.py fit --jobs 2 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # policy_grid, beside this file

from policy_grid import gathered, grid_args, grid_names, held_names, shares  # noqa: E402

from radixkv import COMPILED_CORE  # noqa: E402
from radixkv.bench.runner import Replay  # noqa: E402
from radixkv.cli_args import HelpFormatter  # noqa: E402
from radixkv.eviction import POLICIES  # noqa: E402
from radixkv.eviction.adaptive import Adaptive  # noqa: E402
from radixkv.eviction.policies import EvictionPolicy  # noqa: E402

FEATURES = ("lead", "zeff", "count", "ratio", "sessions", "persist", "margin")
LAX = (0.03, 0.3)  # the laxer test's MIN_LEAD and Z (`--lax-lead`, `--lax-z`)
QUARTER = 0.25  # persist's window, in cache sizes of inserts


class Logged(Adaptive):
    """Adaptive, logging the features of its evidence at each switch and at each spell's first lax pass."""

    def __init__(self, lax: tuple[float, float] = LAX) -> None:
        super().__init__()
        self.lax_lead, self.lax_z = lax
        self.request = 0
        self.log: list[dict[str, float]] = []
        self.sessions: dict[bytes, float] = {}  # session -> its decayed lead (times `scale`)
        self.scale = 1.0
        self.windows: list[float] = []  # the leads of the finished windows, for the expert not followed
        self.window = self.filled = 0.0
        self.lax = False  # this spell's first lax pass is logged

    def features(self, kind: str) -> dict[str, float]:
        ev, cap = self._long, self._capacity
        g = self.sessions.values()
        total, squares = sum(g) / self.scale, sum(x * x for x in g) / self.scale ** 2
        persist = 0
        for w in reversed(self.windows):
            if w <= 0:
                break
            persist += 1
        return {"kind": kind, "request": self.request, "from": self.mode, "lead": ev.lead / cap,
                "zeff": ev.lead ** 2 / max(ev.var, 1e-9), "count": ev.count, "ratio": ev.sign / max(ev.count, 1e-9),
                "sessions": total * total / squares if squares > 0 else 0.0, "persist": persist,
                "margin": ev.lead / max(ev.asked, 1.0)}

    def on_lookup(self, start, key: bytes, length: int) -> None:  # noqa: ANN001 - a CachedNodeView
        ready = bool(self._shadows) and self._duty.warm <= 0
        before, switches = self._long.lead, self.switches
        super().on_lookup(start, key, length)
        if not ready:
            return
        switched = self.switches != switches
        if switched:
            self._long.flip()  # the evidence as it was read
        lead = self._long.lead - before  # this lookup's (no decay within a lookup)
        if lead:
            session = self._looked[:4 * (length + 1)]
            self.sessions[session] = self.sessions.get(session, 0.0) + lead * self.scale
            self.window += lead
        ev = self._long
        if switched:
            self.log.append(dict(self.features("switch"), **{"from": 1 - self.mode}))
            ev.flip()
            self.sessions = {k: -v for k, v in self.sessions.items()}
            self.windows = [-w for w in self.windows]
            self.window, self.lax = -self.window, False
        elif (not self.lax and ev.lead > self.MARGIN * ev.asked and ev.lead > self.lax_lead * self._capacity
              and ev.lead ** 2 > self.lax_z ** 2 * ev.var and (self.mode == 1 or not self._vetoed())):
            self.lax = True
            self.log.append(self.features("lax"))

    def _decay(self, added: int) -> None:
        f = 1.0 - added / (self.WINDOW * self._capacity)
        if f < 1.0:
            self.scale = self.scale / f if f > 1e-9 else float("inf")
            if not 1e-100 < self.scale < 1e100:  # renormalise (and drop what has decayed away)
                self.sessions = {k: v / self.scale for k, v in self.sessions.items() if abs(v / self.scale) > 1e-9}
                self.scale = 1.0
        self.filled += added
        if self.filled >= QUARTER * self._capacity:
            self.windows.append(self.window)
            self.window = self.filled = 0.0
        super()._decay(added)


def per_request(reqs: list, cap: int, policy: str | EvictionPolicy, page: int,
                before: Callable[[], object] | None = None) -> list[int]:
    """Tokens each request's lookup matched under `policy` (a name, or a policy object the run uses as it is, to
    be read during and after it); `before()` is called before each request, if given (an observer reading the
    policy's state then: bench/switch_transient.py, bench/switch_leadin.py)."""
    if not isinstance(policy, str):
        POLICIES["per-request"] = lambda: policy
        try:
            return per_request(reqs, cap, "per-request", page, before)
        finally:
            del POLICIES["per-request"]
    run, out = Replay(reqs, cap, policy, page), []
    for _ in reqs:
        if before is not None:
            before()
        got = run.res.hit_tokens
        run.step(1)
        out.append(run.res.hit_tokens - got)
    return out


def cell_events(job: tuple[str, float, tuple[float, float]]) -> list[dict[str, float]]:
    """Every logged event of a trace's cells (job: its name, the horizon, the lax test), labelled (`gain`: to the
    horizon, `gain_end`: to the end)."""
    name, horizon, lax = job
    reqs, page, caps = shares(name)
    prompt = np.array([r.prompt_len for r in reqs])
    out = []
    for f, cap in caps:
        policy = Logged(lax)
        POLICIES["logged"] = lambda: policy
        try:
            Replay(reqs, cap, "logged", page, on_request=lambda: setattr(policy, "request", policy.request + 1)).step(
                len(reqs))
        finally:
            del POLICIES["logged"]
        hits = [np.array(per_request(reqs, cap, p, page)) for p in ("lru", "lfu")]
        for e in policy.log:
            r, own = int(e["request"]), int(e["from"])
            gains = []
            for end in (r + max(1, int(horizon * len(reqs))), len(reqs)):
                w = slice(r, end)
                gains.append(100 * float(hits[1 - own][w].sum() - hits[own][w].sum()) / max(int(prompt[w].sum()), 1))
            out.append(dict(e, cell=name, share=f, gain=gains[0], gain_end=gains[1]))
    return out


def auc(right: list[float], wrong: list[float]) -> float:
    """The chance that a right event's value exceeds a wrong one's (ties count half); nan without both."""
    if not right or not wrong:
        return float("nan")
    a, b = np.array(right)[:, None], np.array(wrong)[None, :]
    return float(((a > b).sum() + 0.5 * (a == b).sum()) / (a.size * b.size))


def table(events: list[dict[str, float]], label: str, least: float = 0.3) -> list[str]:
    """A line per kind and direction: events, right and wrong by `label`, and each feature's AUC."""
    lines = [f"| {label} | kind | from | events | right | wrong | " + " | ".join(FEATURES) + " |"]
    for kind in ("switch", "lax"):
        for own in (0, 1):
            part = [e for e in events if e["kind"] == kind and e["from"] == own]
            right = [e for e in part if e[label] > least]
            wrong = [e for e in part if e[label] < -least]
            aucs = (auc([e[x] for e in right], [e[x] for e in wrong]) for x in FEATURES)
            lines.append(f"| | {kind} | {('LRU', 'LFU')[own]} | {len(part)} | {len(right)} | {len(wrong)} | "
                         + " | ".join(f"{x:.2f}" for x in aucs) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    grid_args(ap)
    ap.add_argument("--horizon", type=float, default=0.2, help="the label's horizon, a share of the requests")
    ap.add_argument("--lax-lead", type=float, default=LAX[0], help="the laxer test's MIN_LEAD")
    ap.add_argument("--lax-z", type=float, default=LAX[1], help="the laxer test's Z")
    ap.add_argument("--json", metavar="OUT", help="write every event with its features and labels")
    a = ap.parse_args(argv)
    if COMPILED_CORE:
        ap.error("needs the pure-Python core: run with RADIXKV_PURE_PYTHON=1")
    jobs = [(n, a.horizon, (a.lax_lead, a.lax_z)) for n in grid_names(a.grid, held_names([]), a.only)]
    events = gathered(cell_events, jobs, a.jobs, lambda e: (e["cell"], e["share"], e["request"]))
    print("\n".join(table(events, "gain") + table(events, "gain_end")))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(events, f)


if __name__ == "__main__":
    main()
