"""Two checkouts of radixkv, same requests, same machine: requests per CPU second, before / after.

Runs bench/compile_gain.py's worker (the bench lifecycle on the first --requests of each workload,
pages 1 and 16, 25% capacity, the best of --repeats replays by process time) in fresh processes
with PYTHONPATH set to each checkout in turn, alternating round by round, so both see the same load.
Each checkout runs as it is built (`python -m radixkv.build` there for the compiled core, or
RADIXKV_PURE_PYTHON=1 for both). Hit rates must be identical, or the script fails.

    .venv/bin/python bench/ab_trees.py --before ../main --after . --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from compile_gain import paired_medians  # bench/ is the script's own folder, first on sys.path
from radixkv.cli_args import HelpFormatter, positive_int

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_gain.py")


def run_round(root: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, WORKER, "--worker", "--workloads", args.workloads, "--requests", str(args.requests),
           "--repeats", str(args.repeats), "--policy", args.policy]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(root)}
    return json.loads(subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True, text=True).stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--before", required=True, help="checkout root (holds radixkv/)")
    p.add_argument("--after", required=True, help="checkout root (holds radixkv/)")
    p.add_argument("--workloads", default="tools,agent,rag")
    p.add_argument("--requests", type=positive_int, default=400, help="first N requests of each workload")
    p.add_argument("--repeats", type=positive_int, default=3, help="replays per cell and process (the best counts)")
    p.add_argument("--rounds", type=positive_int, default=3, help="before/after process pairs, alternating")
    p.add_argument("--policy", default="adaptive")
    a = p.parse_args(argv)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(a.rounds):
        for side in ("before", "after"):
            runs[side].append(run_round(getattr(a, side), a))
    print(f"policy {a.policy}; median of {a.rounds} rounds")
    print("| cell | before req/s | after req/s | after / before |")
    print("|---|---:|---:|---:|")
    for cell, b, c in paired_medians(runs, "before", "after"):
        print(f"| {cell} | {b:.0f} | {c:.0f} | {c / b:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
