"""bench/sched_tail.py --episodes: congestion episodes are the runs of arrivals that found some request waiting,
cut at each arrival that found none, and an episode's row says what passed its longest TTFT."""

from __future__ import annotations

from scripts import ROOT, load_script


def test_episodes_cut_where_the_queue_emptied_and_fcfs_passes_nobody(tmp_path) -> None:
    tail = load_script(ROOT / "bench" / "sched_tail.py")
    for schedule in ("fcfs", "lpm"):
        sim, out = tail.simulate("short-s12", "1/4", 1.2, schedule, 120, str(tmp_path))
        parts = tail.episodes(sim)
        assert [i for p in parts for i in p] == list(range(len(sim.reqs)))  # every arrival once, in order
        reqs = sim.reqs
        for part in parts:
            first = reqs[part.start]
            assert all(r.admitted_s <= first.arrive_s for r in reqs[:part.start])  # found nobody waiting
            for i in part[1:]:  # the others each found someone
                assert any(r.admitted_s > reqs[i].arrive_s for r in reqs[:i])
        assert any(len(p) > 1 for p in parts)  # load 1.2 on a quarter H100: some queue forms
        rows = [tail.episode_row(sim, out, p) for p in parts]
        assert sum(r["requests"] for r in rows) == len(reqs)
        for part, row in zip(parts, rows):
            assert row["max_s"] == max(out.ttft_s[i] for i in part) and row["worst"] in part
            if schedule == "fcfs":
                assert row["passed_blocks"] == 0
        if schedule == "lpm":
            assert any(r["passed_blocks"] > 0 for r in rows)
