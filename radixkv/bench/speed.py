"""Bookkeeping speed, side by side with SGLang on the same trace (`radixkv bench --sglang`).

Per workload, page size and capacity, `repeats` rounds of: radixkv replays the trace with each of
`policies`, then SGLang's harness replays the same JSON-lines file with LRU in its classic Python
`RadixCache` and in `UnifiedRadixCache` on the Rust TreeCore (SGLang's default since 0.5.2x). Each
side keeps its best round, so a burst of load on a shared machine hurts neither side alone. Both
count requests over the time spent inside the cache's calls, radixkv's with every input validated
(radixkv.bench.runner; sglang_peer.parse for SGLang's side).
"""

from __future__ import annotations

from radixkv.bench.runner import replay
from radixkv.bench.sglang_peer import Peer
from radixkv.bench.workloads import Request

PEER_BACKENDS = ("radix", "unified-rust")
PEER_NAMES = {"radix": "SGLang RadixCache", "unified-rust": "SGLang Rust core"}


def compare(peer: Peer, reqs: list[Request], trace: str, capacities: list[int], page_size: int,
            policies: tuple[str, ...], repeats: int) -> tuple[str, list[dict[str, float]]]:
    """(SGLang version, per capacity: {"radixkv <policy>" | "SGLang ...": best requests/s})."""
    best: list[dict[str, float]] = [{} for _ in capacities]
    version = ""
    for _ in range(repeats):
        for cap, row in zip(capacities, best):
            for pol in policies:
                rate = replay(reqs, cap, pol, page_size).requests_per_s
                row[f"radixkv {pol}"] = max(row.get(f"radixkv {pol}", 0.0), rate)
        run = peer.run(trace, capacities, page_size, "lru", backends=PEER_BACKENDS)
        version = run.version
        for res in run.results:
            row = best[capacities.index(res.capacity)]
            name = PEER_NAMES[res.backend]
            row[name] = max(row.get(name, 0.0), res.requests_per_s)
    return version, best


def speed_table(cells: list, policies: tuple[str, ...]):  # noqa: ANN201 - a rich Table
    """Requests/s of each side and radixkv's ratio to each SGLang backend (first policy), per cell."""
    from rich.table import Table

    head = f"radixkv {policies[0]}"
    t = Table(title=f"bookkeeping speed, requests/s inside the cache's calls (best of rounds; ratios: {head})")
    cols = [f"radixkv {p}" for p in policies] + [PEER_NAMES[b] for b in PEER_BACKENDS]
    for col in ("workload", "cap", *cols, *(f"x {PEER_NAMES[b]}" for b in PEER_BACKENDS)):
        t.add_column(col, justify="right")
    for c in cells:
        if not c.speed:
            continue
        row = [c.workload, f"{c.frac:.0%}"] + [f"{c.speed.get(col, 0):,.0f}" for col in cols]
        row += [f"{c.speed[head] / c.speed[PEER_NAMES[b]]:.2f}x" for b in PEER_BACKENDS]
        t.add_row(*row)
    return t
