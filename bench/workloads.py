#!/usr/bin/env python3
"""Write a radixkv workload as a make_trace.py JSON-lines trace, for any harness to replay.

    python bench/workloads.py gsp -o gsp.jsonl [--seed 0] [--scale 1.0]
    .venv-sglang/bin/python ../shared/peers/sglang_radix.py gsp.jsonl --capacity 131072

(the SGLang harness path is the default of `radixkv bench --sglang-harness`; see radixkv/bench/sglang_peer.py)
"""

from __future__ import annotations

import argparse
import sys

from radixkv.bench.opt import build_segments
from radixkv.bench.workloads import WORKLOADS, make_workload, write_jsonl
from radixkv.cli_args import HelpFormatter, fraction


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter,
                                epilog="\n".join(f"  {w.name:8s} {w.summary}" for w in WORKLOADS.values()))
    p.add_argument("name", choices=sorted(WORKLOADS))
    p.add_argument("-o", "--out", required=True, help="JSON-lines file to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=fraction, default=1.0, help="keep this fraction of the trace")
    a = p.parse_args(argv)
    reqs = make_workload(a.name, seed=a.seed, scale=a.scale)
    write_jsonl(reqs, a.out)
    print(f"{a.name}: {len(reqs)} requests, {sum(len(r.tokens) for r in reqs)} tokens, "
          f"{build_segments(reqs, 1).total_pages} unique prefix tokens -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
