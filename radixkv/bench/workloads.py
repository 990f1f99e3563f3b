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

import heapq
import json
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

import numpy as np

from radixkv.bench.params import checked
from radixkv.errors import InvalidArgumentError

VOCAB = 32000  # Llama-2's vocabulary size; the ids are opaque to the cache


class Request(NamedTuple):
    tokens: np.ndarray  # int32 [n]: prompt then output
    prompt_len: int  # 0 <= prompt_len <= n


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str  # one line: what it models and its parameters
    make: Callable[..., list[Request]]


def _ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, VOCAB, size=n, dtype=np.int32)


def _len(rng: np.random.Generator, full: int, ratio: float) -> int:
    """Uniform in [full * ratio, full] (SGLang's compute_random_lens); ratio 1.0 gives `full`."""
    lo = max(1, int(full * ratio))
    return full if lo >= full else int(rng.integers(lo, full + 1))


@checked
def gsp(seed: int = 0, num_groups: int = 64, prompts_per_group: int = 16, system_prompt_len: int = 2048,
        question_len: int = 128, output_len: int = 256, range_ratio: float = 1.0) -> list[Request]:
    """generated-shared-prefix (SGLang bench_serving defaults): groups share a system prompt; shuffled."""
    rng = np.random.default_rng(seed)
    systems = [_ids(rng, _len(rng, system_prompt_len, range_ratio)) for _ in range(num_groups)]
    reqs = []
    for g in range(num_groups):
        for _ in range(prompts_per_group):
            prompt = np.concatenate([systems[g], _ids(rng, _len(rng, question_len, range_ratio))])
            out = _ids(rng, _len(rng, output_len, range_ratio))
            reqs.append(Request(np.concatenate([prompt, out]), len(prompt)))
    order = rng.permutation(len(reqs))
    return [reqs[i] for i in order]


@checked
def chat(seed: int = 0, num_convs: int = 128, turns: int = 8, num_system_prompts: int = 4,
         system_prompt_len: int = 1024, user_len: int = 128, answer_len: int = 256,
         range_ratio: float = 1.0) -> list[Request]:
    """interleaved multi-turn chat: turn t's prompt = turn t-1's prompt + answer + user message."""
    rng = np.random.default_rng(seed)
    systems = [_ids(rng, system_prompt_len) for _ in range(num_system_prompts)]
    history = [systems[c % num_system_prompts] for c in range(num_convs)]
    left = [turns] * num_convs
    active = list(range(num_convs))
    reqs = []
    while active:
        c = active[int(rng.integers(len(active)))]
        prompt = np.concatenate([history[c], _ids(rng, _len(rng, user_len, range_ratio))])
        full = np.concatenate([prompt, _ids(rng, _len(rng, answer_len, range_ratio))])
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
    shared = _ids(rng, shared_prefix_len)
    levels: list[list[Request]] = [[] for _ in range(depth)]
    for _ in range(num_trees):
        frontier = [np.concatenate([shared, _ids(rng, root_len)])]
        for d in range(depth):
            nxt = []
            for path in frontier:
                for _ in range(branch):
                    full = np.concatenate([path, _ids(rng, thought_len)])
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
    block = _ids(rng, exemplar_len)
    reqs = []
    for _ in range(num_requests):
        prompt = np.concatenate([block, _ids(rng, _len(rng, question_len, range_ratio))])
        reqs.append(Request(np.concatenate([prompt, _ids(rng, _len(rng, output_len, range_ratio))]), len(prompt)))
    return reqs


@checked
def agent(seed: int = 0, num_agents: int = 48, steps: int = 12, tools_prompt_len: int = 1536,
          action_len: int = 64, tool_output_len: int = 384, range_ratio: float = 0.25) -> list[Request]:
    """agent loop: a shared tool preamble, then a transcript that grows by action + tool output each step."""
    rng = np.random.default_rng(seed)
    preamble = _ids(rng, tools_prompt_len)
    transcript = [np.concatenate([preamble, _ids(rng, 128)]) for _ in range(num_agents)]  # + the task
    left = [steps] * num_agents
    active = list(range(num_agents))
    reqs = []
    while active:
        a = active[int(rng.integers(len(active)))]
        prompt = transcript[a]
        full = np.concatenate([prompt, _ids(rng, _len(rng, action_len, range_ratio))])
        reqs.append(Request(full, len(prompt)))
        transcript[a] = np.concatenate([full, _ids(rng, _len(rng, tool_output_len, range_ratio))])
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
    system = _ids(rng, system_prompt_len)
    docs = [_ids(rng, doc_len) for _ in range(num_docs)]
    weights = 1.0 / np.arange(1, num_docs + 1) ** zipf_s
    weights /= weights.sum()
    reqs = []
    for _ in range(num_requests):
        picked = rng.choice(num_docs, size=k, replace=False, p=weights)  # most relevant first
        prompt = np.concatenate([system, *(docs[d] for d in picked), _ids(rng, question_len)])
        reqs.append(Request(np.concatenate([prompt, _ids(rng, output_len)]), len(prompt)))
    return reqs


def _between(rng: np.random.Generator, lo_hi: tuple[int, int]) -> int:
    return int(rng.integers(lo_hi[0], lo_hi[1] + 1))


def _sessions(rng: np.random.Generator, num_sessions: int, first: Callable[[int], np.ndarray],
              step: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None, float]]) -> list[Request]:
    """Sessions that start as a Poisson process (rate 1) with prompt `first(s)`, interleaved in
    time: each request's `step(prompt)` gives its whole sequence, the session's next prompt (None:
    the session ends) and the gap before it, in arrivals."""
    t, events = 0.0, []
    for s in range(num_sessions):
        t += rng.exponential(1.0)
        events.append((t, s, first(s)))
    heapq.heapify(events)
    reqs = []
    while events:
        t, s, prompt = heapq.heappop(events)
        full, nxt, gap = step(prompt)
        reqs.append(Request(full, len(prompt)))
        if nxt is not None:
            heapq.heappush(events, (t + gap, s, nxt))
    return reqs


@checked
def longchat(seed: int = 0, num_sessions: int = 96, num_system_prompts: int = 4, system_prompt_len: int = 2048,
             first_len: tuple[int, int] = (6000, 12000), user_len: tuple[int, int] = (200, 1200),
             answer_len: tuple[int, int] = (300, 900), max_context: int = 20000, p_return: float = 0.6,
             mean_gap: float = 24.0) -> list[Request]:
    """long multi-turn conversations: sessions start as a Poisson process (rate 1); each opens with a
    system prompt and a long first message (a pasted document or code, 6-12k tokens); after each turn
    the user comes back with probability p_return (so 40% of sessions never return) after an
    exponential think time of mean `mean_gap` (other sessions interleave), until 20k tokens."""
    rng = np.random.default_rng(seed)
    systems = [_ids(rng, system_prompt_len) for _ in range(num_system_prompts)]

    def first(_: int) -> np.ndarray:
        return np.concatenate([systems[int(rng.integers(num_system_prompts))], _ids(rng, _between(rng, first_len))])

    def turn(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float]:
        full = np.concatenate([prompt, _ids(rng, _between(rng, answer_len))])
        nxt = np.concatenate([full, _ids(rng, _between(rng, user_len))])
        if rng.random() < p_return and len(nxt) + answer_len[1] <= max_context:
            return full, nxt, rng.exponential(mean_gap)
        return full, None, 0.0

    return _sessions(rng, num_sessions, first, turn)


@checked
def longdoc(seed: int = 0, num_requests: int = 480, num_popular: int = 24, zipf_s: float = 1.0,
            p_popular: float = 0.5, doc_len: tuple[int, int] = (8000, 16000), system_prompt_len: int = 512,
            question_len: tuple[int, int] = (50, 300), output_len: tuple[int, int] = (100, 400),
            followups: tuple[int, int] = (0, 3), mean_gap: float = 4.0) -> list[Request]:
    """long-document mix: questions arrive as a Poisson process (rate 1), each a shared system prompt,
    one document (8-16k tokens) and a question. With probability p_popular the document is one of a
    fixed popular set (Zipf(s)); otherwise it is a one-off upload that gets 0-3 follow-up questions
    soon after (exponential gaps of mean `mean_gap`) and is never read again."""
    rng = np.random.default_rng(seed)
    system = _ids(rng, system_prompt_len)
    popular = [_ids(rng, _between(rng, doc_len)) for _ in range(num_popular)]
    weights = 1.0 / np.arange(1, num_popular + 1) ** zipf_s
    weights /= weights.sum()
    t, events = 0.0, []
    for i in range(num_requests):
        t += rng.exponential(1.0)
        if rng.random() < p_popular:
            events.append((t, i, popular[int(rng.choice(num_popular, p=weights))]))
            continue
        doc, at = _ids(rng, _between(rng, doc_len)), t
        for j in range(1 + _between(rng, followups)):
            events.append((at, i + j / 8, doc))
            at += rng.exponential(mean_gap)
    events.sort(key=lambda e: (e[0], e[1]))
    reqs = []
    for _, _, doc in events[:num_requests]:
        prompt = np.concatenate([system, doc, _ids(rng, _between(rng, question_len))])
        reqs.append(Request(np.concatenate([prompt, _ids(rng, _between(rng, output_len))]), len(prompt)))
    return reqs


@checked
def tools(seed: int = 0, num_sessions: int = 160, num_toolsets: int = 4, preamble_len: int = 2048,
          task_len: tuple[int, int] = (64, 256), action_len: tuple[int, int] = (32, 160),
          tool_output_len: tuple[int, int] = (500, 2000), max_context: int = 5000, p_retry: float = 0.1,
          mean_gap: float = 6.0) -> list[Request]:
    """long tool-using agent sessions: sessions start as a Poisson process (rate 1), each a tool-set
    preamble (one of 4, 2048 tokens) and a task; every step is a request whose output is an action,
    then a tool output of 0.5-2k tokens is appended and the session comes back after an exponential
    tool latency (mean `mean_gap` arrivals; others interleave), until its request would pass 5k
    tokens. With probability p_retry a step is re-sampled from the same prompt (a branch)."""
    rng = np.random.default_rng(seed)
    toolsets = [_ids(rng, preamble_len) for _ in range(num_toolsets)]

    def first(_: int) -> np.ndarray:
        task = _ids(rng, _between(rng, task_len))
        return np.concatenate([toolsets[int(rng.integers(num_toolsets))], task])

    def step(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float]:
        full = np.concatenate([prompt, _ids(rng, _between(rng, action_len))])
        if rng.random() < p_retry:  # the action is thrown away and asked again
            return full, prompt, rng.exponential(1.0)
        nxt = np.concatenate([full, _ids(rng, _between(rng, tool_output_len))])
        if len(nxt) + action_len[1] <= max_context:
            return full, nxt, rng.exponential(mean_gap)
        return full, None, 0.0

    return _sessions(rng, num_sessions, first, step)


WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (
        Workload("gsp", "generated-shared-prefix: 64 groups x 16 prompts, system 2048, question 128, output 256", gsp),
        Workload("chat", "multi-turn chat: 128 convs x 8 turns, 4 systems of 1024, user 128, answer 256, interleaved", chat),
        Workload("tot", "tree-of-thought: 16 trees, shared 512 + root 1024, branch 3, depth 4, thought 128", tot),
        Workload("fewshot", "few-shot: 1024 requests, one 3072-token exemplar block, question 24-48, output 16-32", fewshot),
        Workload("agent", "agent loop: 48 agents x 12 steps, tools 1536 + task 128, action 16-64, tool output 96-384", agent),
        Workload("rag", "RAG: 1024 requests, system 256 + 3 of 256 docs (512 each, Zipf 1.1) + question 64, output 96", rag),
        Workload("tools", "long agent sessions: 160 Poisson sessions, 4 tool preambles of 2048 + task, action 32-160, "
                          "tool outputs 0.5-2k, interleaved, requests to 5k, 10% retried", tools),
        Workload("longchat", "long multi-turn: 96 Poisson sessions, system 2048 + first message 6-12k, "
                             "60% return per turn after ~24 arrivals, contexts to 20k", longchat),
        Workload("longdoc", "long documents: 480 Poisson questions, system 512 + a doc of 8-16k: half one of 24 "
                            "popular (Zipf 1.0), half one-off with 0-3 follow-ups", longdoc),
    )
}
DEFAULT_WORKLOADS = ("gsp", "chat", "tot", "fewshot", "agent", "rag", "tools")  # `radixkv bench`; the long ones are opt-in


def make_workload(name: str, seed: int = 0, scale: float = 1.0) -> list[Request]:
    """The named workload; `scale` < 1 keeps the first `ceil(scale * n)` requests (for quick runs)."""
    if name not in WORKLOADS:
        raise InvalidArgumentError(f"unknown workload {name!r:.40}; choose from {sorted(WORKLOADS)}")
    if type(scale) not in (int, float) or not 0 < scale <= 1:
        raise InvalidArgumentError(f"scale must be a number in (0, 1], got {scale!r:.40}")
    reqs = WORKLOADS[name].make(seed=seed)
    return reqs[: max(1, int(np.ceil(scale * len(reqs))))]


def write_jsonl(reqs: Iterable[Request], path: str) -> None:
    """One {"tokens": [...], "prompt_len": n} per line (radixkv.bench.traces reads it back)."""
    with open(path, "w") as f:
        for r in reqs:
            if not isinstance(r, Request):
                raise InvalidArgumentError(f"write_jsonl takes Requests, got {type(r).__name__}")
            f.write(json.dumps({"tokens": r.tokens.tolist(), "prompt_len": int(r.prompt_len)},
                               separators=(",", ":")))
            f.write("\n")
