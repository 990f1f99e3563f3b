#!/usr/bin/env python3
"""Belady's optimal token hit rate of a JSON-lines trace (radixkv.bench.opt has the method).

    python bench/opt.py gsp.jsonl --capacity 131072 --page-size 1
"""

from __future__ import annotations

import argparse

from radixkv.bench.opt import opt_hit_rate
from radixkv.bench.traces import read_trace
from radixkv.cli_args import HelpFormatter, positive_int


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("trace", help="JSON-lines trace (bench/workloads.py writes one)")
    p.add_argument("--capacity", type=positive_int, required=True, help="cache size in tokens")
    p.add_argument("--page-size", type=positive_int, default=1, help="tokens per page")
    a = p.parse_args(argv)
    r = opt_hit_rate(read_trace(a.trace), a.capacity, a.page_size)
    print(f"OPT token hit rate {r.hit_rate:.4f} ({r.hit_tokens}/{r.prompt_tokens} prompt tokens), "
          f"rejected {r.oom}, {'exact' if r.exact else 'lower bound'}")


if __name__ == "__main__":
    main()
