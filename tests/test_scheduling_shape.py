"""auto on thin traces (radixkv/scheduling/auto.py, `Auto.thin`; shape.py, `TraceShape.busy`): K_THIN instead
of K while the server does not keep up (some request waited for BUSY of the clock since the first arrival) and K_LIGHT
while it does, and SHARE_OVER in a backlog of OVER caches, only where the cache holds few prompts, the admitted
prompts' cached share is low and arrivals are not bursty, judged once WARMUP caches of prompt tokens were admitted.
While the server keeps up, at-risk requests first (the TAIL quantile of the work arrivals found waiting), in short
congestion episodes (EPISODE caches arrived since an arrival found none waiting)."""

from __future__ import annotations

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.scheduling.scheduler import Request, Scheduler
from radixkv.scheduling.shape import TraceShape

pytestmark = pytest.mark.usefixtures("auto_own_order")  # auto's own rules (conftest.py)

SLOTS = 400


def make_cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=SLOTS, page_size=1,
                                  max_requests=64, max_context_len=512, dtype=torch.float32))


def run(gaps: list[float], cached: int, n: int = 40, delay: float = 0.0,
        **constants: float) -> tuple[Scheduler, list[bool]]:
    """`len(gaps) + 1` requests of `n` tokens arriving `gaps` apart, each with its first `cached` tokens in the
    tree, ordered and admitted one by one `delay` after its arrival (so `cached / n` is the share the policy sees,
    and `delay / gap` the share of the clock some request waits). Returns the scheduler and the policy's thin()
    after each admission."""
    now = [0.0]
    cache = make_cache()
    hot = list(range(100_000, 100_000 + cached))
    if cached:
        seq = cache.open(hot)
        cache.reserve(seq, cached)
        cache.commit(seq, hot)
        cache.close(seq)
    sched = Scheduler(cache, 64, schedule="auto", clock=lambda: now[0])
    policy = sched.policy
    for name, value in constants.items():
        setattr(policy, name, value)
    thin = []
    for i, gap in enumerate([0.0] + gaps):
        now[0] += gap - (delay if i else 0.0)
        req = Request(i, hot + [i * 1000 + j for j in range(n - cached)], n, 1)
        sched.add(req)
        now[0] += delay
        sched.estimates.refresh([req])
        assert policy.order([req], now[0]) == [req]
        sched.waiting.remove(req)
        sched.estimates.drop(req)
        policy.admitted(req, now[0])
        thin.append(policy.thin())
    return sched, thin


SMALL = {"PROMPTS": 12.0}  # one cache (400 tokens) holds 10 prompts of 40 tokens: fewer than 12


def test_a_steady_low_reuse_trace_on_a_small_cache_is_thin_after_the_warmup() -> None:
    sched, thin = run([10.0] * 20, cached=8, **SMALL)  # 8 of 40 cached: 0.2 <= REUSE (0.33)
    assert thin == [False] * 9 + [True] * 12  # from the tenth admission on: one cache of tokens admitted
    shape = sched.policy.shape
    assert (shape.admitted, shape.cached, shape.prompts) == (21 * 40, 21 * 8, 21)


@pytest.mark.parametrize("gaps, cached, constants", [
    ([10.0] * 20, 16, SMALL),  # 16 of 40 cached (0.4): reused much
    (([100.0] + [1.0] * 9) * 2, 8, SMALL),  # bursts: the gaps' coefficient of variation is above 2 (2.6-2.7)
    ([10.0] * 20, 8, {"PROMPTS": 8.0}),  # a cache of 10 prompts holds more than 8
    ([10.0] * 20, 8, {**SMALL, "REUSE": -1.0}),  # the rule off (main's K and S everywhere)
])
def test_a_trace_that_reuses_much_comes_in_bursts_or_fits_the_cache_is_not(gaps, cached, constants) -> None:
    assert run(gaps, cached, **constants)[1] == [False] * (len(gaps) + 1)


@pytest.mark.parametrize("delay", [0.0, 4.0, 9.0])
def test_busy_is_the_share_of_the_clock_some_request_waited(delay: float) -> None:
    """Arrivals 10 apart, each admitted `delay` later: some request waits delay / 10 of the clock."""
    sched, _ = run([10.0] * 20, cached=8, delay=delay, **SMALL)
    shape = sched.policy.shape
    end = 200.0 + delay  # the last admission: 20 gaps of 10 after the first arrival, then its delay
    assert shape.busy(end, False) == pytest.approx(21 * delay / end)
    assert shape.busy(end + 100.0, False) == pytest.approx(21 * delay / (end + 100.0))  # nobody waits: it falls
    req = Request(99, list(range(500_000, 500_040)), 40, 1)
    sched.clock = lambda: end + 100.0
    sched.add(req)  # one waits from end + 100 on
    assert shape.busy(end + 200.0, True) == pytest.approx((21 * delay + 100.0) / (end + 200.0))


def deadline_order(delay: float, earlier: float = 120.0, gaps: int = 20,
                   **constants: float) -> tuple[object, list[str]]:
    """A thin trace admitted `delay` after each arrival (10 apart), then, a clock unit after the last admission, a
    cold request 10 tokens longer than another arriving `earlier` clock units before it: by deadlines it goes first
    if `earlier` >= 10 K (a tie: arrival order), else the shorter does. Returns the policy and the order's names, with
    under one cache waiting."""
    sched, thin = run([10.0] * gaps, cached=8, delay=delay, **SMALL, **constants)
    policy, now = sched.policy, 10.0 * gaps + 1.0 + delay  # a clock unit after the last admission
    sched.clock = lambda: now
    assert thin[-1] and policy.K_THIN == 12.0 and policy.SLOWDOWN == 48.0
    longer, short = (Request(100 + i, [(200 + i) * 1000 + j for j in range(n)], n, 1) for i, n in enumerate((40, 30)))
    for req, arrival in ((longer, now - 12.0 - earlier), (short, now - 12.0)):
        sched.add(req)
        req.arrival = arrival  # deadlines: longer now - 12 - earlier + K x 40, short now - 12 + K x 30
    window = [longer, short]
    sched.estimates.refresh(window)
    policy.turn = {r: float("inf") for r in window}  # none due: the deadline order alone
    policy.arrived_tokens = policy.admitted_tokens + SLOTS - 1  # under one cache waits
    names = {id(longer): "longer", id(short): "short"}
    return policy, [names[id(r)] for r in policy.order(window, now)]


@pytest.mark.parametrize("constants, first", [({}, "longer"), ({"K_LIGHT": 48.0}, "short")])
def test_a_thin_trace_the_server_keeps_up_with_orders_by_k_light(constants: dict, first: str) -> None:
    """K_LIGHT (24): the longer request, 360 earlier, goes first (24 x 10 < 360); with K 48 it would not."""
    policy, order = deadline_order(delay=0.0, earlier=360.0, **constants)  # nobody waited
    assert policy.shape.busy(201.0, True) == 0.0 and policy.BUSY == 0.6 and order[0] == first
    policy.REUSE = -1.0  # not thin: K 48 whatever K_LIGHT is
    names = {len(r.tokens): name for r, name in zip(policy.turn, ("longer", "short"))}
    assert [names[len(r.tokens)] for r in policy.order(list(policy.turn), 201.0)] == ["short", "longer"]


def test_a_thin_trace_the_server_does_not_keep_up_with_orders_by_k_thin() -> None:
    policy, order = deadline_order(delay=9.0, PASSED_HEAVY=-1.0)  # 0.9 of the clock waited (21 x 9 of 210); the
    # passed rule off (under PASSED_MAX caches wait it would order by K_PASSED: test_scheduling_tail_first.py)
    assert policy.shape.busy(210.0, True) == pytest.approx(0.9) and order == ["longer", "short"]
    assert policy.share == 0.15
    policy.arrived_tokens += 1  # one cache waits (OVER 1): the due share drops
    policy.OVER = 1.0
    policy.order(list(policy.turn), 210.0)
    assert policy.share == policy.SHARE_OVER == 0.05
    policy.REUSE = -1.0  # not thin: K 48, the shorter first; S again
    names = {len(r.tokens): name for r, name in zip(policy.turn, ("longer", "short"))}
    assert [names[len(r.tokens)] for r in policy.order(list(policy.turn), 210.0)] == ["short", "longer"]
    assert policy.share == 0.15


def test_busy_reads_the_same_whenever_it_is_called() -> None:
    """Reading the busy share between events changes nothing: a shape read at every clock unit with a guessed
    `waiting` ends where one never read does (round 19's Auto read it only on thin traces)."""
    read, unread = TraceShape(), TraceShape()
    for shape in (read, unread):
        shape.arrived(0.0, False)
    for now, waiting in [(10.0, False), (14.0, True), (30.0, False), (41.0, True)]:  # arrivals and admissions
        for t in range(int(now) - 9, int(now)):
            assert read.busy(float(t), True) == read.busy(float(t), True)
            read.busy(float(t), t % 2 == 0)
        for shape in (read, unread):
            shape.note(now, waiting)
    assert read.busy(50.0, False) == unread.busy(50.0, False) == pytest.approx((4.0 + 11.0) / 50.0)


def test_the_work_found_waiting_is_counted_in_bins_of_a_32nd_cache() -> None:
    shape = TraceShape()
    assert shape.ahead_quantile(0.97) == 8.0  # no arrival yet: the top
    for caches in [0.0] * 90 + [0.5, 0.51, 0.6] + [1.0] * 6 + [20.0]:  # 100 arrivals
        shape.found(caches)
    assert shape.ahead_quantile(0.9) == 1 / 32  # 90 found nothing: under the first bin's edge
    assert shape.ahead_quantile(0.92) == 17 / 32  # 0.5 and 0.51 share the bin [16/32, 17/32)
    assert shape.ahead_quantile(0.93) == 20 / 32
    assert shape.ahead_quantile(0.99) == 33 / 32
    assert shape.ahead_quantile(1.0) == 8.0  # 20 caches count as the last bin's


@pytest.mark.parametrize("delay, earlier, reuse, risky", [
    (0.0, 120.0, 0.33, True),  # the server keeps up: the request at risk goes first
    (0.0, 120.0, -1.0, False),  # then not a thin trace (K 48): the deadline order
    (9.0, 60.0, 0.33, False),  # a thin trace the server does not keep up with (K_THIN): the deadline order
])
def test_a_request_at_risk_goes_first_on_a_thin_trace_the_server_keeps_up_with(delay, earlier, reuse,
                                                                                risky) -> None:
    """41 arrivals admitted as they come found no work waiting, so the 0.96 quantile is the first bin's edge (1/32
    cache): a request is at risk once max(the work it found, 12.5 tokens) were admitted since it arrived (read once
    TAIL_AFTER, here 40, requests arrived). The longer request (40 tokens), passed by the shorter one's deadline,
    goes first once at risk, and only then."""
    policy, order = deadline_order(delay, earlier, gaps=40, TAIL_AFTER=40, PASSED_HEAVY=-1.0)  # K_THIN, not K_PASSED
    assert order == ["short", "longer"]  # nobody at risk yet: the deadline order
    policy.REUSE = reuse
    longer, short = policy.turn
    done = policy.admitted_tokens
    assert policy.TAIL == 0.96 and policy.shape.ahead_quantile(policy.TAIL) == 1 / 32
    assert (policy.risk[longer], policy.risk[short]) == (done + SLOTS / 32, done + 40)  # short found longer waiting
    policy.admitted_tokens += 13  # past the longer one's risk, not the shorter one's
    policy.arrived_tokens += 13
    first = policy.order([longer, short], 10.0 * 40 + 1.0 + delay)[0]
    assert (first is longer) is risky


@pytest.mark.parametrize("episode, risky", [(1.05, True), (1.0, False), (7.0, True)])
def test_a_request_at_risk_goes_first_only_in_a_short_congestion_episode(episode: float, risky: bool) -> None:
    """The same thin trace the server keeps up with. The longer request found nothing waiting, so the episode began
    at its arrival; the setup then has SLOTS - 1 tokens arrived and waiting, and 13 more arrive: 412 tokens in the
    episode. The rule reads while under EPISODE caches (400 tokens each) arrived in it: at 1.05 (420 tokens) and the
    default 7 the request at risk goes first, at 1.0 the deadline order stands (a passing overload: round 22)."""
    policy, _ = deadline_order(0.0, 120.0, gaps=40, TAIL_AFTER=40, EPISODE=episode)
    longer, short = policy.turn
    policy.admitted_tokens += 13
    policy.arrived_tokens += 13
    assert policy.arrived_tokens - policy.episode_from == SLOTS - 1 + 13
    first = policy.order([longer, short], 10.0 * 40 + 1.0)[0]
    assert (first is longer) is risky
