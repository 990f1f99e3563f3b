"""bench/sched_sweep.py's baseline cache key: a variant of `Auto` keeps the cached fcfs / lpm runs, an edit to
anything those runs execute (another policy, the Scheduler, the simulator, the cache) drops them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scripts import ROOT, load_script

from radixkv.scheduling import schedules
from radixkv.scheduling.auto import Auto

sweep = load_script(ROOT / "bench" / "sched_sweep.py")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of radixkv's .py sources (what `code_version` reads)."""
    copy = tmp_path / "radixkv"
    shutil.copytree(ROOT / "radixkv", copy, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    return copy


def edit(path: Path, old: str, new: str) -> None:
    """`old` (once in the file) replaced by `new`; an empty `old`: `new` appended."""
    text = path.read_text()
    assert old == "" or text.count(old) == 1, old
    path.write_text(text.replace(old, new) if old else text + new)


def test_an_edited_auto_keeps_the_baselines_key(package: Path) -> None:
    """Auto's constants, methods and decorators changed, a method added, what it reads of the trace changed: the
    same key."""
    before = sweep.code_version(str(package))
    assert before == sweep.code_version(str(ROOT / "radixkv"))
    source = package / "scheduling" / "auto.py"
    edit(source, "    SLOWDOWN = 48.0", "    SLOWDOWN = 12.0\n    EXTRA = 3")
    edit(source, "        return not standing or", "        return standing or")
    edit(source, "class Auto(Policy):", "@dataclass_like\nclass Auto(Policy):\n    def extra(self) -> int:\n"
                                          "        return 1\n")
    edit(package / "scheduling" / "shape.py", "", "\nDEBUG = 1\n")
    assert sweep.code_version(str(package)) == before


@pytest.mark.parametrize(("rel", "old", "new"), [
    ("scheduling/policies.py", "return sorted(window, key=lambda r: -length(r))",
     "return sorted(window, key=lambda r: length(r))"),  # lpm
    ("scheduling/policies.py", "class FcfsMatch(Policy):", "class FcfsMatch(LongestPrefix):"),
    ("scheduling/schedules.py", "ResponseRatio, Auto)}", "ResponseRatio, Auto, LongestPrefix)}"),  # registry
    ("scheduling/policies.py", "        return window\n", "        return window[::-1]\n"),  # Policy: fcfs
    ("scheduling/scheduler.py", "window: int = 256", "window: int = 128"),
    ("scheduling/simulate.py", "", "\nDEBUG = 1\n"),
    ("scheduling/cost_model.py", "", "\nDEBUG = 1\n"),
    ("radix/tree.py", "", "\nDEBUG = 1\n"),
])
def test_an_edit_the_baselines_execute_changes_the_key(package: Path, rel: str, old: str, new: str) -> None:
    before = sweep.code_version(str(package))
    edit(package / rel, old, new)
    assert sweep.code_version(str(package)) != before


def test_only_runs_of_policies_outside_auto_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [s for s in schedules.POLICIES if sweep.cached(s)] == ["fcfs", "fcfs-match", "lpm", "dfs-weight", "hrrn"]

    class Variant(Auto):  # runs Auto's code: its runs are not keyed by it, so never cached
        name = "auto-variant"

    monkeypatch.setitem(schedules.POLICIES, Variant.name, Variant)
    assert not sweep.cached("auto-variant")
