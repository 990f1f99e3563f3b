"""One digest of every KV event a bench replay records: two builds record the same events iff they agree.

    .venv/bin/python bench/events_digest.py --workloads gsp,rag,chat,tools --page-size 1 16
    RADIXKV_PURE_PYTHON=1 .venv/bin/python bench/events_digest.py        # the same, interpreted

The replay of bench/events_cost.py (lru, 25% capacity, 16-token XXH3 blocks, events drained after
every request): each event as `event_to_dict` JSON, in order, into one SHA-256. Prints one line per
cell: events, blocks stored, the digest's first 16 hex digits, and whether the compiled core ran.
Run it in two checkouts (each with PYTHONPATH=. from its root) and compare the lines.
"""

from __future__ import annotations

import argparse
import hashlib
import json

from radixkv.bench.main import capacity
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import replay
from radixkv.bench.workloads import make_workload
from radixkv.core_loader import state
from radixkv.events import BlockStored, event_to_dict


def digest(workload: str, page_size: int) -> tuple[int, int, str]:
    """(events, blocks stored, sha256 hex) of one replay."""
    reqs = make_workload(workload)
    seg = build_segments(reqs, page_size)
    cap = capacity(0.25, seg.total_pages * page_size, max(len(r.tokens) for r in reqs), page_size)
    sha, seen = hashlib.sha256(), [0, 0]

    def take(events: list) -> None:
        for e in events:
            sha.update(json.dumps(event_to_dict(e), sort_keys=True).encode())
            seen[0] += 1
            seen[1] += len(e.block_hashes) if isinstance(e, BlockStored) else 0

    replay(reqs, cap, "lru", page_size, events=True, drain=take)
    return seen[0], seen[1], sha.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="gsp,rag,chat,tools")
    ap.add_argument("--page-size", type=int, nargs="+", default=[1, 16])
    a = ap.parse_args()
    compiled = "compiled" if state()[0] else f"pure Python ({state()[1]})"
    for page in a.page_size:
        for wl in a.workloads.split(","):
            events, blocks, hexdigest = digest(wl, page)
            print(f"{wl} page {page}: {events:,} events, {blocks:,} blocks stored, "
                  f"sha256 {hexdigest[:16]} ({compiled})")


if __name__ == "__main__":
    main()
