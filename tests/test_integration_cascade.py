"""The Engine with cascade decode: same greedy tokens as `model.generate` with it on and off, and
it really runs when decoding requests share cached prefixes (torch reference and interpreter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

pytest.importorskip("transformers")

from radixkv import InvalidArgumentError, kernels  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402
from hf_helpers import assert_cache_idle, assert_same_tokens, build, reference, shared_prefix_prompts  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _count_cascade(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    launch = kernels.cascade_decode_launch

    def counted(q: torch.Tensor, *args: object) -> torch.Tensor:
        calls.append(q.shape[0])
        return launch(q, *args)

    monkeypatch.setattr(kernels, "cascade_decode_launch", counted)
    return calls


@pytest.mark.parametrize("page_size", [1, 16])
def test_cascade_on_and_off_give_the_same_tokens(page_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    model = build("llama")
    prompts = shared_prefix_prompts(seed=20 + page_size, groups=2, per_group=4, system=40, own=(1, 24))
    want = reference(model, prompts, 12)
    calls = _count_cascade(monkeypatch)
    outs = {}
    for cascade in (True, False):
        engine = Engine(model, num_slots=4096, page_size=page_size, dtype=torch.float32, max_context_len=256,
                        max_batch_tokens=64, cascade=cascade)
        outs[cascade] = engine.generate(prompts, max_new_tokens=12)
        assert_same_tokens(outs[cascade], want)
        assert_cache_idle(engine)
        if cascade:  # every layer of the decode steps where 2+ requests share a node
            assert len(calls) >= 2 * 8 and max(calls) == len(prompts), calls
            ran = len(calls)
    assert len(calls) == ran  # cascade=False never plans
    assert outs[True] == outs[False]


def test_cascade_through_the_interpreted_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    model = build("qwen2")
    prompts = [[5, 6, 7, 8, 9, 1], [5, 6, 7, 8, 10, 11], [5, 6, 7, 8, 9, 2, 3], [1, 2, 3]]
    calls = _count_cascade(monkeypatch)
    engine = Engine(model, num_slots=128, page_size=2, dtype=torch.float32, max_context_len=32)
    assert_same_tokens(engine.generate(prompts, max_new_tokens=3), reference(model, prompts, 3))
    assert calls, "no decode step used cascade"


def test_cascade_flag_is_a_bool() -> None:
    with pytest.raises(InvalidArgumentError, match="cascade"):
        Engine(build("llama"), num_slots=64, dtype=torch.float32, max_context_len=32, cascade="yes")
