"""What compiling the bookkeeping core buys (issue 23): the same .py files, compiled by mypyc (the
shipped build, `python -m radixkv.build`) or Cython's pure-Python mode, against the interpreter, on
the bench lifecycle (`radixkv.bench.runner.replay`).

Copies this checkout's `radixkv/` (and pyproject.toml, whose [tool.mypy] the build reads) into a
scratch folder, compiles there in place, then replays each cell in fresh processes, pure and compiled
alternating round by round. A cell's speed is requests per CPU second (process time, the best of
--repeats replays): on a shared machine CPU time is steadier than wall time. Hit rates must be
identical, or the script fails. Needs a C compiler, the Python headers and the `build` extra (mypyc)
or `pip install cython`.

    .venv/bin/python bench/compile_gain.py --compiler mypyc --workloads tools,agent --rounds 3
    .venv/bin/python bench/compile_gain.py --compiler cython
    .venv/bin/python bench/compile_gain.py --in-place            # this checkout as `make install` built it
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from radixkv.cli_args import HelpFormatter

CYTHON_CORE = ["radix/check.py", "radix/components.py", "radix/core.py", "radix/evict.py", "radix/locks.py",
        "radix/node.py", "radix/pins.py", "radix/shadow.py", "radix/tree.py", "radix/types.py",
        "pools/ledger.py", "pools/allocator.py", "sequences.py", "eviction/adaptive.py", "eviction/index.py",
        "eviction/lrfu.py", "eviction/policies.py", "eviction/view.py", "cache.py", "keys.py", "tokens.py"]
COMMANDS = {"cython": [sys.executable, "-m", "Cython.Build.Cythonize", "-i", "-3", "-j", "2"]
            + [f"radixkv/{m}" for m in CYTHON_CORE],
            "mypyc": [sys.executable, "-m", "radixkv.build"]}


def copy_package(root: str) -> None:
    """This checkout's radixkv/ under `root`, sources only."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copytree(os.path.join(here, "radixkv"), os.path.join(root, "radixkv"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c", "_core_build.txt"))
    shutil.copy(os.path.join(here, "pyproject.toml"), root)


def compile_copy(compiler: str, root: str) -> float:
    """Copy radixkv/ under `root`, compile the core there in place; the build's wall seconds."""
    copy_package(root)
    t0 = time.perf_counter()
    out = subprocess.run(COMMANDS[compiler], cwd=root, env={**os.environ, "PYTHONPATH": root}, check=True,
                         capture_output=True, text=True).stdout
    if compiler == "mypyc" and "compiled core built" not in out:
        raise SystemExit(out.strip())
    return time.perf_counter() - t0


def worker(workloads: list[str], requests: int, repeats: int, policy: str) -> dict:
    """{cell: [requests per CPU second, hit rate]} plus where radix/tree was loaded from."""
    from radixkv.bench.opt import build_segments
    from radixkv.bench.runner import capacity, replay
    from radixkv.bench.workloads import make_workload
    from radixkv.radix import tree

    out: dict = {"tree": os.path.basename(tree.__file__)}
    for wl in workloads:
        reqs = make_workload(wl)[:requests]
        for ps in (1, 16):
            cap = capacity(0.25, build_segments(reqs, ps).total_pages * ps, max(len(r.tokens) for r in reqs), ps)
            best = float("inf")
            for _ in range(repeats):
                c0 = time.process_time()
                res = replay(reqs, cap, policy, ps)
                best = min(best, time.process_time() - c0)
            out[f"{wl}:{ps}"] = [len(reqs) / best, res.hit_rate]
    return out


def run_round(root: str, args: argparse.Namespace, pure: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": root, "RADIXKV_PURE_PYTHON": "1" if pure else ""}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--workloads", args.workloads,
           "--requests", str(args.requests), "--repeats", str(args.repeats), "--policy", args.policy]
    return json.loads(subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True, text=True).stdout)


def compare(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict]] = {"pure": [], "compiled": []}
    if args.in_place:  # this checkout's own build; pure: the same files with RADIXKV_PURE_PYTHON=1
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for _ in range(args.rounds):
            runs["pure"].append(run_round(here, args, pure=True))
            runs["compiled"].append(run_round(here, args))
    else:
        with tempfile.TemporaryDirectory() as pure, tempfile.TemporaryDirectory() as built:
            copy_package(pure)
            print(f"{args.compiler}: built the core in {compile_copy(args.compiler, built):.0f} s wall")
            for _ in range(args.rounds):
                runs["pure"].append(run_round(pure, args))
                runs["compiled"].append(run_round(built, args))
    print(f"radix/tree loaded from: pure {runs['pure'][0]['tree']}, compiled {runs['compiled'][0]['tree']}")
    print(f"{'cell':<12} {'pure req/s':>10} {'compiled':>9} {'ratio':>6}  (median of {args.rounds} rounds)")
    for cell, p, c in paired_medians(runs, "pure", "compiled"):
        print(f"{cell:<12} {p:>10.0f} {c:>9.0f} {c / p:>5.2f}x")


def paired_medians(runs: dict[str, list[dict]], first: str, second: str) -> list[tuple[str, float, float]]:
    """Per cell of the workers' rounds: (cell, median req/s of `first`, of `second`); SystemExit where the
    two sides' hit rates differ (the comparison would then not be of the same work)."""
    out = []
    for cell in [k for k in runs[first][0] if k != "tree"]:
        hits = {r[cell][1] for k in (first, second) for r in runs[k]}
        if len(hits) != 1:
            raise SystemExit(f"{cell}: hit rates differ between {first} and {second}: {sorted(hits)}")
        a, b = (statistics.median(r[cell][0] for r in runs[k]) for k in (first, second))
        out.append((cell, a, b))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--compiler", choices=sorted(COMMANDS), default="mypyc")
    p.add_argument("--workloads", default="tools,agent,rag")
    p.add_argument("--requests", type=int, default=400, help="first N requests of each workload")
    p.add_argument("--repeats", type=int, default=3, help="replays per cell and process (the best counts)")
    p.add_argument("--rounds", type=int, default=3, help="pure/compiled process pairs, alternating")
    p.add_argument("--policy", default="adaptive")
    p.add_argument("--in-place", action="store_true",
                   help="compare this checkout's own build (make install) with RADIXKV_PURE_PYTHON=1; no copy, no build")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.workloads.split(","), args.requests, args.repeats, args.policy)))
    else:
        compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
