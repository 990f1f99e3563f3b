"""bench/policy_grid.py's `--first` (the prior's verdict forced) and bench/prior_rules.py (a prior rule's verdicts
scored by the two forced runs' margins), on tune's seed 3021: its prior leaves LRU at 5% and keeps it, with no
replay, at 25% and 50% on its reuse (0.67, 0.76); round 19's left it at 25% and kept it at 50% on its veto replay
alone (without it LFU hits 0.8080 there, LRU 0.8215: bench/RESULTS.md, round 18). Round 21's: prior_rules.py's
`reuse_shape` (the lookups' hits and repeated tokens, from the real tree's hit counts) against a count made from
the lookups themselves, a rule with its sessions test on seed 3012, and the fit and val grids' fresh seeds."""

from __future__ import annotations

from types import ModuleType

import pytest
from scripts import ROOT, load_script
from test_adaptive import SESSIONS, _serve

from radixkv import RadixCache
from radixkv.bench.runner import sim_config
from radixkv.eviction import POLICIES
from radixkv.eviction.adaptive import Adaptive

CELL = "seed:3021"
NO_VETO = "0.25/0.5/-/0.5"  # round 19's prior without its veto replay: the policy's without its reuse test


@pytest.fixture(scope="module")
def grid() -> ModuleType:
    return load_script(ROOT / "bench" / "policy_grid.py")


@pytest.fixture(scope="module")
def rules() -> ModuleType:
    return load_script(ROOT / "bench" / "prior_rules.py")


def test_first_forces_the_priors_verdict_and_nothing_else(grid: ModuleType) -> None:
    free = grid.run((CELL, {}, ("adaptive",), None))
    lru, lfu = (grid.run((CELL, {}, ("adaptive",), first)) for first in (0, 1))
    assert POLICIES["adaptive"] is Adaptive  # the registry is the plain policy's again
    assert free[f"{CELL}|0.5|adaptive"] == lru[f"{CELL}|0.5|adaptive"] == pytest.approx(0.8215, abs=1e-4)
    assert lfu[f"{CELL}|0.5|adaptive"] == pytest.approx(0.8080, abs=1e-4)
    assert free[f"{CELL}|0.05|adaptive"] == lfu[f"{CELL}|0.05|adaptive"] != lru[f"{CELL}|0.05|adaptive"]


def test_a_rules_verdicts_pick_each_cells_margin_from_the_forced_runs(
        grid: ModuleType, rules: ModuleType, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    got = rules.verdicts((CELL, ["base", "round19", NO_VETO]))
    assert "prior-rules" not in POLICIES
    assert [got[(CELL, f)][0]["base"][0] for f in grid.FRACS] == [True, False, False, False]  # 5%, 10%, 25%, 50%
    assert [round(got[(CELL, f)][1][0], 2) for f in grid.FRACS] == [0.49, 0.57, 0.67, 0.76]  # the reuse
    assert got[(CELL, 0.25)][0]["base"] == got[(CELL, 0.5)][0]["base"] == (False, 0)  # no replay
    assert [got[(CELL, f)][0]["round19"][0] for f in grid.FRACS] == [True, False, True, False]
    round19, no_veto = got[(CELL, 0.5)][0]["round19"], got[(CELL, 0.5)][0][NO_VETO]
    assert no_veto[0] and 0 < no_veto[1] < round19[1]  # leaves LRU without the veto replay, with less replayed
    files, fixed = {}, str(tmp_path / "fixed.json")
    for first in ("lru", "lfu"):
        grid.main(["tune", "--only", CELL, "--cells", "--first", first, "--fixed-cache", fixed])
        files[first] = tmp_path / f"{first}.txt"
        files[first].write_text(capsys.readouterr().out)
    assert rules.margins(str(files["lfu"]))[(CELL, 0.5)] == pytest.approx(-1.34)
    grid.main(["tune", "--only", CELL, "--fixed-cache", fixed])
    plain = capsys.readouterr().out.splitlines()[0]  # the policy's own summary line
    rules.main(["tune", "--only", CELL, "--lru", str(files["lru"]), "--lfu", str(files["lfu"]),
                "--rules", f"base,{NO_VETO}"])
    out = capsys.readouterr().out.splitlines()
    ref, mine = plain.replace("tune:", "base:").split(", "), out[0].split(", ")[:5]  # mean: of the printed margins
    assert mine[:2] + mine[3:] == ref[:2] + ref[3:] and float(mine[2][5:]) == pytest.approx(float(ref[2][5:]), abs=2e-3)
    assert out[-1] == f"  {CELL} 50%: LFU, margin +0.00 -> -1.34"


def test_help_prints_usage_and_defaults(rules: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        rules.main(["--help"])
    assert info.value.code == 0 and "(default: base)" in capsys.readouterr().out


SHAPE = "0.25/0.5/-/0.5/0.55/0.61/0.565"  # round 21's rule: the policy's; no replay where reuse_shape finds sessions


def test_reuse_shape_counts_the_lookups_hits_and_repeated_tokens_from_the_real_trees_hit_counts(
        rules: ModuleType) -> None:
    """reuse_shape reads the real tree's hit counts at the first eviction; here, counted from the lookups
    themselves: each lookup's match (the bench lifecycle's) and, per token matched, whether an earlier lookup had
    matched the same prefix to it (prefixes hashed token by token)."""
    reqs = SESSIONS["chat"]
    cache = RadixCache(sim_config(sum(len(r.tokens) for r in reqs), 1, "adaptive", 4096))  # never evicts
    seen: set[int] = set()
    hits = matched = repeated = 0
    for r in reqs:
        length, prefix = _serve(cache, r), 0
        hits += length > 0
        for t in r.tokens[:length].tolist():
            prefix = hash((prefix, t))
            matched, repeated = matched + 1, repeated + (prefix in seen)
            seen.add(prefix)
    history = cache.tree.policy._history
    assert history is not None and 0 < hits < len(reqs) and 0 < repeated < matched
    assert rules.reuse_shape(history) == (len(reqs), hits / len(reqs), repeated / matched)


def test_a_rule_with_the_sessions_test_keeps_lru_without_a_replay_where_most_lookups_hit_few_repeats(
        rules: ModuleType) -> None:
    """tune's seed 3012 at 50%: 0.70 of the 27 lookups before the first eviction hit, 0.46 of the tokens they
    matched were matched before: SHAPE keeps LRU with no replay (LRU by 1.67 points), where the policy's prior
    leaves for LFU on its replay; at 25%, 0.50 hit: SHAPE replays as the policy does."""
    got = rules.verdicts(("seed:3012", ["base", SHAPE]))
    reuse, lookups, hits, repeats, differ = got[("seed:3012", 0.5)][1]
    assert (round(reuse, 3), lookups, round(hits, 3), round(repeats, 3)) == (0.424, 27, 0.704, 0.462) and differ > 0
    assert got[("seed:3012", 0.5)][0]["base"][0] and got[("seed:3012", 0.5)][0][SHAPE] == (False, 0)
    assert got[("seed:3012", 0.25)][0]["base"] == got[("seed:3012", 0.25)][0][SHAPE]


def test_the_fit_and_val_grids_use_seeds_no_other_grid_does(grid: ModuleType) -> None:
    others = set(grid.TUNE + grid.CHECK + grid.held_names([]) + grid.BENCH)
    assert len(grid.FIT) == len(grid.VAL) == 70 and not (set(grid.FIT) | set(grid.VAL)) & others
    assert grid.grid_names("fit", [], "") == grid.FIT and grid.grid_names("val", [], "seed:500") == grid.VAL[:10]


def test_each_cell_replays_each_size_once_for_every_rule_and_the_differing_count(
        rules: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The differing lookups' count and the rules at the policy's size read one replay (round 22: the count
    replayed it again); round 19's veto replay, at another size, runs once too. Verdicts as in the test above."""
    calls: list[tuple[int, int]] = []
    held = []  # the histories kept alive, so that their ids stay distinct
    plain = rules.replay

    def counted(tree, history, own, other, size):  # noqa: ANN001, ANN202
        held.append(history)
        calls.append((id(history), size))
        return plain(tree, history, own, other, size)
    monkeypatch.setattr(rules, "replay", counted)
    got = rules.verdicts((CELL, ["base", "round19", NO_VETO]))
    assert [got[(CELL, f)][0]["round19"][0] for f in (0.05, 0.1, 0.25, 0.5)] == [True, False, True, False]
    assert len(calls) == len(set(calls)) and len({h for h, _ in calls}) == 4  # a first eviction a share
    assert len(calls) > 4  # (the veto replays)


def test_a_rule_with_at_k_leaves_only_where_k_or_more_judged_lookups_differ(rules: ModuleType) -> None:
    """fit's seed 4063 at 50%: the prior leaves LRU on a replay in which two lookups differ (round 24: its lead-in
    loses 1.69 points); @3 keeps LRU, @2 and @1s (more of them for LFU than against) leave as the policy does."""
    specs = ["base", "base@2", "base@3", "base@1s", "base@3s"]
    verdicts, stats = rules.verdicts(("seed:4063", specs))[("seed:4063", 0.5)]
    assert stats[-1] == 2  # the differing lookups in the policy's replay
    assert [verdicts[s][0] for s in specs] == [True, True, False, True, False]
    assert rules.named("base@3") == rules.NAMED["base"] + "@3"
