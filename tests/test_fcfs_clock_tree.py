"""The FCFS clock priced by FCFS's own cache (radixkv/scheduling/fcfs_clock.py with a tree, Auto.FCFS_TREE): a
metadata-only prefix tree fed in the fluid queue's order prices each request at the prompt tokens it lacks, and the
queue drains that work at the uncached tokens the real server admitted."""

from __future__ import annotations

import pytest

from radixkv.scheduling.auto import Auto
from radixkv.scheduling.fcfs_clock import FcfsClock, make_clock
from radixkv.scheduling.scheduler import Request

from test_scheduling import cache_prefix, make_cache, queued, tokens


def clock(share: float, slots: int = 4096) -> FcfsClock:
    return make_clock(100.0, make_cache(slots).config, share, "lru")


def test_a_prompt_fcfs_s_cache_holds_costs_only_what_it_lacks() -> None:
    """b repeats a's 200 tokens and adds one: with the tree it costs 1 (matched on all but its last token), so c
    starts at 201, not at 401 as with the prompt as work."""
    a = tokens(1, 200)
    for share, start in [(1.0, 201.0), (0.0, 401.0)]:
        fluid = clock(share)
        reqs = [Request(0, a, 200, 1), Request(1, a + [7], 201, 1), Request(2, tokens(2, 300), 300, 1)]
        for r in reqs:
            fluid.arrived(r, 0.0)
        fluid.advance(1000.0)
        assert fluid.start(reqs[2]) == pytest.approx(start)
        if share:
            assert (fluid.prompts, fluid.work) == (701, 501)


def test_the_tree_holds_the_cache_s_size_and_evicts_the_least_recent() -> None:
    """A tree of 0.05 x 4096 slots (204 tokens): a second 200-token prompt evicts all but the first page (4 tokens)
    of the first, the least recently used, which then costs 197 of its 201 again."""
    a, x = tokens(1, 200), tokens(3, 200)
    fluid = clock(0.05)
    assert fluid.capacity == 204
    for i, p in enumerate([a, x, a + [7]]):
        fluid.arrived(Request(i, p, len(p), 1), 0.0)
    fluid.advance(1000.0)
    assert fluid.work == 200 + 200 + 197


def test_with_a_tree_the_rate_is_in_uncached_tokens() -> None:
    """A saturated step admits 100 prompt tokens, 60 of them cached, over 10 clock units: 4 a unit with a tree
    (the work it drains is uncached), 10 without."""
    for share, rate in [(1.0, 4.0), (0.0, 10.0)]:
        fluid = clock(share)
        r = Request(0, tokens(1, 100), 100, 1)
        fluid.arrived(r, 0.0)
        fluid.step(0.0, True)
        fluid.admitted(r, 0.0, 60)
        fluid.step(10.0, False)
        assert fluid.rate == pytest.approx(rate)


def test_admitted_requests_still_fill_fcfs_s_cache_but_are_not_read() -> None:
    """The real server admits b before the fluid queue reaches it: no start is read for it, its prompt still goes
    into FCFS's cache (c, which repeats it, costs 1), and its tokens growing by its output do not change that."""
    fluid = clock(1.0)
    a, b, c = Request(0, tokens(1, 200), 200, 1), Request(1, tokens(2, 100), 100, 1), None
    fluid.arrived(a, 0.0)
    fluid.arrived(b, 0.0)
    fluid.admitted(b, 0.0)
    b.tokens.append(5)  # its first output token
    c = Request(2, tokens(2, 100) + [9], 101, 1)
    fluid.arrived(c, 0.0)
    fluid.advance(1000.0)
    assert fluid.start(b) is None and fluid.start(c) == pytest.approx(300.0)
    assert fluid.work == 301


@pytest.mark.parametrize("share, first", [(1.0, True), (0.0, False)])
def test_auto_reads_the_tree_clock(share: float, first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """0 (200 cold tokens) and 1 (0 again and one more) arrive, then a cold 300-token request (2) and three whose
    60-token prefix the real cache holds; 0 and 1 are admitted. At clock 300, with FCFS_LATE 0: FCFS's cache held
    0 for 1, so the fluid queue started 2 at 201, and 2 is overdue and goes first; with the prompt as work it
    starts at 401 (not reached yet) and the cached requests go before it (deadline order)."""
    monkeypatch.setattr(Auto, "FCFS_LATE", 0.0)
    monkeypatch.setattr(Auto, "FCFS_TREE", share)
    cache = make_cache()
    hot, cold = tokens(1, 60), tokens(2, 200)
    cache_prefix(cache, hot)
    prompts = [cold, cold + [7], tokens(3, 300)] + [hot + tokens(5 + i, 8) for i in range(3)]
    sched, reqs = queued(cache, prompts, "auto")
    policy = sched.policy
    assert isinstance(policy, Auto) and policy.fcfs is not None and (policy.fcfs.tree is None) == (share == 0)
    for r in reqs[:2]:
        sched.waiting.remove(r)
        policy.admitted(r, 0.0)
    sched.planned = 300
    window = list(sched.waiting)
    sched.estimates.refresh(window)
    got = [r.index for r in policy.order(window, sched.clock())]
    assert got == ([2, 3, 4, 5] if first else [3, 4, 5, 2])


def test_the_fcfs_waits_quantile() -> None:
    """Waits of every request reached (start - arrival): 0, 200, 201 here; the lower quantile."""
    fluid = clock(1.0)
    a = tokens(1, 200)
    for r in [Request(0, a, 200, 1), Request(1, a + [7], 201, 1), Request(2, tokens(2, 300), 300, 1)]:
        fluid.arrived(r, 0.0)
    assert fluid.wait_quantile(0.9) == 0.0
    fluid.advance(1000.0)
    assert fluid.waits == [0.0, 200.0, pytest.approx(201.0)]
    assert (fluid.wait_quantile(0.4), fluid.wait_quantile(0.5), fluid.wait_quantile(1.0)) == (0.0, 200.0, 201.0)


@pytest.mark.parametrize("tail, first", [(0.0, True), (0.5, True), (1.0, False)])
def test_with_fcfs_tail_an_overdue_request_must_also_have_waited_past_the_tail_s_fcfs_wait(
        tail: float, first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree clock's scenario above (2 waited 300, its FCFS wait 201), the clock's waits so far 0, 200, 201 and
    one of 1,000: past the 0.5 quantile (200), not the 1.0 one (1,000); FCFS_TAIL 0: no such condition."""
    monkeypatch.setattr(Auto, "FCFS_TAIL", tail)
    orig = FcfsClock._reach

    def reach(self: FcfsClock, req: Request, n: int, t: float) -> None:
        orig(self, req, n, t)
        if req.index == 0:
            self.waits.append(1000.0)  # an earlier request FCFS kept waiting long

    monkeypatch.setattr(FcfsClock, "_reach", reach)
    test_auto_reads_the_tree_clock(1.0, first, monkeypatch)
