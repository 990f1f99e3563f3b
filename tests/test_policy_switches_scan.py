"""bench/policy_switches.py's forced schedules (`--lru-from`, `--lfu-from`) and its switch-time oracle (`--scan`):
a schedule that never switches hits exactly what its plain expert hits; one that switches does so once, at its
request; the oracle's best is a forced run's own hit rate and at least the better expert's."""

from __future__ import annotations

from scripts import ROOT, load_script

from radixkv.bench.runner import replay
CELL = "seed:2013@0.1"  # the held-out cell with three switches after the prior (test_adaptive.py)


def test_a_forced_schedule_that_never_switches_is_its_plain_expert() -> None:
    ps = load_script(ROOT / "bench" / "policy_switches.py")
    reqs, page, cap = ps.cell_of(CELL)
    for first, plain in ((0, "lru"), (1, "lfu")):
        cell, _, _, hit, start, total = ps.forced((CELL, first, ps.NEVER))
        assert hit == replay(reqs, cap, plain, page).hit_rate
        assert cell == CELL and 0 < start < total == len(reqs)


def test_lru_from_follows_lfu_from_the_first_eviction_then_lru_once() -> None:
    ps = load_script(ROOT / "bench" / "policy_switches.py")
    out = ps.trace(CELL, 100, 1).splitlines()
    assert out[1].strip().endswith("follows lfu (switched)"), out
    assert [line.strip() for line in out if "->" in line] == ["request 100: -> lru (forced)"], out
    assert f"adaptive {ps.forced((CELL, 1, 100))[3]:.4f} (" in out[0]
    assert ps.forced((CELL, 1, 100))[3] != ps.forced((CELL, 1, ps.NEVER))[3]


def test_the_scan_reports_its_best_forced_schedule() -> None:
    ps = load_script(ROOT / "bench" / "policy_switches.py")
    fixed = dict([ps.fixed_rates(CELL)])
    (row,) = [line for line in ps.scan([CELL], 4, 1, fixed) if line.startswith(f"| {CELL} |")]
    cols = [c.strip() for c in row.strip("|").split("|")]
    top = max(fixed[CELL].values())
    lru_only, lru_lfu, lfu_only, lfu_lru, oracle = (float(cols[i].split()[0]) for i in (4, 5, 6, 7, 8))
    assert oracle == max(lru_lfu, lfu_lru) >= max(lru_only, lfu_only)
    assert lru_only == round(100 * (fixed[CELL]["lru"] - top), 2)
    assert lfu_only == round(100 * (fixed[CELL]["lfu"] - top), 2)
    for first, col in ((0, cols[5]), (1, cols[7])):  # a best that switches is that forced run's hit rate
        at = col.split("(")[1].rstrip(")")
        if at != "never":
            assert col.split()[0] == f"{100 * (ps.forced((CELL, first, int(at)))[3] - top):+.2f}"
