"""What KV events cost the cache's thread: events off vs XXH3 vs sha256_cbor, with and without encoding.

    .venv/bin/python bench/events_cost.py --workloads chat,rag,gsp,tools --page-size 1 16 --repeats 3

For each page size and workload: the `radixkv bench` replay (lru, 25% capacity, 16-token event
blocks, events drained after every request), timed with this thread's CPU time
(time.thread_time_ns: the VM is shared) over the cache calls and the drain, best of `--repeats`
rounds; each round runs every mode once, interleaved, so load drifts hit all alike. Modes: events
off; on (XXH3, and sha256_cbor); on and each request's batch msgpack-encoded as ZmqPublisher sends
it (`+enc`). Prints one line per cell (ms, ratios to off, events and blocks recorded, extra µs per
stored block) and writes them as JSON (`--json`). Deterministic counts: blocks and events.

`--lockstep`: instead, one cache with events off and one with XXH3 events on replay the trace side
by side, each request through both (which goes first alternates), each call timed as above, events
taken after every request; the ratio of the two sums, best of `--repeats`. A load swing then hits
both caches within the same millisecond, not in different runs: on a shared machine this ratio
moves far less between runs than the interleaved one (see bench/RESULTS.md, issue 23, events24).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from radixkv.bench.main import capacity
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import replay, sim_config
from radixkv.cache import RadixCache
from radixkv.bench.workloads import make_workload
from radixkv.events import BlockRemoved, BlockStored
from radixkv.events.wire import encode_batch

MODES = ("off", "xxh3", "xxh3+enc", "sha256_cbor", "sha256_cbor+enc")


def _encode(events: list) -> None:
    encode_batch(events, 0.0, 0, 1)


def run_mode(reqs, cap: int, page_size: int, mode: str) -> float:
    scheme = mode.split("+")[0]
    on = mode != "off"
    res = replay(reqs, cap, "lru", page_size, events=on, event_hash=scheme if on else "xxh3",
                 clock=time.thread_time_ns, drain=_encode if mode.endswith("+enc") else None)
    return res.wall_s


def count_blocks(reqs, cap: int, page_size: int) -> tuple[int, int, int]:
    """(events, blocks stored, blocks removed) of one XXH3 replay."""
    seen = [0, 0, 0]

    def tally(events: list) -> None:
        seen[0] += len(events)
        seen[1] += sum(len(e.block_hashes) for e in events if isinstance(e, BlockStored))
        seen[2] += sum(len(e.block_hashes) for e in events if isinstance(e, BlockRemoved))

    replay(reqs, cap, "lru", page_size, events=True, drain=tally)
    return seen[0], seen[1], seen[2]


def lockstep(reqs, cap: int, page_size: int) -> tuple[int, int]:
    """(ns off, ns on) of the cache calls (and take_events) of one side-by-side replay."""
    longest = max(len(r.tokens) for r in reqs)
    caches = [RadixCache(sim_config(cap, page_size, "lru", longest, events=on)) for on in (False, True)]
    clock, spent = time.thread_time_ns, [0, 0]
    for i, req in enumerate(reqs):
        n = len(req.tokens)
        if -(-n // page_size) > caches[0].config.num_pages:
            continue
        for k in ((0, 1) if i % 2 else (1, 0)):
            c = caches[k]
            t0 = clock()
            r = c.match_prefix(req.tokens[:req.prompt_len])
            c.lock(r.node)
            new = c.alloc(n - r.length)
            t1 = clock()
            slots = torch.cat([r.slots, new])  # the caller's work, outside the clock as in runner.replay
            t2 = clock()
            c.insert(req.tokens, slots)
            c.unlock(r.node)
            c.take_events()
            spent[k] += clock() - t2 + t1 - t0
    return spent[0], spent[1]


def lockstep_cell(workload: str, page_size: int, repeats: int) -> dict:
    reqs = make_workload(workload)
    seg = build_segments(reqs, page_size)
    cap = capacity(0.25, seg.total_pages * page_size, max(len(r.tokens) for r in reqs), page_size)
    runs = [lockstep(reqs, cap, page_size) for _ in range(repeats)]
    off, on = min(r[0] for r in runs), min(r[1] for r in runs)
    return {"workload": workload, "page_size": page_size, "requests": len(reqs), "ms": {"off": round(off / 1e6, 1),
            "xxh3": round(on / 1e6, 1)}, "ratio": {"xxh3": round(on / off, 3)},
            "run_ratios": [round(b / a, 3) for a, b in runs]}


def cell(workload: str, page_size: int, repeats: int, modes: tuple[str, ...]) -> dict:
    reqs = make_workload(workload)
    seg = build_segments(reqs, page_size)
    cap = capacity(0.25, seg.total_pages * page_size, max(len(r.tokens) for r in reqs), page_size)
    best = {m: float("inf") for m in modes}
    for _ in range(repeats):
        for m in modes:
            best[m] = min(best[m], run_mode(reqs, cap, page_size, m))
    events, stored, removed = count_blocks(reqs, cap, page_size)
    out = {"workload": workload, "page_size": page_size, "requests": len(reqs), "events": events,
           "blocks_stored": stored, "blocks_removed": removed, "ms": {m: round(best[m] * 1e3, 1) for m in modes}}
    out["ratio"] = {m: round(best[m] / best["off"], 3) for m in modes[1:]}
    out["us_per_stored_block"] = {m: round((best[m] - best["off"]) / stored * 1e6, 3) for m in modes[1:]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="chat,rag,gsp,tools")
    ap.add_argument("--page-size", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES), help=f"'off' first, then any of {MODES[1:]}")
    ap.add_argument("--json", default=None, help="write the cells here")
    ap.add_argument("--lockstep", action="store_true", help="off and XXH3 on side by side, request by request")
    a = ap.parse_args()
    modes = tuple(a.modes.split(","))
    if modes[0] != "off" or not set(modes) <= set(MODES):
        ap.error(f"--modes: 'off' first, then any of {MODES[1:]}")
    cells = []
    for ps in a.page_size:
        for w in a.workloads.split(","):
            if a.lockstep:
                c = lockstep_cell(w, ps, a.repeats)
                cells.append(c)
                print(f"page {ps:2d} {w:6s} off {c['ms']['off']:7.1f} ms  xxh3 {c['ratio']['xxh3']:.2f}x (lockstep; "
                      f"each run: {', '.join(f'{x:.2f}' for x in c['run_ratios'])})", flush=True)
                continue
            c = cell(w, ps, a.repeats, modes)
            cells.append(c)
            print(f"page {ps:2d} {w:6s} off {c['ms']['off']:7.1f} ms  " + "  ".join(
                f"{m} {c['ratio'][m]:.2f}x" for m in modes[1:]) +
                f"  | {c['blocks_stored']} blocks stored, {c['blocks_removed']} removed, {c['events']} events; " +
                "  ".join(f"{m} +{c['us_per_stored_block'][m]:.2f}" for m in modes[1:]) + " us per stored block",
                flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(cells, f, indent=1)


if __name__ == "__main__":
    main()
