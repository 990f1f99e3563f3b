"""Session-shaped workloads: sessions that start as a Poisson process and come back after think
times, so requests of different sessions interleave (long chats, long documents, tool-using agents)."""

from __future__ import annotations

import heapq
from typing import Callable

import numpy as np

from radixkv.bench.params import checked
from radixkv.bench.trace_parts import Request, random_ids

def between(rng: np.random.Generator, lo_hi: tuple[int, int]) -> int:
    return int(rng.integers(lo_hi[0], lo_hi[1] + 1))


def sessions(rng: np.random.Generator, num_sessions: int, first: Callable[[int], np.ndarray],
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
    systems = [random_ids(rng, system_prompt_len) for _ in range(num_system_prompts)]

    def first(_: int) -> np.ndarray:
        system = systems[int(rng.integers(num_system_prompts))]
        return np.concatenate([system, random_ids(rng, between(rng, first_len))])

    def turn(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float]:
        full = np.concatenate([prompt, random_ids(rng, between(rng, answer_len))])
        nxt = np.concatenate([full, random_ids(rng, between(rng, user_len))])
        if rng.random() < p_return and len(nxt) + answer_len[1] <= max_context:
            return full, nxt, rng.exponential(mean_gap)
        return full, None, 0.0

    return sessions(rng, num_sessions, first, turn)


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
    system = random_ids(rng, system_prompt_len)
    popular = [random_ids(rng, between(rng, doc_len)) for _ in range(num_popular)]
    weights = 1.0 / np.arange(1, num_popular + 1) ** zipf_s
    weights /= weights.sum()
    t, events = 0.0, []
    for i in range(num_requests):
        t += rng.exponential(1.0)
        if rng.random() < p_popular:
            events.append((t, float(i), popular[int(rng.choice(num_popular, p=weights))]))
            continue
        doc, at = random_ids(rng, between(rng, doc_len)), t
        for j in range(1 + between(rng, followups)):
            events.append((at, i + j / 8, doc))
            at += rng.exponential(mean_gap)
    events.sort(key=lambda e: (e[0], e[1]))
    reqs = []
    for _, _, doc in events[:num_requests]:
        prompt = np.concatenate([system, doc, random_ids(rng, between(rng, question_len))])
        reqs.append(Request(np.concatenate([prompt, random_ids(rng, between(rng, output_len))]), len(prompt)))
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
    toolsets = [random_ids(rng, preamble_len) for _ in range(num_toolsets)]

    def first(_: int) -> np.ndarray:
        task = random_ids(rng, between(rng, task_len))
        return np.concatenate([toolsets[int(rng.integers(num_toolsets))], task])

    def step(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float]:
        full = np.concatenate([prompt, random_ids(rng, between(rng, action_len))])
        if rng.random() < p_retry:  # the action is thrown away and asked again
            return full, prompt, rng.exponential(1.0)
        nxt = np.concatenate([full, random_ids(rng, between(rng, tool_output_len))])
        if len(nxt) + action_len[1] <= max_context:
            return full, nxt, rng.exponential(mean_gap)
        return full, None, 0.0

    return sessions(rng, num_sessions, first, step)
