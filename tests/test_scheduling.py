"""Queue orders (radixkv/scheduling/) on a real RadixCache and Scheduler, without a model.

Each order is checked against what its definition says it should pick; the starvation test drives
a stream of hot-prefix requests plus one cold request through the Scheduler and compares how long
the cold one waits under `lpm` (grows with the stream) and `auto` (bounded).
"""

from __future__ import annotations

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.errors import InvalidArgumentError
from radixkv.scheduling.scheduler import Request, Scheduler
from radixkv.scheduling import POLICIES, PrefixEstimates, make_policy
from radixkv.scheduling.auto import Auto

VOCAB = 1000


def make_cache(slots: int = 4096, page_size: int = 4, rows: int = 64) -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=slots, page_size=page_size,
                                  max_requests=rows, max_context_len=1024, dtype=torch.float32))


def tokens(seed: int, n: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def cache_prefix(cache: RadixCache, toks: list[int]) -> None:
    """Put `toks` in the tree as a finished request would leave them."""
    seq = cache.open(toks)
    cache.reserve(seq, len(toks))
    cache.commit(seq, toks)
    cache.close(seq)


def step(sched: Scheduler) -> list[Request]:
    """One step with max_new_tokens = 1: every request whose prefill completes is finished."""
    plan = sched.schedule()
    done = []
    for req, n in zip(plan.requests, plan.chunks):
        c = req.seq.committed_len
        sampling = req.pending == n
        sched.cache.commit(req.seq, req.tokens[c:c + n])
        if sampling:
            done.append(req)
            sched.finish(req)
    sched.cache.check_invariants()
    return done


def test_unknown_schedule_is_rejected_before_anything_changes() -> None:
    cache = make_cache()
    before = cache.sizes()
    with pytest.raises(InvalidArgumentError, match="lpm"):
        Scheduler(cache, 64, schedule="longest")
    with pytest.raises(InvalidArgumentError):
        make_policy(["auto"], PrefixEstimates(cache, None, 1))  # type: ignore[arg-type]
    assert cache.sizes() == before


def queued(cache: RadixCache, prompts: list[list[int]], schedule: str, **kw: int) -> tuple[Scheduler, list[Request]]:
    sched = Scheduler(cache, 64, schedule=schedule, **kw)
    reqs = [Request(i, list(p), len(p), 1) for i, p in enumerate(prompts)]
    for r in reqs:
        sched.add(r)
    return sched, reqs


def order(sched: Scheduler) -> list[int]:
    window = list(sched.waiting)
    if sched.policy.matches:
        sched.estimates.refresh(window)
    return [r.index for r in sched.policy.order(window, sched.clock())]


def test_lpm_orders_by_cached_length_and_fcfs_keeps_arrival_order() -> None:
    cache = make_cache()
    hot, warm = tokens(1, 40), tokens(2, 40)
    cache_prefix(cache, hot)
    cache_prefix(cache, warm[:20])
    prompts = [tokens(3, 30), warm + [5], hot + [7], tokens(4, 10)]  # cached: 0, 20, 40, 0
    assert order(queued(cache, prompts, "lpm")[0]) == [2, 1, 0, 3]
    assert order(queued(cache, prompts, "fcfs")[0]) == [0, 1, 2, 3]
    assert order(queued(cache, prompts, "fcfs-match")[0]) == [0, 1, 2, 3]


def test_hrrn_is_the_response_ratio() -> None:
    cache = make_cache()
    prompts = [tokens(3, 30), tokens(5, 68), tokens(4, 20)]
    sched, reqs = queued(cache, prompts, "hrrn")
    assert order(sched) == [2, 0, 1]  # no wait yet: every ratio is 1, the shorter goes first
    reqs[1].arrival -= 300  # (300 + 68) / 68 = 5.4 beats (0 + 20) / 20
    assert order(sched) == [1, 2, 0]


@pytest.mark.usefixtures("auto_own_order")
def test_auto_orders_by_virtual_deadline_and_late_requests_by_cached_prefix() -> None:
    """auto: deadline = arrival + 48 x (uncached - cached); a request whose deadline has passed is
    late, and late ones go first, longest cached prefix first (lpm's order), then in arrival order.
    The first request of an idle queue is due (nothing was ahead of it) and goes before all."""
    cache = make_cache()
    hot = tokens(1, 60)
    cache_prefix(cache, hot)
    prompts = [tokens(3, 30), tokens(4, 20), hot + tokens(5, 8), tokens(6, 10)]  # uncached - cached: 30, 20, -52, 10
    sched, reqs = queued(cache, prompts, "auto")
    assert sched.policy.turn == {reqs[0]: 0, reqs[1]: 45, reqs[2]: 75, reqs[3]: 1.5 * 118}  # 1.5 x tokens ahead
    assert order(sched) == [0, 2, 3, 1]  # 0 is due; 2 is late at once (deadline < 0); then deadlines 480, 960
    reqs[1].arrival -= 48 * 20 + 1  # 1's deadline is now in the past: late, after 2 (which holds more cached)
    assert order(sched) == [0, 2, 1, 3]
    reqs[1].arrival += 48 * 20 + 1
    sched.planned = 10_000  # every deadline has passed: cached prefix first, then arrival order
    assert order(sched) == [0, 2, 1, 3]


@pytest.mark.usefixtures("auto_own_order")
def test_auto_gives_due_requests_a_share_of_the_tokens_not_all() -> None:
    """When every waiting request is past its FCFS turn (a backlog that keeps growing), the oldest
    get SHARE of the admitted prompt tokens, oldest first (here 1/4, for round numbers; the default
    is smaller); the rest go in deadline order (here all late: longest cached prefix first). The old
    bound ran the whole queue in arrival order."""
    cache = make_cache()
    hot = tokens(1, 48)
    cache_prefix(cache, hot)
    prompts = [hot[:8 * i] + tokens(10 + i, 48 - 8 * i) for i in range(6)]  # 48 tokens, 8 i of them cached
    sched, reqs = queued(cache, prompts, "auto")
    sched.policy.SHARE = 0.25
    sched.policy.admitted_tokens = 10_000  # every turn has passed: all due
    sched.planned = 10_000  # every deadline has passed: all late
    # 0 (oldest; 48 of 48 tokens), then 5, 4, 3 until 48 <= 0.25 x 192, then 1 (96 of 240), then 2
    assert order(sched) == [0, 5, 4, 3, 1, 2]
    for i in (0, 5):  # admit 0 (an oldest-first pick) and 5: 48 of 96 tokens went to the oldest
        sched.waiting.remove(reqs[i])
        sched.policy.admitted(reqs[i], 0)
    assert order(sched) == [4, 3, 1, 2]  # the share carries over: 4 and 3 first, then 1 (oldest)


def cold_behind_cached() -> tuple[Scheduler, list[Request]]:
    """Under auto: a 40-token request (0), a cold 300-token one (1), then three whose 60-token prefix is cached."""
    cache = make_cache()
    hot = tokens(1, 60)
    cache_prefix(cache, hot)
    prompts = [tokens(2, 40), tokens(3, 300)] + [hot + tokens(5 + i, 8) for i in range(3)]
    return queued(cache, prompts, "auto")


@pytest.mark.usefixtures("auto_own_order")
def test_auto_runs_a_request_once_its_fcfs_turn_has_passed() -> None:
    """A cold request is overtaken by cached ones only until 1.5x the tokens ahead of it at arrival
    have been admitted; then it goes first, whatever its deadline."""
    sched, reqs = cold_behind_cached()
    policy = sched.policy
    assert policy.turn[reqs[1]] == 60  # 1.5 x the 40 tokens of request 0
    assert order(sched) == [0, 2, 3, 4, 1]
    sched.waiting.remove(reqs[0])
    policy.admitted(reqs[0], 0)  # 40 tokens admitted: < 60, still overtaken
    assert order(sched) == [2, 3, 4, 1]
    sched.waiting.remove(reqs[2])
    policy.admitted(reqs[2], 0)  # 108 >= 60: due
    assert order(sched) == [1, 3, 4]


def test_dfs_weight_runs_the_heaviest_subtree_first() -> None:
    cache = make_cache()
    a, b = tokens(1, 40), tokens(2, 40)
    cache_prefix(cache, a)
    cache_prefix(cache, b)
    prompts = [b + [1], a + [1], b + [2], tokens(3, 12), b + [3], a + [2]]  # b: 3 waiting, a: 2, cold: 1
    assert order(queued(cache, prompts, "dfs-weight")[0]) == [0, 2, 4, 1, 5, 3]


def test_matching_is_bounded_per_step() -> None:
    """A queue of 300: one step matches at most match_per_step requests, and only window ones."""
    cache = make_cache(slots=1 << 16, rows=8)
    sched, reqs = queued(cache, [tokens(i, 200) for i in range(300)], "auto", window=100, match_per_step=16)
    step(sched)
    assert sched.estimates.matched == 16
    for _ in range(20):
        before = sched.estimates.matched
        step(sched)
        assert sched.estimates.matched - before in (0, 16)  # 0: the step could admit nothing
    assert set(sched.estimates.known) <= set(list(sched.waiting)[:100])


SLOTS = 1 << 14  # the starvation test's cache: under one H100's KV (400k), as the Engine's


def cold_wait(schedule: str, stream: int, cold_at: int, per_step: int, full_cache: int | None = None) -> int:
    """Steps the cold request (added at step `cold_at`) waits while `stream` steps each bring
    `per_step` hot requests (48 cached tokens + 8 new) for a 64-token budget."""
    cache = make_cache(slots=SLOTS, page_size=1)
    hot = tokens(1, 48)
    cache_prefix(cache, hot)
    sched = Scheduler(cache, 64, schedule=schedule, full_cache=full_cache)
    cold = Request(-1, tokens(2, 60), 60, 1)
    for t in range(stream + 100):
        if t == cold_at:
            sched.add(cold)
        if t < stream:
            for j in range(per_step):
                i = t * per_step + j  # a distinct first new token: no hot request extends another's match
                sched.add(Request(i, hot + [i] + tokens(1000 + i, 7), 56, 1))
        step(sched)
        if cold.opened:
            return t - cold_at
    raise AssertionError(f"{schedule}: the cold request never ran")


@pytest.mark.parametrize("cold_at", [0, 10])
def test_lpm_starves_a_cold_request_and_auto_does_not(cold_at: int) -> None:
    """10 hot requests a step (80 tokens for a 64-token budget: a queue builds); the cold request
    arrives first or behind that queue. LPM's wait grows with the stream, auto's does not. On a cache of one
    H100's KV (full_cache: this one) auto's own order: due once 1.5x the tokens queued ahead of it are admitted. On
    a smaller one (the Engine's), lpm's order with the valve (auto.py, LPM_UNTIL; the queue never empties, so it
    stays): first once VALVE (256) later arrivals were admitted before it, 8 a step here, however long the stream."""
    for stream in (60, 120):
        lpm, fcfs = (cold_wait(s, stream, cold_at, per_step=10) for s in ("lpm", "fcfs"))
        auto = cold_wait("auto", stream, cold_at, per_step=10, full_cache=SLOTS)
        valved = cold_wait("auto", stream, cold_at, per_step=10)
        assert lpm >= stream - cold_at  # it runs only once the hot stream has ended
        assert auto <= 2 * fcfs + 1
        assert fcfs <= 2
        assert Auto.VALVE // 8 - 2 <= valved <= Auto.VALVE // 8 + 4  # 8 hot ones admitted a step


def test_every_policy_is_listed() -> None:
    assert set(POLICIES) == {"fcfs", "fcfs-match", "lpm", "dfs-weight", "hrrn", "auto"}
