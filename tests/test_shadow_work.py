"""bench/shadow_work.py: the other expert's shadow's work a request, and the collector's side."""

from __future__ import annotations

import gc
import os

import pytest
from scripts import ROOT, load_script

from radixkv.core_loader import state
from radixkv.radix.core import TreeCore
from radixkv.radix.shadow import ShadowTree

COMPILED = state()[0]
shadow_work = load_script(ROOT / "bench" / "shadow_work.py")


@pytest.mark.skipif(COMPILED or not os.environ.get("RADIXKV_PURE_PYTHON"), reason="wraps methods: interpreted")
def test_the_counts_add_up_and_the_methods_come_back() -> None:
    before = (ShadowTree.match, ShadowTree.insert, ShadowTree._walk_along, ShadowTree._take_least,
              ShadowTree.add_leaf, TreeCore.walk)
    n, got = shadow_work.work("agent", 1, 200)  # agent p1 first evicts at request 151
    assert (ShadowTree.match, ShadowTree.insert, ShadowTree._walk_along, ShadowTree._take_least,
            ShadowTree.add_leaf, TreeCore.walk) == before
    assert 30 <= n <= 49  # steady from the copy that follows the first eviction on, the last request included
    assert got["match calls"] == got["insert calls"] == n  # one lookup and one insert a request, the shadow's
    assert 0 < got["match walked nodes"] <= got["match path nodes"]  # walked: compared; the rest taken along
    assert got["match walked tokens"] <= got["match tokens"]
    assert got["real match nodes"] > 0 and got["real match tokens"] > 0
    leaf = got["insert new leaf tokens, copied"] + got["insert new leaf tokens, the real leaf's key"]
    assert leaf > 0 and got["insert evicted leaves"] > 0
    # the shadow holds what the real cache's occupancy allows: over the steady requests it evicts about what it adds
    assert 0.5 * leaf < got["insert evicted tokens"] < 2 * leaf


def test_the_collections_and_the_young_objects() -> None:
    callbacks = list(gc.callbacks)
    rows = shadow_work.young("agent", 1, 200)
    assert gc.callbacks == callbacks and gc.isenabled()
    for r in rows:  # where a collection falls is the process's (a test's process holds more): none before request 0
        if "a collection" in r:
            assert int(r.split("request ")[1].split(",")[0]) >= 0 and int(r.split("|")[3]) > 0
    young = [r for r in rows if "left young a request" in r]
    assert len(young) == 2 and "before the first eviction (0-151)" in young[0] and "(151-200)" in young[1]
    # before the first eviction a request leaves a node and its runs list young, and more
    assert float(young[0].split("|")[3]) > 2.0 and "TreeNode 1.0" in young[0]


def test_no_census_where_the_replay_never_evicts() -> None:
    assert not [r for r in shadow_work.young("agent", 1, 100) if "left young" in r]  # agent p1 first evicts at 151
