"""bench/sched_tail_clock.py: its clocked auto decides as auto does and records a FCFS start for every request; its
offline fluid queue starts each request once the blocks ahead of it drained at the rate given."""

from __future__ import annotations

import numpy as np
import pytest

from scripts import ROOT, load_script


def test_the_fluid_queue_drains_the_blocks_ahead_at_the_rate() -> None:
    clock = load_script(ROOT / "bench" / "sched_tail_clock.py")
    grid = np.arange(0.0, 10.0, clock.DT)
    rate = np.full(len(grid), 10.0)  # blocks a second
    arrive = np.array([0.0, 0.0, 0.0, 5.0])
    pred = clock.fluid(grid, rate, arrive, np.array([10.0, 20.0, 5.0, 1.0]))
    np.testing.assert_allclose(pred, [0.0, 1.0, 3.0, 5.0], atol=clock.DT)  # 10, then 30 blocks ahead; 35 by 3.5


@pytest.mark.parametrize("kind", ["prompt", "oracle", "tree"])
def test_the_clocked_auto_decides_as_auto_and_starts_every_request(kind: str, tmp_path) -> None:
    clock = load_script(ROOT / "bench" / "sched_tail_clock.py")
    tail = load_script(ROOT / "bench" / "sched_tail.py")
    sim, plain = tail.simulate("short-s12", "1/4", 1.2, "auto", 300, str(tmp_path))
    starts, ttft, fluid, _ = clock.clocked_starts("short-s12", "1/4", 1.2, 300, str(tmp_path), 1.0, kind)
    np.testing.assert_array_equal(ttft, plain.ttft_s)  # the same decisions
    assert starts.shape == (300,) and not np.isnan(starts).any()
    arrive = np.array([r.arrive_s for r in sim.reqs])
    assert (starts >= arrive).all()  # never before its arrival
    if kind == "tree":  # FCFS's cache: it held some of the prompts it was fed (short-s12 shares prefixes)
        assert fluid.prompts == sum(r.prompt_len for r in sim.reqs) and 0 < fluid.work < fluid.prompts
