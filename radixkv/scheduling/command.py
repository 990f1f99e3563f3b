"""The `radixkv simulate` subcommand: flags, progress, table, JSON and plots (radixkv/cli.py adds it)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from radixkv.cli_args import csv_of, fraction, one_of, positive_float, positive_int
from radixkv.errors import RadixKVError
from radixkv.scheduling.schedules import POLICIES

DEFAULT_SCHEDULES = ",".join(POLICIES)


def add_parser(sub: argparse._SubParsersAction, make: Callable[..., argparse.ArgumentParser]) -> None:
    s = make(sub, "simulate", "serving simulator: the real Scheduler and RadixCache on a trace with arrival "
                              "times, a cost model of one H100 serving an 8B model for the forward", cmd_simulate)
    s.add_argument("--trace", action="append", metavar="FILE", required=True,
                   help="JSON lines: Mooncake FAST'25 ({\"timestamp\": ms, \"input_length\", \"output_length\", "
                        "\"hash_ids\"}) or tokens ({\"tokens\", \"prompt_len\", optional \"timestamp\", "
                        "\"output_len\"}); repeatable")
    s.add_argument("--schedule", type=csv_of(one_of(POLICIES)), default=DEFAULT_SCHEDULES,
                   help=f"queue orders to compare, of {','.join(POLICIES)}")
    s.add_argument("--load", type=csv_of(positive_float), default="0.8,1.2",
                   help="arrivals rescaled so the trace's work (priced with no prefix reuse) is this multiple "
                        "of the server's capacity")
    s.add_argument("--scale", type=fraction, default=1.0, help="simulate the first fraction of each trace")
    s.add_argument("--capacity", type=positive_float, default=None,
                   help="cache size: tokens (> 1) or a fraction (<= 1) of the trace's unique tokens; default: "
                        "the KV one H100 holds beside the 8B weights (cost model, 400k tokens)")
    s.add_argument("--page-size", "--block-size", type=positive_int, default=16,
                   help="tokens per page (a Mooncake trace runs one 512-token block per page; it must divide it)")
    s.add_argument("--seed", type=int, default=0, help="Poisson arrivals for traces without timestamps")
    s.add_argument("--json", default=os.path.join("bench", "out", "simulate.json"), metavar="OUT",
                   help="results as JSON; the TTFT CDF PNGs go beside it")
    s.add_argument("--no-plots", action="store_true")


def cmd_simulate(a: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from radixkv.scheduling import sim_report
    from radixkv.scheduling.cost_model import CostModel
    from radixkv.scheduling.sim_trace import read_sim_trace

    cost = CostModel()
    try:
        traces = [_scaled(read_sim_trace(p, os.path.splitext(os.path.basename(p))[0]), a.scale) for p in a.trace]
    except RadixKVError as e:  # TraceFormatError included
        a.parser.error(str(e))
    con = Console(width=None if os.isatty(1) else 200)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con) as prog:
        def on_start(label: str, total: int) -> Callable[[int], None]:
            task = prog.add_task(label, total=total)
            return lambda done: prog.update(task, completed=done)

        try:
            runs = sim_report.run_all(traces, a.schedule, a.load, a.capacity, a.page_size, cost, on_start)
        except RadixKVError as e:
            a.parser.error(str(e))
    con.print(sim_report.table(runs))
    con.print(f"cost model: {cost.name}, prefill {cost.prefill_tokens_per_s():,.0f} tok/s, "
              f"{cost.kv_capacity_tokens:,} KV tokens (radixkv/scheduling/cost_model.py)")
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    sim_report.write_json(runs, cost, a.json)
    paths = [] if a.no_plots else sim_report.plot_cdfs(runs, os.path.dirname(a.json) or ".")
    con.print(f"wrote {a.json} {' '.join(paths)}")
    return 0


def _scaled(trace, scale: float):  # noqa: ANN001, ANN202 - SimTrace in, SimTrace out
    trace.requests = trace.requests[:max(1, math.ceil(scale * len(trace.requests)))]
    return trace
