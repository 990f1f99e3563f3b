"""auto's aging (radixkv/scheduling/auto.py): a request that 16 later arrivals were admitted
before goes strictly first, while fewer than 3 caches wait and the queue has stood above one cache
for under 4 cache-times or rose there as a burst, measured in caches of max(this cache, the full
H100 cache that the Scheduler passes in). The same queue is a burst beside a full H100's cache and
not beside a cache four times its size (a quarter H100's queue): this fails if the full size is not
passed through, and `radixkv simulate` must pass one H100's KV in its 512-token blocks.
"""

from __future__ import annotations

import json

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.errors import InvalidArgumentError
from radixkv.scheduling.cost_model import CostModel
from radixkv.scheduling.scheduler import Request, Scheduler
from radixkv.scheduling.sim_trace import read_sim_trace
from radixkv.scheduling.simulate import Simulation
from radixkv.scheduling.synth import mooncake_shaped

SLOTS = 400


def make_cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=SLOTS, page_size=1,
                                  max_requests=64, max_context_len=512, dtype=torch.float32))


def cold(i: int, n: int) -> list[int]:
    return [i * 1000 + j for j in range(n)]  # distinct first tokens: nothing shared, nothing cached


def aged_queue(full_cache: int | None) -> tuple[Scheduler, list[float], Request]:
    """At clock 0: one 200-token request, 16 of 10 tokens, 9 of 100 (1,260 tokens, 3.15 caches);
    ordered once, then the 16 short ones are admitted: the first request is aged, 2.75 caches wait."""
    now = [0.0]
    sched = Scheduler(make_cache(), 64, schedule="auto", clock=lambda: now[0], full_cache=full_cache)
    reqs = [Request(i, cold(i, n), n, 1) for i, n in enumerate([200] + [10] * 16 + [100] * 9)]
    for r in reqs:
        sched.add(r)
    sched.policy.order(list(sched.waiting), 0.0)  # the queue rose above one cache at once
    for r in reqs[1:17]:
        sched.waiting.remove(r)
        sched.policy.admitted(r, 0.0)
    policy = sched.policy
    assert policy.aged == {reqs[0]} and policy.turn[reqs[0]] == 0  # aged, and due
    policy.bound_tokens = policy.contested_tokens = 1000  # the share is spent: due alone would wait
    return sched, now, reqs[0]


def first_is(sched: Scheduler, now: list[float], at: float, req: Request) -> bool:
    now[0] = at * SLOTS  # cache-times: the clock's unit is one token's prefill
    return sched.policy.order(list(sched.waiting), now[0])[0] is req


@pytest.mark.usefixtures("auto_own_order")
@pytest.mark.parametrize("full_cache, burst", [(SLOTS, True), (4 * SLOTS, False), (None, False)])
def test_the_burst_gate_measures_the_queue_in_full_caches(full_cache: int | None, burst: bool) -> None:
    """Under 4 cache-times of standing, aged first whatever the full cache; after, only where the
    queue (2.75 caches) is also above one full cache: this cache is a full H100's, not a quarter's,
    nor one under the Engine's default (400k tokens)."""
    sched, now, old = aged_queue(full_cache)
    assert first_is(sched, now, 3.9, old)
    for at in (4.1, 11.1):  # a burst stays one while the queue stands
        assert first_is(sched, now, at, old) is burst


def test_a_slow_rise_is_no_burst() -> None:
    """The same queue beside a full H100's cache, but it rose above one cache 7 or more cache-times
    after it was last under half a cache: a standing queue, so after 4 cache-times of it, not first."""
    sched, now, old = aged_queue(SLOTS)
    sched.policy.low_at, sched.policy.above_since = -7.0 * SLOTS, None  # as if it had been low 7 cache-times ago
    assert first_is(sched, now, 0.0, old)
    assert not first_is(sched, now, 4.1, old)


def test_full_cache_must_be_a_positive_int() -> None:
    for bad in (0, -1, 2.5, True, "781"):
        with pytest.raises(InvalidArgumentError, match="full_cache"):
            Scheduler(make_cache(), 64, full_cache=bad)  # type: ignore[arg-type]


def test_simulate_passes_one_h100_of_kv_in_its_blocks(tmp_path) -> None:
    """The simulator's cache slots are 512-token blocks: the full cache is the cost model's KV in them,
    at any --capacity (here a quarter H100)."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in mooncake_shaped(20, seed=1)))
    cost = CostModel()
    sim = Simulation(read_sim_trace(str(path), "t"), "auto", 1.0, cost.kv_capacity_tokens // 4, 16, cost)
    assert sim.sched.policy.full_cache == cost.kv_capacity_tokens // 512 == 781
    assert sim.cache.config.num_slots == 195
