"""What the default policy costs next to LRU's in instructions: a load-independent count beside
policy_cost.py's CPU times.

    .venv/bin/python bench/policy_instructions.py --cells agent:0.25:16,tools:0.1:16
    .venv/bin/python bench/policy_instructions.py --cells agent:0.25:16 --top 20     # and where adaptive's go

Per cell (workload:capacity fraction:page size, sized as policy_cost.py sizes it), the bench lifecycle
(match_prefix, lock, alloc, insert, unlock, as `radixkv bench` replays it) runs under valgrind's
callgrind once per policy, counting the instructions executed inside the cache's calls (the caller's
torch.cat is outside). Callgrind starts counting on entering those calls by their compiled names, so
this needs the compiled core (`python -m radixkv.build`) and valgrind; a cell takes a minute or more
per policy. Prints both counts and their ratio: deterministic, so two builds compare on a loaded
machine where CPU times do not. `--top N` lists the N compiled functions with the most inclusive
instructions in the measured policy's run, per request (callgrind_annotate).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # callgrind.py, policy_cost.py beside this script

from callgrind import collect, lifecycle  # noqa: E402


def child(spec: str, policy: str) -> None:
    from policy_cost import cell

    from radixkv.bench.runner import sim_config
    from radixkv.cache import RadixCache

    reqs, cap, page = cell(spec, 1 << 30)
    cache = RadixCache(sim_config(cap, page, policy, max(len(r.tokens) for r in reqs)))
    hit = lifecycle(cache, reqs)
    print(f"requests {len(reqs)} hit {hit}")


def count(spec: str, policy: str, top: int, keep: str = "") -> tuple[int, int, int, str]:
    """(instructions inside the cache's calls, requests, hit tokens, callgrind_annotate's top lines);
    `keep`: also copy callgrind's output file there."""
    with tempfile.TemporaryDirectory() as tmp:
        got, stdout = collect(__file__, ["--child", f"{spec}:{policy}"], f"{tmp}/cg.out")
        done = re.search(r"requests (\d+) hit (\d+)", stdout)
        if done is None:
            sys.exit(f"the replay under valgrind printed no result ({spec} {policy})")
        if keep:
            shutil.copyfile(f"{tmp}/cg.out", keep)
        annotated = ""
        if top:
            annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                                        f"{tmp}/cg.out"], capture_output=True, text=True).stdout
    return got, int(done.group(1)), int(done.group(2)), annotated


def _top(annotated: str, requests: int, n: int) -> list[str]:
    """The n compiled functions (CPyDef_ entry points) and C functions of numpy and the interpreter
    with the most inclusive instructions, per request."""
    rows = []
    for line in annotated.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S*):(\S+)", line)
        if m and ("CPyDef_" in m.group(3) or "CPyPy_" not in m.group(3) and "python" in m.group(2)):
            rows.append((int(m.group(1).replace(",", "")), m.group(3)))
    return [f"    {ir / requests:>10,.0f}  {name}" for ir, name in rows[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="agent:0.25:16", help="workload:frac:page_size,...")
    ap.add_argument("--policy", default="adaptive", help="the policy measured against lru")
    ap.add_argument("--top", type=int, default=0, help="also list the measured policy's N costliest functions")
    ap.add_argument("--only", action="store_true", help="run the measured policy only (no lru, no ratio)")
    ap.add_argument("--keep", default="", help="copy the measured policy's callgrind file here (one cell)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        spec, _, policy = a.child.rpartition(":")
        child(spec, policy)
        return
    for spec in a.cells.split(","):
        ours, n, hit, annotated = count(spec, a.policy, a.top, a.keep)
        if a.only:
            print(f"{spec}: instructions per request inside the cache's calls, {a.policy} {ours / n:,.0f} "
                  f"(hit tokens {hit:,})", flush=True)
        else:
            lru, _, lru_hit, _ = count(spec, "lru", 0)
            print(f"{spec}: instructions per request inside the cache's calls, lru {lru / n:,.0f}, {a.policy} "
                  f"{ours / n:,.0f}: {ours / lru:.3f}x (hit tokens lru {lru_hit:,}, {a.policy} {hit:,})", flush=True)
        if a.top:
            print("\n".join(_top(annotated, n, a.top)))


if __name__ == "__main__":
    main()
