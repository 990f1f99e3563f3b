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
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # callgrind.py beside this script

from callgrind import annotate, collect, compiled_inclusive, lifecycle  # noqa: E402

from radixkv.bench.workloads import make_workload  # noqa: E402


def child(workload: str, page_size: int, on: bool, policy: str, requests: int) -> None:
    from radixkv.bench.main import capacity
    from radixkv.bench.opt import build_segments
    from radixkv.bench.runner import sim_config
    from radixkv.cache import RadixCache

    reqs = make_workload(workload)[:requests or None]
    seg = build_segments(reqs, page_size)
    longest = max(len(r.tokens) for r in reqs)
    cfg = sim_config(capacity(0.25, seg.total_pages * page_size, longest, page_size), page_size, policy, longest, on)
    lifecycle(RadixCache(cfg), reqs, drain=on)


def count(a: argparse.Namespace, mode: str) -> tuple[int, list[tuple[int, str]]]:
    """Instructions inside the cache's calls, and the `a.top` functions with the most of their own."""
    with tempfile.TemporaryDirectory() as tmp:
        dest = f"{a.keep}.{mode}" if a.keep else f"{tmp}/cg.out"
        got, _ = collect(__file__, ["--child", mode, "--workload", a.workload, "--page-size", str(a.page_size),
                                    "--policy", a.policy, "--requests", str(a.requests)], dest)
        top: list[tuple[int, str]] = []
        if a.top:  # own instructions, any function; then inclusive, the compiled core's functions
            top = annotate(dest, False, a.top) + compiled_inclusive(dest, a.top)
    return got, top


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
