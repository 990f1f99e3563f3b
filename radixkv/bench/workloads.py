"""Synthetic, seeded request traces for prefix-cache benchmarks (nothing is downloaded).

A trace is a list of `Request(tokens, prompt_len)`: `tokens` (int32 numpy `[n]`) is the whole
sequence the request leaves in the cache (prompt + output), `prompt_len` how many leading tokens
are the prompt (what `match_prefix` sees). Token ids are random draws from `vocab`, so two
sequences share a prefix exactly when the workload makes them share it. The JSON-lines form
(`{"tokens": [...], "prompt_len": n}` per line) is the one SGLang's peer harness reads
(radixkv/bench/sglang_peer.py), so it replays the same trace.

Every generator takes `seed` and keyword parameters (defaults below) and is deterministic.
"""

from __future__ import annotations

import numpy as np

from radixkv.bench.params import checked
from radixkv.bench.session_workloads import longchat, longdoc, tools
from radixkv.bench.trace_parts import VOCAB, Request, Workload, draw_len, random_ids, write_jsonl
from radixkv.errors import InvalidArgumentError

__all__ = ["VOCAB", "Request", "Workload", "WORKLOADS", "DEFAULT_WORKLOADS", "make_workload", "write_jsonl",
           "gsp", "chat", "tot", "fewshot", "agent", "rag", "longchat", "longdoc", "tools"]


@checked
def gsp(seed: int = 0, num_groups: int = 64, prompts_per_group: int = 16, system_prompt_len: int = 2048,
        question_len: int = 128, output_len: int = 256, range_ratio: float = 1.0) -> list[Request]:
    """generated-shared-prefix (SGLang bench_serving defaults): groups share a system prompt; shuffled."""
    rng = np.random.default_rng(seed)
    systems = [random_ids(rng, draw_len(rng, system_prompt_len, range_ratio)) for _ in range(num_groups)]
    reqs = []
    for g in range(num_groups):
        for _ in range(prompts_per_group):
            prompt = np.concatenate([systems[g], random_ids(rng, draw_len(rng, question_len, range_ratio))])
            out = random_ids(rng, draw_len(rng, output_len, range_ratio))
            reqs.append(Request(np.concatenate([prompt, out]), len(prompt)))
    order = rng.permutation(len(reqs))
    return [reqs[i] for i in order]


@checked
def chat(seed: int = 0, num_convs: int = 128, turns: int = 8, num_system_prompts: int = 4,
         system_prompt_len: int = 1024, user_len: int = 128, answer_len: int = 256,
         range_ratio: float = 1.0) -> list[Request]:
    """interleaved multi-turn chat: turn t's prompt = turn t-1's prompt + answer + user message."""
    rng = np.random.default_rng(seed)
    systems = [random_ids(rng, system_prompt_len) for _ in range(num_system_prompts)]
    history = [systems[c % num_system_prompts] for c in range(num_convs)]
    left = [turns] * num_convs
    active = list(range(num_convs))
    reqs = []
    while active:
        c = active[int(rng.integers(len(active)))]
        prompt = np.concatenate([history[c], random_ids(rng, draw_len(rng, user_len, range_ratio))])
        full = np.concatenate([prompt, random_ids(rng, draw_len(rng, answer_len, range_ratio))])
        reqs.append(Request(full, len(prompt)))
        history[c] = full
        left[c] -= 1
        if left[c] == 0:
            active.remove(c)
    return reqs


@checked
def tot(seed: int = 0, num_trees: int = 16, shared_prefix_len: int = 512, root_len: int = 1024,
        branch: int = 3, depth: int = 4, thought_len: int = 128) -> list[Request]:
    """tree-of-thought: each expansion's prompt is its path so far; level by level, shuffled per level."""
    rng = np.random.default_rng(seed)
    shared = random_ids(rng, shared_prefix_len)
    levels: list[list[Request]] = [[] for _ in range(depth)]
    for _ in range(num_trees):
        frontier = [np.concatenate([shared, random_ids(rng, root_len)])]
        for d in range(depth):
            nxt = []
            for path in frontier:
                for _ in range(branch):
                    full = np.concatenate([path, random_ids(rng, thought_len)])
                    levels[d].append(Request(full, len(path)))
                    nxt.append(full)
            frontier = nxt
    out: list[Request] = []
    for lvl in levels:
        out.extend(lvl[i] for i in rng.permutation(len(lvl)))
    return out


@checked
def fewshot(seed: int = 0, num_requests: int = 1024, exemplar_len: int = 3072, question_len: int = 48,
            output_len: int = 32, range_ratio: float = 0.5) -> list[Request]:
    """few-shot: one long shared exemplar block, then a short question and a short answer."""
    rng = np.random.default_rng(seed)
    block = random_ids(rng, exemplar_len)
    reqs = []
    for _ in range(num_requests):
        prompt = np.concatenate([block, random_ids(rng, draw_len(rng, question_len, range_ratio))])
        output = random_ids(rng, draw_len(rng, output_len, range_ratio))
        reqs.append(Request(np.concatenate([prompt, output]), len(prompt)))
    return reqs


@checked
def agent(seed: int = 0, num_agents: int = 48, steps: int = 12, tools_prompt_len: int = 1536,
          action_len: int = 64, tool_output_len: int = 384, range_ratio: float = 0.25) -> list[Request]:
    """agent loop: a shared tool preamble, then a transcript that grows by action + tool output each step."""
    rng = np.random.default_rng(seed)
    preamble = random_ids(rng, tools_prompt_len)
    transcript = [np.concatenate([preamble, random_ids(rng, 128)]) for _ in range(num_agents)]  # + the task
    left = [steps] * num_agents
    active = list(range(num_agents))
    reqs = []
    while active:
        a = active[int(rng.integers(len(active)))]
        prompt = transcript[a]
        full = np.concatenate([prompt, random_ids(rng, draw_len(rng, action_len, range_ratio))])
        reqs.append(Request(full, len(prompt)))
        transcript[a] = np.concatenate([full, random_ids(rng, draw_len(rng, tool_output_len, range_ratio))])
        left[a] -= 1
        if left[a] == 0:
            active.remove(a)
    return reqs


@checked
def rag(seed: int = 0, num_requests: int = 1024, num_docs: int = 256, doc_len: int = 512, k: int = 3,
        zipf_s: float = 1.1, system_prompt_len: int = 256, question_len: int = 64,
        output_len: int = 96) -> list[Request]:
    """RAG: system prompt + k distinct documents drawn from a Zipf(s)-popular pool + question."""
    rng = np.random.default_rng(seed)
    system = random_ids(rng, system_prompt_len)
    docs = [random_ids(rng, doc_len) for _ in range(num_docs)]
    weights = 1.0 / np.arange(1, num_docs + 1) ** zipf_s
    weights /= weights.sum()
    reqs = []
    for _ in range(num_requests):
        picked = rng.choice(num_docs, size=k, replace=False, p=weights)  # most relevant first
        prompt = np.concatenate([system, *(docs[d] for d in picked), random_ids(rng, question_len)])
        reqs.append(Request(np.concatenate([prompt, random_ids(rng, output_len)]), len(prompt)))
    return reqs


WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (
        Workload("gsp", "generated-shared-prefix: 64 groups x 16 prompts, system 2048, question 128, output 256", gsp),
        Workload("chat", "multi-turn chat: 128 convs x 8 turns, 4 systems of 1024, user 128, answer 256, "
                         "interleaved", chat),
        Workload("tot", "tree-of-thought: 16 trees, shared 512 + root 1024, branch 3, depth 4, thought 128", tot),
        Workload("fewshot", "few-shot: 1024 requests, one 3072-token exemplar block, question 24-48, "
                            "output 16-32", fewshot),
        Workload("agent", "agent loop: 48 agents x 12 steps, tools 1536 + task 128, action 16-64, "
                          "tool output 96-384", agent),
        Workload("rag", "RAG: 1024 requests, system 256 + 3 of 256 docs (512 each, Zipf 1.1) + question 64, "
                        "output 96", rag),
        Workload("tools", "long agent sessions: 160 Poisson sessions, 4 tool preambles of 2048 + task, action 32-160, "
                          "tool outputs 0.5-2k, interleaved, requests to 5k, 10% retried", tools),
        Workload("longchat", "long multi-turn: 96 Poisson sessions, system 2048 + first message 6-12k, "
                             "60% return per turn after ~24 arrivals, contexts to 20k", longchat),
        Workload("longdoc", "long documents: 480 Poisson questions, system 512 + a doc of 8-16k: half one of 24 "
                            "popular (Zipf 1.0), half one-off with 0-3 follow-ups", longdoc),
    )
}
# `radixkv bench`; the long ones are opt-in
DEFAULT_WORKLOADS = ("gsp", "chat", "tot", "fewshot", "agent", "rag", "tools")


def make_workload(name: str, seed: int = 0, scale: float = 1.0) -> list[Request]:
    """The named workload; `scale` < 1 keeps the first `ceil(scale * n)` requests (for quick runs)."""
    if name not in WORKLOADS:
        raise InvalidArgumentError(f"unknown workload {name!r:.40}; choose from {sorted(WORKLOADS)}")
    if type(scale) not in (int, float) or not 0 < scale <= 1:
        raise InvalidArgumentError(f"scale must be a number in (0, 1], got {scale!r:.40}")
    reqs = WORKLOADS[name].make(seed=seed)
    return reqs[: max(1, int(np.ceil(scale * len(reqs))))]
