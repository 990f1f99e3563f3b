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
from radixkv.integrations.scheduler import Request, Scheduler
from radixkv.scheduling import POLICIES, PrefixEstimates, make_policy

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


def test_auto_and_hrrn_are_response_ratios() -> None:
    """All wait equally long: hrrn runs the shortest prompt first, auto the least uncached work."""
    cache = make_cache()
    hot = tokens(1, 60)
    cache_prefix(cache, hot)
    prompts = [tokens(3, 30), hot + tokens(5, 8), tokens(4, 20)]  # uncached: 30, 8, 20; lengths 30, 68, 20
    sched, reqs = queued(cache, prompts, "hrrn")
    assert order(sched) == [2, 0, 1]  # no wait yet: every ratio is 1, the shorter goes first
    sched.planned = 100
    assert order(sched) == [2, 0, 1]
    sched, reqs = queued(cache, prompts, "auto")
    assert order(sched) == [1, 2, 0]
    sched.planned = 10_000  # everyone waited 10,000 token-times: ratio 1 + w / s still favours small s
    assert order(sched) == [1, 2, 0]
    reqs[0].arrival -= 40_000  # request 0 waited 5x as long: (50000 + 30) / 30 beats (10000 + 8) / 8
    assert order(sched) == [0, 1, 2]


def test_auto_puts_overdue_requests_first() -> None:
    """Past 2x the typical wait a request goes first, whatever its ratio. Typical: the larger of the
    moving average of admitted requests' waits and the mean wait of the window."""
    cache = make_cache()
    hot = tokens(1, 60)
    cache_prefix(cache, hot)
    prompts = [tokens(3, 300)] + [hot + tokens(5 + i, 8) for i in range(4)]  # uncached: 300, then 8 each
    sched, reqs = queued(cache, prompts, "auto")
    policy = sched.policy
    for _ in range(300):
        policy.admitted(reqs[1], now=reqs[1].arrival + 30.0)  # as if each was admitted after waiting 30
    assert policy.typical == pytest.approx(30.0, rel=0.01)

    def at(now: int) -> list[int]:
        sched.planned = now
        for r in reqs[1:]:
            r.arrival = now - 5  # the hot ones have waited 5: ratio (5 + 8) / 8 = 1.6
        return order(sched)

    assert at(55) == [1, 2, 3, 4, 0]  # cold: ratio (55 + 300) / 300 = 1.2, waited 55 < 2 x 30
    assert at(100) == [0, 1, 2, 3, 4]  # waited 100 > 60: overdue
    policy.typical = 0.0
    assert at(100) == [0, 1, 2, 3, 4]  # no admissions yet: the window's mean wait (100 + 4 x 5) / 5 = 24 -> 48
    sched.planned = 100
    for r in reqs[1:]:
        r.arrival = 0  # ...but when all waited alike (a queue that arrived at once) nobody is overdue
    assert order(sched) == [1, 2, 3, 4, 0]


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


def cold_wait(schedule: str, stream: int) -> int:
    """Steps the cold request waits while `stream` steps each bring 8 hot requests (48 cached tokens
    + 8 new): exactly the 64-token budget, so some hot request is always waiting."""
    cache = make_cache(slots=1 << 14, page_size=1)
    hot = tokens(1, 48)
    cache_prefix(cache, hot)
    sched = Scheduler(cache, 64, schedule=schedule)
    cold = Request(-1, tokens(2, 60), 60, 1)
    sched.add(cold)
    for t in range(stream + 100):
        if t < stream:
            for j in range(8):
                i = t * 8 + j  # a distinct first new token: no hot request extends another's match
                sched.add(Request(i, hot + [i] + tokens(1000 + i, 7), 56, 1))
        step(sched)
        if cold.opened:
            return t
    raise AssertionError(f"{schedule}: the cold request never ran")


@pytest.mark.parametrize("stream", [30, 60])
def test_lpm_starves_a_cold_request_and_auto_does_not(stream: int) -> None:
    lpm, auto, fcfs = cold_wait("lpm", stream), cold_wait("auto", stream), cold_wait("fcfs", stream)
    assert lpm >= stream  # it runs only once the hot stream has ended
    assert fcfs == 0
    assert auto <= 10  # (64 w + 60) / 60 overtakes the hot requests' (64 + 8) / 8 after ~8 steps


def test_every_policy_is_listed() -> None:
    assert set(POLICIES) == {"fcfs", "fcfs-match", "lpm", "dfs-weight", "hrrn", "auto"}
