"""bench/policy_grid.py's `--first` (the prior's verdict forced) and bench/prior_rules.py (a prior rule's verdicts
scored by the two forced runs' margins), on tune's seed 3021: its prior leaves LRU at 5% and keeps it, with no
replay, at 25% and 50% on its reuse (0.67, 0.76); round 19's left it at 25% and kept it at 50% on its veto replay
alone (without it LFU hits 0.8080 there, LRU 0.8215: bench/RESULTS.md, round 18)."""

from __future__ import annotations

from types import ModuleType

import pytest
from scripts import ROOT, load_script

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
    assert [round(got[(CELL, f)][1], 2) for f in grid.FRACS] == [0.49, 0.57, 0.67, 0.76]  # the reuse
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
