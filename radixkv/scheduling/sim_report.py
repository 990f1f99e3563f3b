"""`radixkv simulate`: run every (trace, schedule, load) and report it as a table, JSON and TTFT CDFs.

JSON (the contract in DESIGN.md):
    {"cost_model": {...CostModel fields, prefill_tokens_per_s},
     "runs": [{"trace", "schedule", "load", "requests", "hit_rate", "ttft_mean_s", "ttft_p50_s",
               "ttft_p99_s", "max_wait_s", "throughput_tok_s"}, ...]}
`hit_rate`: prompt tokens found in the cache when each request was first admitted / prompt tokens;
`max_wait_s`: the longest arrival-to-first-admission; `throughput_tok_s`: output tokens per second
from the first arrival to the last finish. Percentiles interpolate linearly (numpy's default).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from radixkv.scheduling.cost_model import CostModel
from radixkv.scheduling.sim_trace import SimTrace
from radixkv.scheduling.simulate import Outcome, Simulation

MARKERS = ("o", "s", "^", "D", "v", "P")


@dataclass
class Run:
    trace: str
    schedule: str
    load: float
    outcome: Outcome
    capacity: int  # cache tokens
    seconds: float  # wall time of the simulation

    def summary(self) -> dict[str, float | int | str]:
        o = self.outcome
        p50, p99 = np.percentile(o.ttft_s, [50, 99]).tolist()
        return {"trace": self.trace, "schedule": self.schedule, "load": self.load, "requests": len(o.ttft_s),
                "hit_rate": o.reused_tokens / o.prompt_tokens, "ttft_mean_s": float(o.ttft_s.mean()),
                "ttft_p50_s": p50, "ttft_p99_s": p99, "max_wait_s": float(o.wait_s.max()),
                "throughput_tok_s": o.output_tokens / o.makespan_s if o.makespan_s > 0 else float("nan")}


def unique_tokens(trace: SimTrace) -> int:
    """Real tokens a cache needs to hold every prompt at once (distinct prefixes, whole cache tokens)."""
    seen: set[int] = set()
    for r in trace.requests:
        h = 0
        for t in r.units:  # a chained hash per prefix: O(tokens), not O(tokens^2) tuples
            h = hash((h, t))
            seen.add(h)
    return len(seen) * trace.unit


def capacity_tokens(capacity: float | None, trace: SimTrace, cost: CostModel) -> int:
    """--capacity: None -> the cost model's KV; <= 1 -> that fraction of the trace's unique tokens."""
    if capacity is None:
        return cost.kv_capacity_tokens
    return int(capacity * unique_tokens(trace)) if capacity <= 1 else int(capacity)


def run_all(traces: list[SimTrace], schedules: list[str], loads: list[float], capacity: float | None,
            page_size: int, cost: CostModel, on_start: Callable[[str, int], Callable[[int], None]]) -> list[Run]:
    """Every combination, in order. `on_start(label, requests)` returns a progress callback."""
    runs = []
    for trace in traces:
        cap = capacity_tokens(capacity, trace, cost)
        for load in loads:
            for schedule in schedules:
                sim = Simulation(trace, schedule, load, cap, page_size, cost)
                t0 = time.perf_counter()
                outcome = sim.run(on_start(f"{trace.name} {schedule} load {load:g}", len(trace.requests)))
                runs.append(Run(trace.name, schedule, load, outcome, sim.capacity, time.perf_counter() - t0))
    return runs


def write_json(runs: list[Run], cost: CostModel, path: str) -> None:
    with open(path, "w") as f:
        json.dump({"cost_model": cost.as_dict(), "runs": [r.summary() for r in runs]}, f, indent=1)


def table(runs: list[Run]):  # noqa: ANN201 - a rich Table
    from rich.table import Table

    t = Table(title="radixkv simulate: TTFT and hit rate per schedule (simulated H100 seconds)")
    for col in ("trace", "load", "schedule", "hit rate", "TTFT mean", "p50", "p99", "max wait", "out tok/s",
                "preempt", "matched/step", "sim s"):
        t.add_column(col, justify="left" if col in ("trace", "schedule") else "right")
    for r in runs:
        s, o = r.summary(), r.outcome
        t.add_row(r.trace, f"{r.load:g}", r.schedule, f"{s['hit_rate']:.3f}", f"{s['ttft_mean_s']:.2f}",
                  f"{s['ttft_p50_s']:.2f}", f"{s['ttft_p99_s']:.2f}", f"{s['max_wait_s']:.1f}",
                  f"{s['throughput_tok_s']:.0f}", str(o.preemptions), f"{o.matched / max(1, o.steps):.2f}",
                  f"{r.seconds:.1f}")
    return t


def plot_cdfs(runs: list[Run], out_dir: str) -> list[str]:
    """One PNG per trace: a TTFT CDF panel per load, one line per schedule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for trace in dict.fromkeys(r.trace for r in runs):
        mine = [r for r in runs if r.trace == trace]
        loads = list(dict.fromkeys(r.load for r in mine))
        fig, axes = plt.subplots(1, len(loads), figsize=(6.5 * len(loads), 5), squeeze=False)
        for ax, load in zip(axes[0], loads):
            for i, r in enumerate(x for x in mine if x.load == load):
                ttft = np.sort(r.outcome.ttft_s)
                y = np.arange(1, len(ttft) + 1) / len(ttft)
                ax.plot(ttft, y, lw=1.6, ls=("-", "--", "-.", ":")[i % 4], marker=MARKERS[i % len(MARKERS)],
                        markevery=max(1, len(ttft) // 8), label=f"{r.schedule} (p99 {np.percentile(ttft, 99):.1f} s)")
            ax.set_xscale("log")
            ax.set_xlabel("time to first token, simulated seconds (log scale)")
            ax.set_ylabel("fraction of requests")
            ax.set_title(f"load {load:g} x server capacity")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(loc="lower right", fontsize=9)
        fig.suptitle(f"{trace}: TTFT CDF per schedule ({mine[0].capacity:,} cache tokens, cost model: "
                     f"8B on one H100)")
        fig.tight_layout()
        path = os.path.join(out_dir, f"ttft_cdf_{trace}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
