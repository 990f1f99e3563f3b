"""`python bench/X.py` puts bench/ first on sys.path, where bench/kernels.py shadows the `kernels` package that
transformers imports: every bench script that imports transformers (or radixkv.integrations, which imports it) drops
that entry first (bench/e2e.py says so). bench/sched_engine.py (issue 20's real-forward check) runs here from the
command line, as its docstring says to run it; the tests that load bench scripts as modules never put bench/ on the
path (tests/scripts.py), so they cannot see this."""

from __future__ import annotations

import re
import subprocess
import sys

from scripts import ROOT

GUARD = 'if sys.path and sys.path[0].rstrip("/").endswith("bench"):'
IMPORTS = re.compile(r"^\s*(from|import) (transformers|radixkv\.integrations)\b", re.M)


def test_every_bench_script_that_imports_transformers_drops_bench_from_the_path_first() -> None:
    scripts = [p for p in sorted((ROOT / "bench").glob("*.py")) if IMPORTS.search(p.read_text())]
    assert len(scripts) >= 6
    for path in scripts:
        text = path.read_text()
        assert GUARD in text and text.index(GUARD) < IMPORTS.search(text).start(), path.name


def test_sched_engine_runs_from_the_command_line() -> None:
    out = subprocess.run([sys.executable, "bench/sched_engine.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[2:] if line.strip()}
    assert set(rows) >= {"fcfs", "lpm", "auto"}
    assert all(row[-1] == "True" for row in rows.values())  # output == model.generate under every schedule
    assert int(rows["auto"][0]) > int(rows["fcfs"][0])  # auto reuses more prompt tokens than fcfs
