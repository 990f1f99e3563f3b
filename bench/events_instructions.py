"""What KV events cost in instructions: a load-independent count beside events_cost.py's CPU times.

    .venv/bin/python bench/events_instructions.py --workload chat --page-size 1
    .venv/bin/python bench/events_instructions.py --workload tools --modes off --requests 458 --keep cg

Runs the `radixkv bench` replay of bench/events_cost.py (lru, 25% capacity, 16-token XXH3 blocks,
events drained after every request) twice under valgrind's callgrind, events off and on, and counts
the instructions executed inside the cache's calls (match_prefix, lock, alloc, insert, unlock,
take_events; the caller's torch.cat and the events' deallocation are outside). Callgrind starts
counting on entering those calls by their compiled names, so this needs the compiled core
(`python -m radixkv.build`) and valgrind; it takes a few minutes per mode. Prints both counts and
their ratio: deterministic, so two builds compare on a loaded machine where CPU times do not.
`--modes off` counts one mode only; `--requests N` replays the first N requests (the cache sized for
those N, as `radixkv bench` sizes it); `--keep PREFIX` keeps callgrind's output (PREFIX.off, PREFIX.on)
for `callgrind_annotate --inclusive=yes`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

CALLS = ("match_prefix", "lock", "alloc", "insert", "unlock", "take_events")


def child(workload: str, page_size: int, on: bool, requests: int) -> None:
    import torch

    from radixkv.bench.main import capacity
    from radixkv.bench.opt import build_segments
    from radixkv.bench.runner import sim_config
    from radixkv.bench.workloads import make_workload
    from radixkv.cache import RadixCache
    from radixkv.core_loader import state

    if not state()[0]:
        sys.exit(f"the compiled core is not running ({state()[1]}): build it first (python -m radixkv.build)")
    reqs = make_workload(workload)[:requests or None]
    seg = build_segments(reqs, page_size)
    longest = max(len(r.tokens) for r in reqs)
    cfg = sim_config(capacity(0.25, seg.total_pages * page_size, longest, page_size), page_size, "lru", longest, on)
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


def count(workload: str, page_size: int, mode: str, requests: int, keep: str | None) -> int:
    toggles = [f"--toggle-collect=CPyPy_cache___RadixCache___{c}" for c in CALLS]
    with tempfile.TemporaryDirectory() as tmp:
        dest = f"{keep}.{mode}" if keep else f"{tmp}/cg.out"
        out = subprocess.run(["valgrind", "--tool=callgrind", *toggles, f"--callgrind-out-file={dest}",
                              sys.executable, __file__, "--child", mode, "--workload", workload,
                              "--page-size", str(page_size), "--requests", str(requests)],
                             capture_output=True, text=True, env=os.environ)
    got = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or got is None:
        sys.exit(f"valgrind run failed ({mode}): {out.stderr[-400:]}")
    return int(got.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="chat")
    ap.add_argument("--page-size", type=int, default=1)
    ap.add_argument("--modes", default="off,on", help="events off, on, or both (off,on)")
    ap.add_argument("--requests", type=int, default=0, help="the first N requests only (0: all)")
    ap.add_argument("--keep", metavar="PREFIX", help="keep callgrind's output as PREFIX.off / PREFIX.on")
    ap.add_argument("--child", choices=("off", "on"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.workload, a.page_size, a.child == "on", a.requests)
        return
    got = {m: count(a.workload, a.page_size, m, a.requests, a.keep) for m in a.modes.split(",")}
    line = ", ".join(f"events {m} {n:,}" for m, n in got.items())
    ratio = f": {got['on'] / got['off']:.3f}x" if len(got) == 2 else ""
    print(f"{a.workload} page {a.page_size}: instructions in the cache's calls, {line}{ratio}")


if __name__ == "__main__":
    main()
