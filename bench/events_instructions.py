"""What KV events cost in instructions: a load-independent count beside events_cost.py's CPU times.

    .venv/bin/python bench/events_instructions.py --workload chat --page-size 1
    .venv/bin/python bench/events_instructions.py --workload tools --page-size 16 --policy adaptive \
        --modes off --requests 200 --top 15       # the 15 costliest functions, instructions per request

Runs the `radixkv bench` replay of bench/events_cost.py (lru, 25% capacity, 16-token XXH3 blocks,
events drained after every request) twice under valgrind's callgrind, events off and on, and counts
the instructions executed inside the cache's calls (match_prefix, lock, alloc, insert, unlock,
take_events; the caller's torch.cat and the events' deallocation are outside). Callgrind starts
counting on entering those calls by their compiled names, so this needs the compiled core
(`python -m radixkv.build`) and valgrind; it takes a few minutes per mode. Prints both counts and
their ratio: deterministic, so two builds compare on a loaded machine where CPU times do not.
`--top N` also lists, per mode, the N functions with the most instructions of their own inside those
calls (callgrind_annotate), then the N compiled core functions with the most inclusive ones, per request.
`--keep PREFIX` keeps callgrind's output (PREFIX.off, PREFIX.on) for `callgrind_annotate --inclusive=yes`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

from radixkv.bench.workloads import make_workload

CALLS = ("match_prefix", "lock", "alloc", "insert", "unlock", "take_events")


def child(workload: str, page_size: int, on: bool, policy: str, requests: int) -> None:
    import torch

    from radixkv.bench.main import capacity
    from radixkv.bench.opt import build_segments
    from radixkv.bench.runner import sim_config
    from radixkv.cache import RadixCache
    from radixkv.core_loader import state

    if not state()[0]:
        sys.exit(f"the compiled core is not running ({state()[1]}): build it first (python -m radixkv.build)")
    reqs = make_workload(workload)[:requests or None]
    seg = build_segments(reqs, page_size)
    longest = max(len(r.tokens) for r in reqs)
    cfg = sim_config(capacity(0.25, seg.total_pages * page_size, longest, page_size), page_size, policy, longest, on)
    cache = RadixCache(cfg)
    for req in reqs:
        n = len(req.tokens)
        if -(-n // page_size) > cfg.num_pages:
            continue
        r = cache.match_prefix(req.tokens[:req.prompt_len])
        cache.lock(r.node)
        slots = torch.cat([r.slots, cache.alloc(n - r.length)])
        cache.insert(req.tokens, slots)
        cache.unlock(r.node)
        if on:
            cache.take_events()


def count(a: argparse.Namespace, mode: str) -> tuple[int, list[tuple[int, str]]]:
    """Instructions inside the cache's calls, and the `a.top` functions with the most of their own."""
    toggles = [f"--toggle-collect=CPyPy_cache___RadixCache___{c}" for c in CALLS]
    with tempfile.TemporaryDirectory() as tmp:
        dest = f"{a.keep}.{mode}" if a.keep else f"{tmp}/cg.out"
        out = subprocess.run(["valgrind", "--tool=callgrind", *toggles, f"--callgrind-out-file={dest}",
                              sys.executable, __file__, "--child", mode, "--workload", a.workload,
                              "--page-size", str(a.page_size), "--policy", a.policy, "--requests", str(a.requests)],
                             capture_output=True, text=True, env=os.environ)
        got = re.search(r"Collected : (\d+)", out.stderr)
        if out.returncode != 0 or got is None:
            sys.exit(f"valgrind run failed ({mode}): {out.stderr[-400:]}")
        top: list[tuple[int, str]] = []
        if a.top:  # own instructions, any function; then inclusive, the compiled core's functions
            top = _annotate(dest, "no", a.top)
            seen: dict[str, int] = {}  # (callgrind lists a function once per object it was entered from)
            for k, fn in _annotate(dest, "yes", 400):
                if "CPyDef_" in fn:
                    seen.setdefault(fn.partition("CPyDef_")[2] + " (inclusive)", k)
            top += [(k, fn) for fn, k in seen.items()][:a.top]
    return int(got.group(1)), top


def _annotate(out: str, inclusive: str, top: int) -> list[tuple[int, str]]:
    ann = subprocess.run(["callgrind_annotate", "--threshold=100", f"--inclusive={inclusive}", out],
                         capture_output=True, text=True).stdout
    rows = re.findall(r"^\s*([\d,]+) \([^)]*\)\s+(\S.*?)(?: \[[^]]*\])?$", ann, re.M)
    return [(int(n.replace(",", "")), _short(fn)) for n, fn in rows if "PROGRAM TOTALS" not in fn][:top]


def _short(fn: str) -> str:
    """`file:function` as callgrind_annotate names it, the file reduced to its base name."""
    file, _, name = fn.rpartition(":")
    return name if file in ("", "???") else f"{os.path.basename(file)}:{name}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="chat")
    ap.add_argument("--page-size", type=int, default=1)
    ap.add_argument("--policy", default="lru")
    ap.add_argument("--modes", default="off,on", help="events off, on, or both (off,on)")
    ap.add_argument("--requests", type=int, default=0, help="only the first N requests (0: all)")
    ap.add_argument("--top", type=int, default=0, help="also list the N functions with the most own instructions")
    ap.add_argument("--keep", metavar="PREFIX", help="keep callgrind's output as PREFIX.off / PREFIX.on")
    ap.add_argument("--child", choices=("off", "on"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.workload, a.page_size, a.child == "on", a.policy, a.requests)
        return
    n = len(make_workload(a.workload)[:a.requests or None])
    got = {}
    for mode in a.modes.split(","):
        got[mode], top = count(a, mode)
        print(f"{a.workload} page {a.page_size} {a.policy}, events {mode}, {n} requests: instructions in the "
              f"cache's calls {got[mode]:,} ({got[mode] / n:,.0f} per request)")
        for k, fn in top:
            print(f"    {k / n:>10,.0f}  {k / got[mode]:6.1%}  {fn}")
    if len(got) == 2:
        print(f"XXH3 events on / off: {got['on'] / got['off']:.3f}x")


if __name__ == "__main__":
    main()
