"""Workloads: deterministic, the shapes their docstrings promise, and a JSON-lines round trip
that make_trace.py's readers (and SGLang's harness) accept."""

from __future__ import annotations

import numpy as np
import pytest

from radixkv.bench.opt import unique_prefix_tokens
from radixkv.bench.traces import read_trace
from radixkv.bench.workloads import WORKLOADS, agent, chat, gsp, make_workload, rag, tot, write_jsonl


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_seeded_and_well_formed(name: str) -> None:
    a, b = make_workload(name, seed=3, scale=0.2), make_workload(name, seed=3, scale=0.2)
    c = make_workload(name, seed=4, scale=0.2)
    assert len(a) == len(b) and all(np.array_equal(x.tokens, y.tokens) and x.prompt_len == y.prompt_len
                                    for x, y in zip(a, b))
    assert any(not np.array_equal(x.tokens, y.tokens) for x, y in zip(a, c))
    for r in a:
        assert r.tokens.dtype == np.int32 and 0 < r.prompt_len < len(r.tokens)


def test_gsp_matches_sglang_defaults() -> None:
    reqs = gsp()
    assert len(reqs) == 64 * 16
    assert {len(r.tokens) for r in reqs} == {2048 + 128 + 256} and {r.prompt_len for r in reqs} == {2048 + 128}
    systems = {r.tokens[:2048].tobytes() for r in reqs}
    assert len(systems) == 64
    assert unique_prefix_tokens(reqs) == 64 * 2048 + 1024 * (128 + 256)


def test_chat_turn_extends_previous_turn() -> None:
    reqs = chat(num_convs=5, turns=4, system_prompt_len=32, user_len=8, answer_len=8)
    assert len(reqs) == 20
    for i, r in enumerate(reqs):  # every turn after the first starts with an earlier whole sequence
        if len(r.tokens) > 32 + 16:
            assert any(len(p.tokens) == r.prompt_len - 8 and np.array_equal(p.tokens, r.tokens[:len(p.tokens)])
                       for p in reqs[:i])


def test_tot_prompts_are_earlier_paths() -> None:
    reqs = tot(num_trees=2, shared_prefix_len=8, root_len=8, branch=2, depth=3, thought_len=4)
    assert len(reqs) == 2 * (2 + 4 + 8)
    full = {r.tokens.tobytes() for r in reqs}
    deeper = [r for r in reqs if r.prompt_len > 16]
    assert deeper and all(r.tokens[:r.prompt_len].tobytes() in full for r in deeper)


def test_agent_and_rag_shapes() -> None:
    ag = agent(num_agents=3, steps=4)
    assert len(ag) == 12 and all(np.array_equal(r.tokens[:1536], ag[0].tokens[:1536]) for r in ag)
    rg = rag(num_requests=400, num_docs=50, doc_len=16, k=3, system_prompt_len=4, question_len=4, output_len=4)
    first_docs = [r.tokens[4:20].tobytes() for r in rg]
    counts = sorted((first_docs.count(d) for d in set(first_docs)), reverse=True)
    assert counts[0] > 5 * counts[len(counts) // 2]  # Zipf: the head is far more popular than the median


def test_jsonl_round_trip(tmp_path) -> None:
    reqs = make_workload("tot", scale=0.05)
    p = str(tmp_path / "t.jsonl")
    write_jsonl(reqs, p)
    back = read_trace(p)
    assert [r.prompt_len for r in back] == [r.prompt_len for r in reqs]
    assert all(np.array_equal(a.tokens, b.tokens) for a, b in zip(back, reqs))


def test_long_workloads_are_shaped_like_production_traffic() -> None:
    lc = make_workload("longchat")
    lens = np.array([len(r.tokens) for r in lc])
    assert lens.max() <= 20000 and np.mean(lens >= 10000) > 0.6  # 10-20k-token contexts
    firsts = {r.tokens[:2048 + 6000].tobytes() for r in lc}  # one first message per session
    turns = [sum(r.tokens[:2048 + 6000].tobytes() == f for r in lc) for f in firsts]
    assert len(firsts) == 96 and sum(t == 1 for t in turns) > 20  # many sessions never return
    ld = make_workload("longdoc")
    docs = [r.tokens[512:512 + 8000].tobytes() for r in ld]
    counts = sorted((docs.count(d) for d in set(docs)), reverse=True)
    assert counts[0] > 20 and len(counts) > 24 + 50  # a popular head, and many one-off documents


def test_tools_sessions_are_long_and_grow_by_tool_outputs() -> None:
    reqs = make_workload("tools")
    lens = np.array([len(r.tokens) for r in reqs])
    assert lens.min() >= 2048 and lens.max() <= 5000 and np.median(lens) > 2500  # 2-5k-token requests
    assert len({r.tokens[:2048].tobytes() for r in reqs}) == 4  # four tool preambles
    sessions: dict[bytes, list[np.ndarray]] = {}  # preamble + task -> the earlier requests' tokens
    tool_outputs = []
    for r in reqs:
        earlier = sessions.setdefault(r.tokens[:2048 + 64].tobytes(), [])
        prompt = r.tokens[:r.prompt_len]
        prev = [len(e) for e in earlier if len(e) <= len(prompt) and np.array_equal(prompt[:len(e)], e)]
        if prev:
            tool_outputs.append(r.prompt_len - max(prev))
        earlier.append(r.tokens)
    assert len(sessions) == 160 and len(tool_outputs) > 1.5 * len(sessions)  # several steps per session
    assert min(tool_outputs) >= 500 and max(tool_outputs) <= 2000  # each step appends one tool output
    prompts = [r.tokens[:r.prompt_len].tobytes() for r in reqs]
    assert len(prompts) - len(set(prompts)) > 0.05 * len(reqs)  # re-sampled steps: a prompt asked again
