"""How far one round's radixkv / SGLang speed ratio moves from the next's, by way of measuring.

    .venv/bin/python bench/peer_spread.py --methods whole,lockstep:25:wall,lockstep:25:cpu --repeats 5

For each page size and workload (25% capacity, as `radixkv bench` sizes it), `--repeats` rounds of
radixkv's `--policies` against SGLang's RadixCache and Rust core, and per ratio the rounds' values
with max / min. Methods:
  whole                 round 8's `radixkv bench --sglang`: radixkv's whole replays, then SGLang's
                        harness in a fresh process (who goes first alternating), wall clock
  lockstep:CHUNK:CLOCK  radixkv.bench.speed.lockstep: both sides step the trace CHUNK requests at a
                        time in one harness process, timed by CLOCK (wall or cpu), after `--warmup` rounds
Needs the SGLang peer (`make sglang`). Writes every round's requests/s as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from radixkv.bench import speed
from radixkv.bench.main import capacity
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import replay
from radixkv.bench.sglang_peer import Peer
from radixkv.bench.workloads import make_workload, write_jsonl


def whole(peer: Peer, reqs, trace: str, cap: int, page_size: int, policies: tuple[str, ...],
          repeats: int) -> list[dict[str, float]]:
    """Round 8's rounds: whole replays one after the other, SGLang's in a fresh harness process."""
    rounds = []
    for i in range(repeats):
        got: dict[str, float] = {}
        for side in ("ours", "peer") if i % 2 == 0 else ("peer", "ours"):
            if side == "ours":
                got.update({f"radixkv {p}": replay(reqs, cap, p, page_size).requests_per_s for p in policies})
            else:
                for res in peer.run(trace, [cap], page_size, "lru", backends=speed.PEER_BACKENDS).results:
                    got[speed.PEER_NAMES[res.backend]] = res.requests_per_s
        rounds.append(got)
    return rounds


def measure(method: str, peer: Peer, reqs, trace: str, cap: int, page_size: int, policies: tuple[str, ...],
            repeats: int, warmup: int = 1) -> list[dict[str, float]]:
    if method == "whole":
        return whole(peer, reqs, trace, cap, page_size, policies, repeats)
    name, chunk, clock = method.split(":")
    if name != "lockstep" or not (chunk.isdigit() or chunk == "all") or clock not in speed.CLOCKS:
        raise SystemExit(f"bad method {method!r}: whole or lockstep:CHUNK|all:{'|'.join(speed.CLOCKS)}")
    return speed.lockstep(peer, reqs, trace, [cap], page_size, policies, repeats,
                          None if chunk == "all" else int(chunk), clock=clock, warmup=warmup)[1][0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--methods", default="whole,lockstep:25:wall,lockstep:25:cpu,lockstep:all:cpu")
    ap.add_argument("--workloads", default="tools,agent")
    ap.add_argument("--page-sizes", default="1,16")
    ap.add_argument("--policies", default="lru,adaptive")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="lockstep rounds not kept, first")
    ap.add_argument("--json", default=None, help="write every round here")
    a = ap.parse_args(argv)
    peer, policies, rows = Peer.from_env(), tuple(a.policies.split(",")), []
    for ps in map(int, a.page_sizes.split(",")):
        for w in a.workloads.split(","):
            reqs = make_workload(w)
            seg = build_segments(reqs, ps)
            cap = capacity(0.25, seg.total_pages * ps, max(len(r.tokens) for r in reqs), ps)
            with tempfile.TemporaryDirectory() as d:
                trace = os.path.join(d, "trace.jsonl")
                write_jsonl(reqs, trace)
                for m in a.methods.split(","):
                    t0, load0 = time.monotonic(), os.getloadavg()[0]
                    rounds = measure(m, peer, reqs, trace, cap, ps, policies, a.repeats, a.warmup)
                    ratios = {f"{p} x {b}": [r[f"radixkv {p}"] / r[speed.PEER_NAMES[b]] for r in rounds]
                              for p in policies for b in speed.PEER_BACKENDS}
                    rows.append({"method": m, "page_size": ps, "workload": w, "rounds": rounds,
                                 "seconds": time.monotonic() - t0, "load": [load0, os.getloadavg()[0]]})
                    print(f"{m:20s} page {ps:2d} {w:6s} load {load0:4.1f}-{os.getloadavg()[0]:4.1f} | " + " | ".join(
                        f"{k}: " + " ".join(f"{v:.2f}" for v in vs) + f" (max/min {max(vs) / min(vs):.2f})"
                        for k, vs in ratios.items()), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
