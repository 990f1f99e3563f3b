"""The continuous-batching scheduler against a real RadixCache, without a model.

A stand-in "model" makes the next token a pure function of everything before it, so whatever the
scheduler does (chunking, in-batch prefix deferral, preemption and re-admission, eviction) every
request must end with exactly the tokens that function dictates, the cache must pass
`check_invariants()` after every step, and the loop must finish within a bounded number of steps.
"""

from __future__ import annotations

import zlib

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from radixkv import CacheConfig, RadixCache
from radixkv.integrations.scheduler import Request, Scheduler
from radixkv.scheduling import POLICIES

VOCAB = 50


def next_token(tokens: list[int]) -> int:
    """The stand-in model: a deterministic function of the whole history."""
    return zlib.crc32(bytes(t % 256 for t in tokens)) % VOCAB


def expected(prompt: list[int], max_new: int) -> list[int]:
    toks = list(prompt)
    for _ in range(max_new):
        toks.append(next_token(toks))
    return toks[len(prompt):]


def run(cache: RadixCache, prompts: list[list[int]], max_new: int, budget: int,
        schedule: str = "auto") -> tuple[list[list[int]], int]:
    sched = Scheduler(cache, budget, schedule=schedule)
    reqs = [Request(i, list(p), len(p), max_new) for i, p in enumerate(prompts)]
    for r in reqs:
        sched.validate(r.prompt_len, max_new)
        sched.add(r)
    limit = 50 * sum(len(p) + max_new for p in prompts)  # far above any schedule that progresses
    steps = 0
    while not sched.idle:
        steps += 1
        assert steps < limit, "the scheduler stopped making progress"
        plan = sched.schedule()
        assert 0 < sum(plan.chunks) <= max(budget, len(plan.requests))
        cache.batch([r.seq for r in plan.requests])  # what a forward would read
        for req, n in zip(plan.requests, plan.chunks):
            done = req.seq.committed_len
            sampling = req.pending == n
            cache.commit(req.seq, req.tokens[done:done + n])
            if sampling:
                req.tokens.append(next_token(req.tokens))
                if len(req.output) == max_new:
                    sched.finish(req)
        cache.check_invariants()
    return [r.output for r in reqs], sched.num_preemptions


def shared_prompts(seed: int, n: int, system: int, own_max: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    heads = [torch.randint(0, VOCAB, (system,), generator=g).tolist() for _ in range(2)]
    return [heads[i % 2] + torch.randint(0, VOCAB, (1 + i % own_max,), generator=g).tolist() for i in range(n)]


@given(seed=st.integers(0, 10**6), page_size=st.sampled_from([1, 2, 4, 16]),
       pages=st.integers(6, 40), budget=st.integers(1, 64), max_new=st.integers(1, 12),
       n=st.integers(1, 10), max_requests=st.integers(1, 6), schedule=st.sampled_from(sorted(POLICIES)))
def test_random_workloads_finish_with_the_right_tokens(seed: int, page_size: int, pages: int, budget: int,
                                                       max_new: int, n: int, max_requests: int, schedule: str) -> None:
    system = 3 * page_size
    cfg = CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=pages * page_size, page_size=page_size,
                      max_requests=max_requests, max_context_len=256, dtype=torch.float32)
    prompts = shared_prompts(seed, n, system, own_max=5)
    longest = max(len(p) for p in prompts) + max_new
    assume(longest + page_size <= cfg.num_slots)  # else validate() rejects it (tested with the Engine)
    cache = RadixCache(cfg)
    outs, _ = run(cache, prompts, max_new, budget, schedule)
    assert outs == [expected(p, max_new) for p in prompts]
    sizes = cache.sizes()
    assert sizes.private == 0 and sizes.protected == 0, sizes


@pytest.mark.parametrize("schedule", sorted(POLICIES))
def test_tight_pool_preempts_and_still_finishes(schedule: str) -> None:
    cfg = CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=48, page_size=4,
                      max_requests=8, max_context_len=256, dtype=torch.float32)
    prompts = shared_prompts(1, 8, system=12, own_max=6)
    outs, preemptions = run(RadixCache(cfg), prompts, max_new=16, budget=16, schedule=schedule)
    assert outs == [expected(p, 16) for p in prompts]
    assert preemptions > 0


def test_in_batch_prefix_check_defers_siblings() -> None:
    """Eight prompts with one 64-token system prompt, all waiting at once: only the first computes
    the system prompt; the other seven are held back one step and reuse it."""
    cfg = CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=1024, page_size=16,
                      max_requests=16, max_context_len=256, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    system = torch.randint(0, VOCAB, (64,), generator=g).tolist()
    prompts = [system + torch.randint(0, VOCAB, (8,), generator=g).tolist() for _ in range(8)]
    cache = RadixCache(cfg)
    sched = Scheduler(cache, max_batch_tokens=1024)
    reqs = [Request(i, list(p), len(p), 1) for i, p in enumerate(prompts)]
    for r in reqs:
        sched.add(r)
    first = sched.schedule()
    assert first.requests == [reqs[0]] and first.chunks == [72]
    for req, n in zip(first.requests, first.chunks):
        cache.commit(req.seq, req.tokens[:n])
    second = sched.schedule()
    assert [r.index for r in second.requests] == list(range(1, 8))
    assert all(r.reused_tokens == 64 for r in reqs[1:])
