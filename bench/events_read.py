"""What reading a cache's KV events costs after recording them: the publisher's side of bench/events_cost.py.

    .venv/bin/python bench/events_read.py --cells rag:1,chat:1,rag:16 --requests 300

One replay per cell (lru, 25% capacity, 16-token XXH3 blocks) keeps every request's batch; then, timed with
this thread's CPU time (best of 7) and printed per request: each batch msgpack-encoded as ZmqPublisher's sender
thread does (`encode_batch`), and every block hash read as an int. A cache's events carry their hashes as
BlockHashes (events/records.py): the ints are made here, not when recording, so this is where they cost.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # events_parts, beside this file

from events_parts import best_us  # noqa: E402

from radixkv.bench.main import capacity  # noqa: E402
from radixkv.bench.opt import build_segments  # noqa: E402
from radixkv.bench.runner import replay  # noqa: E402
from radixkv.bench.workloads import make_workload  # noqa: E402
from radixkv.core_loader import state  # noqa: E402
from radixkv.events.wire import encode_batch  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="rag:1,chat:1,rag:16", help="workload:page_size, comma-separated")
    ap.add_argument("--requests", type=int, default=300, help="the first N requests (0: all)")
    a = ap.parse_args()
    for cell in a.cells.split(","):
        wl, page = cell.split(":")[0], int(cell.split(":")[1])
        reqs = make_workload(wl)[:a.requests or None]
        seg = build_segments(reqs, page)
        cap = capacity(0.25, seg.total_pages * page, max(len(r.tokens) for r in reqs), page)
        batches: list[list] = []
        replay(reqs, cap, "lru", page, events=True, drain=batches.append)
        # best of 7 rounds of one call each, over every request's batch, per request
        enc = best_us(lambda: [encode_batch(b, 0.0, 0, 1) for b in batches], 1, rounds=7) / len(reqs)
        ints = best_us(lambda: [list(e.block_hashes) for b in batches for e in b], 1, rounds=7) / len(reqs)
        print(f"{wl} page {page}: encode_batch {enc:.1f} us a request, every block hash as an int {ints:.1f} us "
              f"a request ({'compiled' if state()[0] else 'pure Python'})")


if __name__ == "__main__":
    main()
