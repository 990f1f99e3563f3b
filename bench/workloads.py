#!/usr/bin/env python3
"""Write a radixkv workload as a make_trace.py JSON-lines trace, for any harness to replay.

    python bench/workloads.py gsp -o gsp.jsonl [--seed 0] [--scale 1.0]
    .venv-sglang/bin/python /work/shared/peers/sglang_radix.py gsp.jsonl --capacity 131072
"""

from __future__ import annotations

import argparse
import sys

from radixkv.bench.opt import build_segments
from radixkv.bench.workloads import WORKLOADS, make_workload, write_jsonl


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(f"  {w.name:8s} {w.summary}" for w in WORKLOADS.values()))
    p.add_argument("name", choices=sorted(WORKLOADS))
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=float, default=1.0)
    a = p.parse_args(argv)
    reqs = make_workload(a.name, seed=a.seed, scale=a.scale)
    write_jsonl(reqs, a.out)
    print(f"{a.name}: {len(reqs)} requests, {sum(len(r.tokens) for r in reqs)} tokens, "
          f"{build_segments(reqs, 1).total_pages} unique prefix tokens -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
