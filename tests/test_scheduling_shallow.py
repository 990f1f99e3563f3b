"""auto's deadline on a full cache's shallow queue (radixkv/scheduling/auto.py, round 24): on a cache of at least
one H100 and a trace that is not thin, K is K_SHALLOW (24) while under SHALLOW (half) a cache of prompt tokens waits,
SLOWDOWN (48) otherwise. A 60-token cold request that waited 2,000 clock units and a 10-token one that just arrived:
with K 48 the short one's deadline comes first (2,000 + 480 against 2,880), with K 24 the old one's (its 1,440 is
past, against 2,240)."""

from __future__ import annotations

import pytest
import torch

from radixkv import CacheConfig, RadixCache
from radixkv.scheduling.scheduler import Request, Scheduler

SLOTS = 400
LATER = 2000.0  # clock units (one token's prefill each) between the old request's arrival and the short one's


def make_cache() -> RadixCache:
    return RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=SLOTS, page_size=1,
                                  max_requests=64, max_context_len=512, dtype=torch.float32))


def cold(i: int, n: int) -> list[int]:
    return [i * 1000 + j for j in range(n)]  # distinct first tokens: nothing shared, nothing cached


def second(full_cache: int, deep: bool) -> int:
    """The id ordered right after the due request that heads the queue: 1 (the old 60-token request) or 2 (the
    10-token one). At clock 0 a 20-token request (due at once: it found nothing waiting) and the old one arrive; at
    LATER the short one, and if `deep` a 150-token one (240 of 400 tokens wait instead of 90)."""
    now = [0.0]
    sched = Scheduler(make_cache(), 64, schedule="auto", clock=lambda: now[0], full_cache=full_cache)
    for i, n in enumerate([20, 60]):
        sched.add(Request(i, cold(i, n), n, 1))
    now[0] = LATER
    for i, n in enumerate([10] + ([150] if deep else []), start=2):
        sched.add(Request(i, cold(i, n), n, 1))
    order = sched.policy.order(list(sched.waiting), now[0])
    assert order[0].index == 0  # due, oldest first
    return order[1].index


@pytest.mark.parametrize("full_cache, deep, old_first", [(SLOTS, False, True), (SLOTS, True, False),
                                                         (4 * SLOTS, False, False)])
def test_a_full_cache_shallow_queue_shortens_the_deadline(full_cache: int, deep: bool, old_first: bool) -> None:
    """K 24 beside a full H100's cache with 90 tokens waiting: the old request goes before the short one; with 240
    waiting (over half a cache), or beside a full cache four times this one (a quarter H100's), K 48: after it."""
    assert second(full_cache, deep) == (1 if old_first else 2)
