"""bench/switch_features.py (pure core only): the features of the adaptive policy's evidence at its switches, read
as the policy read them, its labels from the fixed policies' per-request hits, and the AUC it scores them by."""

from __future__ import annotations

import math

import pytest
from scripts import ROOT, load_script

from radixkv import COMPILED_CORE
from radixkv.bench.runner import Replay, replay
from radixkv.eviction import POLICIES

pytestmark = pytest.mark.skipif(COMPILED_CORE, reason="wraps the policy's methods, which the compiled class calls "
                                "natively")
CELL, SHARE = "seed:2013", 0.1  # the held-out cell with three switches after the prior (test_adaptive.py)


def test_the_log_holds_the_policys_own_switches_with_the_evidence_it_switched_on() -> None:
    sf = load_script(ROOT / "bench" / "switch_features.py")
    switches = load_script(ROOT / "bench" / "policy_switches.py")
    reqs, page, caps = sf.shares(CELL)
    cap = dict(caps)[SHARE]
    policy = sf.Logged()
    POLICIES["logged"] = lambda: policy
    try:
        run = Replay(reqs, cap, "logged", page, on_request=lambda: setattr(policy, "request", policy.request + 1))
        run.step(len(reqs))
    finally:
        del POLICIES["logged"]
    assert run.res.hit_tokens / run.res.prompt_tokens == replay(reqs, cap, "adaptive", page).hit_rate  # unchanged
    traced = [int(line.split(":")[0].split()[-1]) for line in switches.trace(f"{CELL}@{SHARE}").splitlines()
              if "-> l" in line]
    logged = [e for e in policy.log if e["kind"] == "switch"]
    assert len(traced) >= 3 and [e["request"] for e in logged] == traced
    for e in logged:  # the evidence before the switch's flip passes the policy's test, for the expert switched to
        assert e["lead"] > 0 and e["margin"] > policy.MARGIN and e["zeff"] > policy.Z ** 2 and -1 <= e["ratio"] <= 1
        assert e["lead"] > policy.MIN_LEAD or e["ratio"] * e["count"] >= e["count"] >= policy.UNANIMOUS
        assert e["sessions"] > 0
    assert [e["from"] for e in logged[1:]] == [1 - e["from"] for e in logged[:-1]]  # each leaves the last one's
    for e in (e for e in policy.log if e["kind"] == "lax"):
        assert e["lead"] > sf.LAX[0] and e["zeff"] > sf.LAX[1] ** 2


def test_labels_come_from_each_requests_hits_and_auc_ranks_right_above_wrong() -> None:
    sf = load_script(ROOT / "bench" / "switch_features.py")
    reqs, page, caps = sf.shares(CELL)
    cap = dict(caps)[SHARE]
    for p in ("lru", "lfu"):
        assert sum(sf.per_request(reqs, cap, p, page)) / sum(r.prompt_len for r in reqs) == replay(
            reqs, cap, p, page).hit_rate
    events = [e for e in sf.cell_events((CELL, 0.2, sf.LAX)) if e["share"] == SHARE]
    assert sum(e["kind"] == "switch" for e in events) >= 3 and all(math.isfinite(e["gain_end"]) for e in events)
    assert sf.auc([2.0, 3.0], [1.0]) == 1.0 and sf.auc([1.0], [1.0, 2.0]) == 0.25 and math.isnan(sf.auc([], [1.0]))
    lines = sf.table(events, "gain")
    assert len(lines) == 5 and lines[0].startswith("| gain | kind | from | events | right | wrong | lead |")
