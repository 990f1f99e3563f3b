"""bench/shadow_overlap.py: how much of the other expert's shadow the real cache lacks."""

from __future__ import annotations

from scripts import ROOT, load_script

from radixkv.bench.runner import Replay
from radixkv.eviction.policies import LFU


def test_a_copy_of_the_real_cache_lacks_nothing_and_the_other_experts_shadow_lacks_some() -> None:
    so = load_script(ROOT / "bench" / "shadow_overlap.py")
    reqs, cap, page = so.cell("tools:0.25:1", 200)
    run = Replay(reqs, cap, "adaptive", page)
    run.step(len(reqs))
    tree = run.cache.tree
    out, total = so.lacking(tree, tree.shadow_copy(LFU()))
    assert out == 0 and total > 0
    got = so.lacking_shares("tools:0.25:1", 16)
    assert got and all(0.0 <= s <= 1.0 for s in got) and max(got) > 0.05
