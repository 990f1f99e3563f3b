"""Bookkeeping speed, side by side with SGLang on the same trace (`radixkv bench --sglang`).

Per workload, page size and capacity, a warm-up round and then `repeats` rounds: radixkv's replays
of the trace (one per policy in `policies`, radixkv.bench.runner.Replay) and SGLang's (LRU in its
classic Python `RadixCache` and in `UnifiedRadixCache` on the Rust TreeCore, SGLang's default since
0.5.2x, kept alive in one harness process: radixkv.bench.peer_session) serve the trace one capacity
after the other, `chunk` requests at a time (by default all of them), who goes first alternating
from step to step and round to round, and within a side whose replay. Both count the time inside
the cache's calls only, radixkv's with every input validated, by default in each side's thread's
CPU time (time.thread_time_ns): on a loaded machine a wall clock also counts other processes'
turns, which land in one side's calls or the other's by chance. Steps of a few ms (`chunk` 25) put
a change in the machine's speed on both sides within milliseconds, but each replay then finds its
data evicted from the CPU's caches by the others' steps, which costs the faster side more: on this
VM they narrowed nothing and moved the ratios by up to 20% (bench/RESULTS.md, issue 23, round 9).

Each side's best round gives the requests/s columns. The ratios are taken round by round, one
side's time summed over the whole trace against the other's, and reported as their median with the
lowest and highest.
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
            policies: tuple[str, ...], repeats: int, chunk: int | None = None, timeout: float = 600.0,
            clock: str = "cpu") -> tuple[str, list[dict[str, float]], list[dict[str, Spread]]]:
    """(SGLang version, per capacity {"radixkv <policy>" | "SGLang ...": best requests/s},
    per capacity {ratio_name(policy, backend): Spread of the per-round ratios}): lockstep()'s rounds."""
    version, rounds = lockstep(peer, reqs, trace, capacities, page_size, policies, repeats, chunk, timeout, clock)
    best = [{name: max(r[name] for r in done) for name in done[0]} for done in rounds]
    ratios = [{ratio_name(pol, b): spread([r[f"radixkv {pol}"] / r[PEER_NAMES[b]] for r in done])
               for pol in policies for b in PEER_BACKENDS} for done in rounds]
    return version, best, ratios


def lockstep(peer: Peer, reqs: list[Request], trace: str, capacities: list[int], page_size: int,
             policies: tuple[str, ...], repeats: int, chunk: int | None = None, timeout: float = 600.0,
             clock: str = "cpu", warmup: int = 1) -> tuple[str, list[list[dict[str, float]]]]:
    """(SGLang version, per capacity, per round {"radixkv <policy>" | "SGLang ...": requests/s}): the
    rounds (the module's docstring), in one harness process, after `warmup` rounds that are not kept
    (a fresh interpreter's first replays run slow). `chunk`: requests per step (None: the whole trace).
    `clock`: "wall" or "cpu" (each side's thread's CPU time: a preemption is not counted; a call to
    the clock costs ~0.4 us against ~0.08)."""
    step = chunk or len(reqs)
    rounds: list[list[dict[str, float]]] = [[] for _ in capacities]
    with open_session(peer, trace, capacities, page_size, "lru", PEER_BACKENDS, timeout, clock) as peers:
        theirs = [[b * len(capacities) + c for b in range(len(PEER_BACKENDS))] for c in range(len(capacities))]
        if [cap for _, cap in peers.replays] != [c // page_size * page_size for c in capacities] * len(PEER_BACKENDS):
            raise PeerError(f"the SGLang harness replays {peers.replays}, not {PEER_BACKENDS} x {capacities}")
        for rnd in range(-warmup, repeats):
            if rnd > -warmup:
                peers.new()
            ours = [[Replay(reqs, cap, pol, page_size, clock=CLOCKS[clock]) for pol in policies] for cap in capacities]
            gc.collect()  # as the harness does before its replays
            peer_ns = [[0] * len(ix) for ix in theirs]
            for k in range(-(-len(reqs) // step)):
                for runs, ix, spent in zip(ours, theirs, peer_ns):
                    for side in (0, 1) if (k + rnd) % 2 == 0 else (1, 0):  # who goes first alternates
                        if side == 0:
                            for run in _turn(runs, k // 2 + rnd):  # and within a side, whose replay
                                run.step(step)
                        else:
                            pos = _turn(list(range(len(ix))), k // 2 + rnd)
                            for p, ns in zip(pos, peers.step(step, [ix[p] for p in pos])):
                                spent[p] += ns
            for runs, ix, spent, done in zip(ours, theirs, peer_ns, rounds if rnd >= 0 else [[]] * len(rounds)):
                row = {f"radixkv {run.res.policy}": len(reqs) / (run.finish().wall_s or 1e-9) for run in runs}
                row |= {PEER_NAMES[peers.replays[i][0]]: len(reqs) / (ns / 1e9 or 1e-9) for i, ns in zip(ix, spent)}
                done.append(row)
            peers.report()  # the harness's leak check
        return peers.version, rounds


def _turn(items: list, k: int) -> list:
    """`items` rotated by k."""
    k %= len(items)
    return items[k:] + items[:k]


def speed_table(cells: list, policies: tuple[str, ...]):  # noqa: ANN201 - a rich Table
    """Requests/s of each side (best round) and radixkv's ratio to each SGLang backend per policy
    (median of the rounds' own ratios, lowest-highest), per cell."""
    from rich.table import Table

    t = Table(title="bookkeeping speed: requests per CPU second inside the cache's calls, best round; ratios: "
                    "median of the rounds' own [low-high]")
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
