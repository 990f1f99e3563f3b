"""The bench figures as a reader meets them: one legend, titles and labels everywhere, SGLang drawn
when it ran (with the numbers it reported), equal curves both visible and named, flat panels flat."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from radixkv.bench import plots  # noqa: E402
from radixkv.bench.main import BenchReport, run_bench  # noqa: E402
from radixkv.bench.sglang_peer import PeerResult  # noqa: E402


@pytest.fixture(scope="module")
def report() -> BenchReport:
    # fewshot: every policy ties at every capacity (its exemplar block always fits); gsp: lru = fifo.
    return run_bench(["gsp", "fewshot"], [0.1, 0.5], ["lru", "fifo", "adaptive"], scale=0.05)


def _with_sglang(rep: BenchReport) -> BenchReport:
    for i, cell in enumerate(rep.cells):
        cell.sglang = {"lru": PeerResult(cell.capacity, 0.3 + 0.01 * i, 1000.0)}
    return rep


def _labels(fig) -> list[str]:  # noqa: ANN001
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_hit_rate_figure_reads_at_a_glance(report: BenchReport) -> None:
    fig = plots.hit_rate_figure(report)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert len(panels) == 2 and len(fig.legends) == 1  # one legend for the figure, none per panel
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert fig._suptitle is not None and "hit rate" in fig._suptitle.get_text()
    for ax in panels:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        lo, hi = ax.get_ylim()
        assert hi - lo >= plots.MIN_SPAN - 1e-9  # never magnified into a false slope
    assert _labels(fig) == ["OPT (Belady, offline optimum)", "radixkv lru", "radixkv fifo", "radixkv adaptive"]
    gsp, fewshot = panels
    # Equal results stay visible (distinct marker sizes) and are named in the panel.
    sizes = {line.get_label(): line.get_markersize() for line in gsp.get_lines()}
    assert len({sizes["radixkv lru"], sizes["radixkv fifo"], sizes["radixkv adaptive"]}) == 3
    lru = [c.runs["lru"].hit_rate for c in report.cells if c.workload == "gsp"]
    fifo = [c.runs["fifo"].hit_rate for c in report.cells if c.workload == "gsp"]
    notes = " ".join(t.get_text() for t in gsp.texts)
    assert ("fifo = lru" in notes) == bool(np.allclose(lru, fifo, rtol=0, atol=1e-9))
    assert "fifo = lru" in " ".join(t.get_text() for t in fewshot.texts)


def test_sglang_is_drawn_with_its_numbers_when_it_ran(report: BenchReport) -> None:
    rep = _with_sglang(report)
    try:
        fig = plots.hit_rate_figure(rep)
        assert "SGLang lru" in _labels(fig) and "SGLang" in fig._suptitle.get_text()
        for ax, name in zip(fig.axes, ("gsp", "fewshot")):
            line = next(line for line in ax.get_lines() if line.get_label() == "SGLang lru")
            want = [c.sglang["lru"].hit_rate for c in rep.cells if c.workload == name]
            assert list(line.get_ydata()) == pytest.approx(want)
    finally:
        for cell in rep.cells:
            cell.sglang = {}


def test_memory_and_latency_figures_are_titled_and_labelled(report: BenchReport) -> None:
    mem = plots.memory_figure(report)
    ax = mem.axes[0]
    assert "without and with prefix sharing" in ax.get_title() and ax.get_ylabel().startswith("GiB of KV")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("no sharing: each request holds KV for its whole sequence")
    heights = [b.get_height() for b in ax.patches]
    gib = 1 << 30
    assert heights == pytest.approx([report.memory[n][0] / gib for n in report.workloads]
                                    + [report.memory[n][1] / gib for n in report.workloads])
    lat = plots.latency_figure(report).axes[0]
    assert "latency" in lat.get_title() and "load average" in lat.get_title()
    assert lat.get_xlabel() and lat.get_ylabel()
