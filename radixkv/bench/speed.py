"""Bookkeeping speed, side by side with SGLang on the same trace (`radixkv bench --sglang`).

Per workload, page size and capacity, `repeats` rounds of: radixkv replays the trace with each of
`policies`, then SGLang's harness replays the same JSON-lines file with LRU in its classic Python
`RadixCache` and in `UnifiedRadixCache` on the Rust TreeCore (SGLang's default since 0.5.2x). Both
count requests over the time spent inside the cache's calls, radixkv's with every input validated
(radixkv.bench.runner; sglang_peer.parse for SGLang's side).

Who runs first alternates from round to round. Two summaries of the rounds. Each side's best round (a burst of load on a shared machine hurts
neither side alone) gives the requests/s columns. The ratios are taken round by round, radixkv's run
against the SGLang run right after it, and reported as their median with the lowest and highest: whole
bench runs on a quiet 2-core VM move +-25% from one to the next, and a ratio of two best-ofs taken
minutes apart carries both sides' drift, where a round's own ratio mostly cancels it.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

from radixkv.bench.runner import replay
from radixkv.bench.sglang_peer import Peer
from radixkv.bench.workloads import Request

PEER_BACKENDS = ("radix", "unified-rust")
PEER_NAMES = {"radix": "SGLang RadixCache", "unified-rust": "SGLang Rust core"}


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
            policies: tuple[str, ...], repeats: int) -> tuple[str, list[dict[str, float]], list[dict[str, Spread]]]:
    """(SGLang version, per capacity {"radixkv <policy>" | "SGLang ...": best requests/s},
    per capacity {ratio_name(policy, backend): Spread of the per-round ratios})."""
    rounds: list[list[dict[str, float]]] = [[] for _ in capacities]  # per capacity, per round: name -> requests/s
    version = ""
    for i in range(repeats):
        got: list[dict[str, float]] = [{} for _ in capacities]
        for side in ("ours", "peer") if i % 2 == 0 else ("peer", "ours"):  # who runs first alternates
            if side == "ours":
                for cap, row in zip(capacities, got):
                    row.update({f"radixkv {pol}": replay(reqs, cap, pol, page_size).requests_per_s for pol in policies})
            else:
                run = peer.run(trace, capacities, page_size, "lru", backends=PEER_BACKENDS)
                version = run.version
                for res in run.results:
                    got[capacities.index(res.capacity)][PEER_NAMES[res.backend]] = res.requests_per_s
        for done, row in zip(rounds, got):
            done.append(row)
    best = [{name: max(r[name] for r in done) for name in done[0]} for done in rounds]
    ratios = [{ratio_name(pol, b): spread([r[f"radixkv {pol}"] / r[PEER_NAMES[b]] for r in done])
               for pol in policies for b in PEER_BACKENDS} for done in rounds]
    return version, best, ratios


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
