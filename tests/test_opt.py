"""OPT (radixkv.bench.opt) against exhaustive search over every eviction choice on small traces,
and against the all-fits closed form on the real workloads."""

from __future__ import annotations

import functools
import itertools
import random

import numpy as np
import pytest

from radixkv.bench.opt import build_segments, opt_hit_rate
from radixkv.bench.workloads import Request, chat, gsp, make_workload, tot


def brute_force_hits(reqs: list[Request], capacity: int, ps: int) -> tuple[int, int]:
    """(best matched prompt tokens, oom) over all eviction choices, by exhaustive search.

    Pages are identified by the token prefix they end; the cache is a set of them. Same rules as
    opt.py's docstring, written independently of its trie.
    """
    n_pages = capacity // ps
    pages = [[tuple(r.tokens[:(k + 1) * ps].tolist()) for k in range(len(r.tokens) // ps)] for r in reqs]
    prompt = [min(r.prompt_len // ps, len(p)) for r, p in zip(reqs, pages)]

    def closed(cache: frozenset) -> bool:
        return all(len(p) == ps or p[:-ps] in cache for p in cache)

    @functools.lru_cache(maxsize=None)
    def best(i: int, cache: frozenset) -> tuple[int, int]:
        if i == len(reqs):
            return (0, 0)
        if -(-len(reqs[i].tokens) // ps) > n_pages:  # can never fit: rejected before matching
            h, o = best(i + 1, cache)
            return (h, o + 1)
        m = 0
        while m < prompt[i] and pages[i][m] in cache:
            m += 1
        need = -(-(len(reqs[i].tokens) - m * ps) // ps)
        short = need - (n_pages - len(cache))
        unlocked = sorted(cache - set(pages[i][:m]))
        choices = itertools.combinations(unlocked, short) if short > 0 else [()]
        results = []
        for victims in choices:
            left = cache - frozenset(victims)
            if closed(left):
                h, o = best(i + 1, left | frozenset(pages[i]))
                results.append((h + m * ps, -o))
        h, neg_o = max(results)
        return (h, -neg_o)

    return best(0, frozenset())


def random_trace(rng: random.Random, n: int, vocab: int, max_len: int) -> list[Request]:
    """Tiny vocabulary: prompts and outputs collide often (outputs repeat: `exact` may fail)."""
    reqs = []
    for _ in range(n):
        length = rng.randint(1, max_len)
        toks = np.array([rng.randrange(vocab) for _ in range(length)], dtype=np.int32)
        reqs.append(Request(toks, rng.randint(0, length)))
    return reqs


def continuing_trace(rng: random.Random, n: int, max_len: int) -> list[Request]:
    """Like the workloads: a prompt continues a cut of an earlier sequence (or starts afresh from a
    2-token vocabulary), and its output is fresh ids."""
    reqs: list[Request] = []
    fresh = 100
    for _ in range(n):
        base = rng.choice(reqs).tokens.tolist() if reqs and rng.random() < 0.7 else []
        prompt = base[:rng.randint(0, len(base))] + [rng.randrange(2) for _ in range(rng.randint(0, 3))]
        prompt = prompt[:max_len - 1]
        out = list(range(fresh, fresh + rng.randint(1, max(1, max_len - len(prompt)))))
        fresh += len(out)
        reqs.append(Request(np.array(prompt + out, dtype=np.int32), len(prompt)))
    return reqs


@pytest.mark.parametrize("ps", [1, 2])
def test_opt_equals_brute_force(ps: int) -> None:
    rng = random.Random(7)
    exact = inexact = 0
    for trial in range(800):
        if trial % 2:
            reqs = random_trace(rng, rng.randint(3, 10), vocab=2, max_len=7 * ps)
        else:
            reqs = continuing_trace(rng, rng.randint(3, 9), max_len=8 * ps)
        cap = rng.randint(2, 8) * ps
        got = opt_hit_rate(reqs, cap, ps)
        want_hits, want_oom = brute_force_hits(reqs, cap, ps)
        assert got.oom == want_oom
        if got.exact:
            assert got.hit_tokens == want_hits, (reqs, cap, got, want_hits)
            exact += got.hit_tokens > 0
        else:  # a repeated output: the leaf rule is a lower bound (see opt.py)
            assert got.hit_tokens <= want_hits, (reqs, cap, got, want_hits)
            inexact += 1
    assert exact > 200  # most traces share something, so the search had choices to make
    assert inexact > 10


def test_opt_with_room_for_everything_is_the_first_use_bound() -> None:
    """With capacity for every distinct page, nothing is evicted: a prompt page hits iff some earlier
    request holds it as a whole page (computed here with a set of prefixes)."""
    small = [gsp(num_groups=6, prompts_per_group=5, system_prompt_len=96, question_len=16, output_len=24),
             chat(num_convs=12, turns=4, system_prompt_len=64, user_len=16, answer_len=32, range_ratio=0.5),
             tot(num_trees=3, shared_prefix_len=32, root_len=48, branch=2, depth=3, thought_len=16)]
    for reqs in small:
        seen: set[bytes] = set()
        hits = 0
        for r in reqs:
            m = 0
            while m < r.prompt_len and r.tokens[:m + 1].tobytes() in seen:
                m += 1
            hits += m
            seen.update(r.tokens[:k + 1].tobytes() for k in range(len(r.tokens)))
        seg = build_segments(reqs, 1)
        assert seg.total_pages == len(seen)
        got = opt_hit_rate(reqs, seg.total_pages, 1, seg)
        assert got.hit_tokens == hits and got.oom == 0 and got.exact


def test_opt_is_monotone_in_capacity() -> None:
    reqs = make_workload("chat", scale=0.3)
    seg = build_segments(reqs, 4)
    rates = [opt_hit_rate(reqs, int(f * seg.total_pages * 4), 4, seg).hit_rate for f in (0.05, 0.1, 0.2, 0.4)]
    assert rates == sorted(rates) and rates[0] < rates[-1]


@pytest.mark.parametrize("ps", [1, 4])
def test_opt_bounds_every_policy_on_the_real_cache(ps: int) -> None:
    """No policy replayed through RadixCache beats Belady on random shared-prefix traces."""
    from radixkv.bench.runner import replay
    from radixkv.eviction import POLICIES

    rng = random.Random(11)
    for _ in range(6):
        reqs = continuing_trace(rng, 40, max_len=24 * ps)
        seg = build_segments(reqs, ps)
        cap = max(24 * ps, seg.total_pages * ps // 4)
        opt = opt_hit_rate(reqs, cap, ps, seg)
        assert opt.exact and opt.oom == 0
        for pol in POLICIES:
            got = replay(reqs, cap, pol, ps, check=True)
            assert got.oom == 0 and got.hit_tokens <= opt.hit_tokens, (pol, got.hit_tokens, opt.hit_tokens)
