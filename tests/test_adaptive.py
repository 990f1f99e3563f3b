"""slru and adaptive (radixkv/eviction/adaptive.py) through the real RadixCache: each against the
fixed policies it should match, on small session and shared-prefix traces."""

from __future__ import annotations

import torch

from radixkv import RadixCache
from radixkv.bench.opt import build_segments
from radixkv.bench.runner import replay, sim_config
from radixkv.bench.workloads import Request, agent, chat, gsp, tot
from radixkv.eviction.adaptive import Adaptive

SESSIONS = {"chat": chat(num_convs=48, turns=6, system_prompt_len=256, user_len=32, answer_len=64),
            "agent": agent(num_agents=24, steps=8, tools_prompt_len=256, action_len=32, tool_output_len=96)}
SHARED = {"gsp": gsp(num_groups=24, prompts_per_group=10, system_prompt_len=512, question_len=32, output_len=64),
          "tot": tot(num_trees=6, shared_prefix_len=128, root_len=256, branch=3, depth=3, thought_len=32)}


def _capacity(reqs: list[Request], frac: float) -> int:
    return max(int(frac * build_segments(reqs, 1).total_pages), max(len(r.tokens) for r in reqs))


def _learned_rate(reqs: list[Request], cap: int) -> float:
    cache = RadixCache(sim_config(cap, 1, "adaptive", max(len(r.tokens) for r in reqs)))
    for r in reqs:
        m = cache.match_prefix(r.tokens[:r.prompt_len])
        cache.lock(m.node)
        cache.insert(r.tokens, torch.cat([m.slots, cache.alloc(len(r.tokens) - m.length)]))
        cache.unlock(m.node)
    policy = cache.tree.policy
    assert isinstance(policy, Adaptive)
    return policy.rate


def test_adaptive_learns_sessions_from_shared_prefixes() -> None:
    for name, reqs in SESSIONS.items():
        assert _learned_rate(reqs, _capacity(reqs, 0.25)) > Adaptive.R_HI, name  # LRU order
    for name, reqs in SHARED.items():
        assert _learned_rate(reqs, _capacity(reqs, 0.25)) < Adaptive.R_LO, name  # frequency-led


def test_adaptive_keeps_up_with_the_better_fixed_policy() -> None:
    """LRU wins the session traces and LFU the shared-prefix ones (at these capacities; on tiny
    caches the order can flip); adaptive follows each winner."""
    cells = [(SESSIONS, "chat", 0.25), (SESSIONS, "chat", 0.5), (SESSIONS, "agent", 0.25), (SESSIONS, "agent", 0.5),
             (SHARED, "gsp", 0.5), (SHARED, "tot", 0.1), (SHARED, "tot", 0.25)]
    for group, name, frac in cells:
        winner, loser = ("lru", "lfu") if group is SESSIONS else ("lfu", "lru")
        reqs = group[name]
        cap = _capacity(reqs, frac)
        hit = {p: replay(reqs, cap, p).hit_rate for p in ("lru", "lfu", "adaptive")}
        assert hit[winner] > hit[loser] + 0.01, (name, frac, hit)  # the trace does separate the policies
        assert hit["adaptive"] >= hit[winner] - 0.01, (name, frac, hit)


def test_slru_protects_twice_hit_nodes() -> None:
    """SLRU evicts a once-hit prefix before an older twice-hit one; LRU does the opposite."""
    a, b, c = (torch.arange(i * 100, i * 100 + 8, dtype=torch.int32) for i in range(1, 4))
    survivors = {}
    for policy in ("slru", "lru"):
        cache = RadixCache(sim_config(16, 1, policy, 16))
        for toks in (a, a, a, b, b):  # a: hit twice (older); b: hit once (newer)
            m = cache.match_prefix(toks)
            cache.insert(toks, torch.cat([m.slots, cache.alloc(len(toks) - m.length)]))
        m = cache.match_prefix(c)
        cache.insert(c, torch.cat([m.slots, cache.alloc(8)]))  # needs 8 slots: one of a, b goes
        survivors[policy] = [cache.match_prefix(t).length == 8 for t in (a, b)]
        cache.check_invariants()
    assert survivors == {"slru": [True, False], "lru": [False, True]}
