"""PNG plots of a bench run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixkv.bench.main import BenchReport


def _plt():  # late import: matplotlib is the [bench] extra, and Agg must be chosen first
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def hit_rate_vs_capacity(rep: BenchReport, path: str) -> None:
    """One panel per workload: token hit rate vs capacity per policy, OPT dashed, SGLang as x."""
    plt = _plt()
    names = list(rep.workloads)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        cells = [c for c in rep.cells if c.workload == name]
        x = [c.frac for c in cells]
        ax.plot(x, [c.opt for c in cells], "k--", lw=2, label="OPT (Belady)")
        for pol in rep.policies:
            ax.plot(x, [c.runs[pol].hit_rate for c in cells], marker="o", ms=3, label=pol)
        for pol in sorted({p for c in cells for p in c.sglang}):
            ax.plot(x, [c.sglang[pol].hit_rate if pol in c.sglang else math.nan for c in cells],
                    "x", ms=7, label=f"SGLang {pol}")
        ax.set_title(name)
        ax.set_xscale("log")
        ax.set_xticks(x, [f"{f:.0%}" for f in x])
        ax.minorticks_off()
        ax.ticklabel_format(axis="y", useOffset=False)
        lo, hi = ax.get_ylim()
        if hi - lo < 0.05:  # all policies tie (e.g. fewshot): do not magnify 1e-6 differences
            mid = (lo + hi) / 2
            ax.set_ylim(mid - 0.025, min(1.0, mid + 0.025))
        ax.set_xlabel("capacity (share of the trace's unique tokens)")
        ax.set_ylabel("token hit rate")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def op_latency(rep: BenchReport, path: str) -> None:
    """p50 and p99 latency of each cache call per policy, over every run of the bench."""
    import numpy as np

    plt = _plt()
    from radixkv.bench.runner import OPS

    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(rep.policies)
    for i, pol in enumerate(rep.policies):
        lat = {op: np.concatenate([c.runs[pol].latency_ns[op] for c in rep.cells]) / 1e3 for op in OPS}
        xs = np.arange(len(OPS)) + i * width
        ax.bar(xs, [np.quantile(lat[op], 0.5) for op in OPS], width, label=f"{pol} p50")
        ax.scatter(xs, [np.quantile(lat[op], 0.99) for op in OPS], marker="_", s=120, color="k")
    ax.set_xticks(np.arange(len(OPS)) + 0.4 - width / 2, OPS)
    ax.set_ylabel("microseconds (bar p50, tick p99)")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("per-call latency of the cache bookkeeping")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def memory_saved(rep: BenchReport, path: str) -> None:
    """KV bytes to hold every request of a workload: without sharing vs one copy per prefix."""
    import numpy as np

    plt = _plt()
    names = list(rep.workloads)
    xs = np.arange(len(names))
    gib = 1 << 30
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar(xs - 0.2, [rep.memory[n][0] / gib for n in names], 0.4, label="no sharing")
    ax.bar(xs + 0.2, [rep.memory[n][1] / gib for n in names], 0.4, label="radixkv (shared prefixes)")
    ax.set_xticks(xs, names)
    ax.set_ylabel(f"GiB of KV ({rep.model}, {rep.dtype})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(rep: BenchReport, out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, f) for f in ("hit_rate.png", "latency.png", "memory.png")]
    for fn, p in zip((hit_rate_vs_capacity, op_latency, memory_saved), paths):
        fn(rep, p)
    return paths
