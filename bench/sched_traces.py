"""Write the traces `radixkv simulate` is benchmarked on (bench/RESULTS.md, issue 20): the built-in
production-shaped workloads (radixkv/bench/workloads.py) as tokens-format JSON lines (prompt +
recorded answer; no timestamps, so the simulator draws Poisson arrivals at the requested load), and a
Mooncake-shaped trace (radixkv/scheduling/synth.py). Generated, never committed.

    python bench/sched_traces.py --out bench/out/traces --workloads gsp,chat,agent,tools --mooncake 12000
"""

from __future__ import annotations

import argparse
import json
import os

from radixkv.bench.workloads import WORKLOADS, make_workload
from radixkv.cli_args import HelpFormatter, csv_of, nonneg_int, one_of
from radixkv.scheduling.synth import mooncake_shaped


def write_lines(path: str, lines: list[dict]) -> None:
    with open(path, "w") as f:
        for d in lines:
            f.write(json.dumps(d) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--out", required=True, help="directory for the .jsonl files")
    p.add_argument("--workloads", type=csv_of(one_of(WORKLOADS)), default="gsp,chat,agent,tools")
    p.add_argument("--mooncake", type=nonneg_int, default=12000, help="requests of the Mooncake-shaped trace (0: none)")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    for name in a.workloads:
        lines = [{"tokens": r.tokens.tolist(), "prompt_len": r.prompt_len} for r in make_workload(name)]
        write_lines(os.path.join(a.out, f"{name}.jsonl"), lines)
    if a.mooncake:
        write_lines(os.path.join(a.out, "mooncake_shaped.jsonl"), mooncake_shaped(a.mooncake))
    print(f"wrote {', '.join(a.workloads)}{' and mooncake_shaped' if a.mooncake else ''} to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
