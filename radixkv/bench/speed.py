"""Bookkeeping speed, side by side with SGLang on the same trace (`radixkv bench --sglang`).

Per workload, page size and capacity, `repeats` rounds of one lockstep replay: radixkv's replays of
the trace (one per policy in `policies`, radixkv.bench.runner.Replay) and SGLang's (LRU in its
classic Python `RadixCache` and in `UnifiedRadixCache` on the Rust TreeCore, SGLang's default since
0.5.2x, kept alive in its harness: radixkv.bench.peer_session) all serve the trace `chunk` requests
at a time, one capacity after the other, who goes first alternating from chunk to chunk. A chunk is
a few milliseconds of work, so a change in the machine's speed hits both sides within milliseconds
instead of between whole replays. Both count the time inside the cache's calls only, radixkv's
with every input validated.

Each side's best round (a burst of load on a shared machine hurts neither side alone) gives the
requests/s columns. The ratios are taken round by round, one side's time summed over the whole
trace against the other's, and reported as their median with the lowest and highest.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import NamedTuple

from radixkv.bench.peer_session import open_session
from radixkv.bench.runner import Replay
from radixkv.bench.sglang_peer import Peer, PeerError
from radixkv.bench.workloads import Request

PEER_BACKENDS = ("radix", "unified-rust")
PEER_NAMES = {"radix": "SGLang RadixCache", "unified-rust": "SGLang Rust core"}
CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}  # as the harness's
CHUNK = 25  # requests per step: a few ms of either side's work on the built-in traces


class Spread(NamedTuple):
    median: float
    low: float
    high: float


def spread(values: list[float]) -> Spread:
    """Median, lowest and highest of a non-empty list."""
    return Spread(statistics.median(values), min(values), max(values))


def ratio_name(policy: str, backend: str) -> str:
    return f"radixkv {policy} x {PEER_NAMES[backend]}"


def compare(peer: Peer, reqs: list[Request], trace: str, capacities: list[int], page_size: int,
            policies: tuple[str, ...], repeats: int, chunk: int = CHUNK,
            timeout: float = 600.0) -> tuple[str, list[dict[str, float]], list[dict[str, Spread]]]:
    """(SGLang version, per capacity {"radixkv <policy>" | "SGLang ...": best requests/s},
    per capacity {ratio_name(policy, backend): Spread of the per-round ratios})."""
    version, rounds = lockstep(peer, reqs, trace, capacities, page_size, policies, repeats, chunk, timeout)
    best = [{name: max(r[name] for r in done) for name in done[0]} for done in rounds]
    ratios = [{ratio_name(pol, b): spread([r[f"radixkv {pol}"] / r[PEER_NAMES[b]] for r in done])
               for pol in policies for b in PEER_BACKENDS} for done in rounds]
    return version, best, ratios


def lockstep(peer: Peer, reqs: list[Request], trace: str, capacities: list[int], page_size: int,
             policies: tuple[str, ...], repeats: int, chunk: int = CHUNK, timeout: float = 600.0,
             clock: str = "wall") -> tuple[str, list[list[dict[str, float]]]]:
    """(SGLang version, per capacity, per round {"radixkv <policy>" | "SGLang ...": requests/s}): the
    rounds of lockstep replays (the module's docstring), in one harness process. `clock`: "wall" or
    "cpu" (each side's thread's CPU time: a preemption is not counted; a call to the clock costs ~0.4 us)."""
    rounds: list[list[dict[str, float]]] = [[] for _ in capacities]
    with open_session(peer, trace, capacities, page_size, "lru", PEER_BACKENDS, timeout, clock) as peers:
        theirs = [[b * len(capacities) + c for b in range(len(PEER_BACKENDS))] for c in range(len(capacities))]
        if [cap for _, cap in peers.replays] != [c // page_size * page_size for c in capacities] * len(PEER_BACKENDS):
            raise PeerError(f"the SGLang harness replays {peers.replays}, not {PEER_BACKENDS} x {capacities}")
        for rnd in range(repeats):
            if rnd:
                peers.new()
            ours = [[Replay(reqs, cap, pol, page_size, clock=CLOCKS[clock]) for pol in policies] for cap in capacities]
            gc.collect()  # as the harness does before its replays
            peer_ns = [[0] * len(ix) for ix in theirs]
            for k in range(-(-len(reqs) // chunk)):
                for runs, ix, spent in zip(ours, theirs, peer_ns):
                    for side in (0, 1) if (k + rnd) % 2 == 0 else (1, 0):  # who goes first alternates
                        if side == 0:
                            for run in runs:
                                run.step(chunk)
                        else:
                            spent[:] = [a + b for a, b in zip(spent, peers.step(chunk, ix))]
            for runs, ix, spent, done in zip(ours, theirs, peer_ns, rounds):
                row = {f"radixkv {run.res.policy}": len(reqs) / (run.finish().wall_s or 1e-9) for run in runs}
                row |= {PEER_NAMES[peers.replays[i][0]]: len(reqs) / (ns / 1e9 or 1e-9) for i, ns in zip(ix, spent)}
                done.append(row)
            peers.report()  # the harness's leak check
        return peers.version, rounds


def speed_table(cells: list, policies: tuple[str, ...]):  # noqa: ANN201 - a rich Table
    """Requests/s of each side (best round) and radixkv's ratio to each SGLang backend per policy
    (median of the rounds' own ratios, lowest-highest), per cell."""
    from rich.table import Table

    t = Table(title="bookkeeping speed: requests/s inside the cache's calls, best round; ratios: median of the "
                    "rounds' own [low-high]")
    cols = [f"radixkv {p}" for p in policies] + [PEER_NAMES[b] for b in PEER_BACKENDS]
    pairs = [(p, b) for p in policies for b in PEER_BACKENDS]
    for col in ("workload", "cap", *cols, *(f"{p} x {PEER_NAMES[b]}" for p, b in pairs)):
        t.add_column(col, justify="right")
    for c in cells:
        if not c.speed:
            continue
        row = [c.workload, f"{c.frac:.0%}"] + [f"{c.speed.get(col, 0):,.0f}" for col in cols]
        for p, b in pairs:
            s = c.speed_ratios[ratio_name(p, b)]
            row.append(f"{s.median:.2f}x [{s.low:.2f}-{s.high:.2f}]")
        t.add_row(*row)
    return t
