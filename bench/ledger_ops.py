"""The page ledger's per-page numpy operations, timed one by one (what pools/ chose, and why).

    .venv/bin/python bench/ledger_ops.py                 # 80 and 1,300 pages (a request at page 16 / page 1)
    .venv/bin/python bench/ledger_ops.py --pages 16,1300 --repeat 7

Prints microseconds per call (best of `--repeat` runs) of each variant side by side, so a ratio is
from one run: gathering and scattering a pool's int8 page states with int64, int32 and uint64 index
arrays, the range check before a gather, insert()'s comparison of alloc()'s slots, and page_slots
as a broadcast vs a repeat plus a kept tile (pools/allocator.py).
"""

from __future__ import annotations

import argparse
import timeit
from typing import Callable

import numpy as np

from radixkv.pools import page_slots
from radixkv.tokens import distinct


def _broadcast_page_slots(pages: np.ndarray, ps: int) -> np.ndarray:  # page_slots before: one [pages, ps] broadcast
    return (pages[:, None] * np.int64(ps) + np.arange(ps, dtype=np.int64)).reshape(-1)


def _table_distinct(scratch: np.ndarray, values: np.ndarray) -> bool:  # the check before: an int32 table per page
    order = np.arange(len(values), dtype=np.int32)
    scratch[values] = order
    return scratch[values].tobytes() == order.tobytes()


def variants(n: int, pool: int) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(n)
    state = np.zeros(pool, dtype=np.int8)
    p64 = rng.permutation(pool)[:n].astype(np.int64)
    p32, fresh = p64.astype(np.int32), p64.tobytes()
    scratch = np.zeros(pool, dtype=np.int32)
    return {
        "gather int64": lambda: state[p64],
        "gather int32": lambda: state[p32],
        "gather uint64 view": lambda: state[p64.view(np.uint64)],
        "range check + gather int64": lambda: (np.maximum.reduce(p64.view(np.uint64)) < pool, state[p64]),
        "scatter int64": lambda: state.__setitem__(p64, 2),
        "scatter int32": lambda: state.__setitem__(p32, 2),
        "astype int32 -> int64": lambda: p32.astype(np.int64),
        "alloc()'s slots: tobytes ==": lambda: p64.tobytes() == fresh,  # n slots (page 1)
        "page_slots 16, broadcast": lambda: _broadcast_page_slots(p64, 16),
        "page_slots 16, repeat + tile": lambda: page_slots(p64, 16),
        "distinct: int32 table": lambda: _table_distinct(scratch, p64),
        "distinct: sort": lambda: distinct(p64),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", default="80,1300", help="pages per call, comma-separated")
    ap.add_argument("--pool", type=int, default=200_000, help="pages in the pool")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    sizes = [int(x) for x in a.pages.split(",")]
    table = {n: variants(n, a.pool) for n in sizes}
    print(f"{'us per call':<30}" + "".join(f"{n:>10,}" for n in sizes))
    for name in table[sizes[0]]:
        cells = []
        for n in sizes:
            number = max(200, 200_000 // n)
            cells.append(min(timeit.repeat(table[n][name], number=number, repeat=a.repeat)) / number * 1e6)
        print(f"{name:<30}" + "".join(f"{c:>10.2f}" for c in cells))


if __name__ == "__main__":
    main()
