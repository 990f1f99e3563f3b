"""PNG plots of a bench run (matplotlib, Agg backend: no display needed; the `plots` extra).

Written to be read at a glance: one legend per figure, a title on every figure and panel, every
axis labelled. Policies differ in colour, marker and dash, and markers shrink from the first
policy to the last, so two policies with identical results still both show (a small marker inside
a larger hollow one); a panel also names such ties. Every hit-rate panel spans at least 0.2 of
hit rate, so a flat result is drawn flat instead of magnified into a slope.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from radixkv.bench.main import BenchReport, Cell

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (3, 1)), "-", "--")
MIN_SPAN = 0.2  # the narrowest hit-rate range a panel shows


def _plt():  # noqa: ANN202 - late import: matplotlib is the `plots` extra, and Agg must be chosen first
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _short(summary: str) -> str:
    """'generated-shared-prefix: 64 groups ...' -> 'generated-shared-prefix'."""
    return summary.split(":")[0]


def _ties(series: dict[str, list[float]]) -> list[str]:
    """'fifo = lru' for every policy whose results equal an earlier one's at every capacity."""
    out, names = [], list(series)
    for i, b in enumerate(names):
        same = next((a for a in names[:i] if np.allclose(series[a], series[b], rtol=0, atol=1e-9)), None)
        if same is not None:
            out.append(f"{b} = {same}")
    return out


def _hit_panel(ax, cells: list[Cell], policies: tuple[str, ...], peers: list[str]) -> None:  # noqa: ANN001
    x = [c.frac for c in cells]
    ax.plot(x, [c.opt for c in cells], color="k", ls="--", lw=2, label="OPT (Belady, offline optimum)", zorder=1)
    series = {p: [c.runs[p].hit_rate for c in cells] for p in policies}
    big, step = 11, 6 / max(1, len(policies) - 1)
    for i, (pol, ys) in enumerate(series.items()):
        ax.plot(x, ys, ls=DASHES[i % len(DASHES)], marker=MARKERS[i % len(MARKERS)], ms=big - i * step,
                mfc="none" if i == 0 else None, lw=1.4, label=f"radixkv {pol}", zorder=2 + i)
    for j, pol in enumerate(peers):
        ys = [c.sglang[pol].hit_rate if pol in c.sglang else math.nan for c in cells]
        ax.plot(x, ys, color=("0.35", "0.6")[j % 2], ls=":", marker=("x", "+")[j % 2], ms=9, mew=2,
                label=f"SGLang {pol}", zorder=20)
    ties = _ties(series)
    if ties:
        ax.text(0.98, 0.03, "equal: " + ", ".join(ties), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=7, color="0.3")
    ax.set_ylim(*_y_range([v for ys in series.values() for v in ys] + [c.opt for c in cells]))
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{f:.0%}" for f in x])
    ax.minorticks_off()
    ax.set_xlabel("cache capacity (share of the trace's unique tokens)")
    ax.set_ylabel("token hit rate")
    ax.grid(alpha=0.3)


def _y_range(values: list[float]) -> tuple[float, float]:
    """At least MIN_SPAN of hit rate around the values, inside [0, 1] (plus room for a marker at 1)."""
    lo, hi = min(values), max(values)
    pad = max(0.02, (MIN_SPAN - (hi - lo)) / 2)
    top = min(1.0, hi + pad)
    return max(0.0, min(lo - pad, top - MIN_SPAN)), top + 0.01


def hit_rate_figure(rep: BenchReport):  # noqa: ANN201 - a matplotlib Figure
    """One panel per workload: token hit rate vs capacity per policy, OPT dashed, SGLang when it ran."""
    plt = _plt()
    names = list(rep.workloads)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows + 1.2), squeeze=False)
    peers = sorted({p for c in rep.cells for p in c.sglang})
    for ax, name in zip(axes.flat, names):
        _hit_panel(ax, [c for c in rep.cells if c.workload == name], rep.policies, peers)
        ax.set_title(f"{name}: {_short(rep.workloads[name])}", fontsize=10)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    ncol = math.ceil(len(labels) / math.ceil(len(labels) / 6))  # at most 6 per row, rows evenly filled
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    who = f"radixkv policies{' and SGLang ' + ', '.join(peers) if peers else ''}"
    fig.suptitle(f"Token hit rate vs cache capacity: {who} replay the same traces (page size {rep.page_size}; "
                 f"higher is better)", fontsize=11)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * math.ceil(len(labels) / 6), 1, 0.97))
    return fig


def latency_figure(rep: BenchReport):  # noqa: ANN201 - a matplotlib Figure
    """p50 (bar) and p99 (tick) latency of each cache call per policy, over every run of the bench."""
    plt = _plt()
    from radixkv.bench.runner import OPS

    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(rep.policies)
    for i, pol in enumerate(rep.policies):
        lat = {op: np.concatenate([c.runs[pol].latency_ns[op] for c in rep.cells]) / 1e3 for op in OPS}
        xs = np.arange(len(OPS)) + i * width
        ax.bar(xs, [np.quantile(lat[op], 0.5) for op in OPS], width, label=f"{pol}", hatch=("", "//", "..", "xx",
               "\\\\", "++")[i % 6], edgecolor="white", lw=0)
        ax.scatter(xs, [np.quantile(lat[op], 0.99) for op in OPS], marker="_", s=140, color="k",
                   label="p99 (tick)" if i == 0 else None, zorder=3)
    ax.set_xticks(np.arange(len(OPS)) + 0.4 - width / 2, OPS)
    ax.set_xlabel("RadixCache call (tree-level lifecycle of one request)")
    ax.set_ylabel("microseconds per call (log)")
    ax.set_yscale("log")
    ax.legend(title="policy (bar = p50)", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    load = "-".join(f"{x:.1f}" for x in rep.load_average)
    ax.set_title(f"Per-call latency of the cache bookkeeping, all workloads and capacities\n(page size "
                 f"{rep.page_size}; {os.cpu_count()} cpus, 1-min load average {load} during the run)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def memory_figure(rep: BenchReport):  # noqa: ANN201 - a matplotlib Figure
    """KV bytes to hold every request of a workload: one copy per request vs one copy per prefix."""
    plt = _plt()
    names = list(rep.workloads)
    xs = np.arange(len(names))
    gib = 1 << 30
    no, yes = (np.array([rep.memory[n][k] / gib for n in names]) for k in (0, 1))
    fig, ax = plt.subplots(figsize=(9, 4.4))
    ax.bar(xs - 0.2, no, 0.4, color="0.65",
           label="no sharing: each request holds KV for its whole sequence (prompt + output), no prefix cache")
    bars = ax.bar(xs + 0.2, yes, 0.4, color="C0", label="radix tree: the KV of each distinct prefix is stored once")
    for bar, a, b in zip(bars, no, yes):
        ax.annotate(f"-{1 - b / a:.0%}", (bar.get_x() + bar.get_width() / 2, b), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(xs, names)
    ax.set_xlabel("workload")
    ax.set_ylabel(f"GiB of KV ({rep.model}, {rep.dtype})")
    ax.set_title("KV memory to hold every request of the trace at once, without and with prefix sharing")
    ax.set_ylim(0, no.max() * 1.3)  # room for the legend above the bars
    ax.legend(fontsize=8, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


FIGURES = {"hit_rate.png": hit_rate_figure, "latency.png": latency_figure, "memory.png": memory_figure}


def write_all(rep: BenchReport, out_dir: str) -> list[str]:
    """Draw every figure into `out_dir`; returns the paths written."""
    plt = _plt()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, figure in FIGURES.items():
        fig = figure(rep)
        paths.append(os.path.join(out_dir, name))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
