"""Validate once per batch: the per-layer path makes no device->host synchronisation.

A TorchDispatchMode counts every op that makes a GPU wait for the host (reading a value back:
`_local_scalar_dense` behind `.item()`/`int()`/`bool()`; ops whose output size depends on values:
`nonzero`, `unique`, `masked_select`, boolean-mask indexing, `repeat_interleave` without
`output_size`; `equal`), plus `Tensor.tolist()`/`.numpy()`, which copy to the host below the
dispatcher. On a CPU tensor none of these costs a sync, but each would on a GPU, so counting them
here proves the property without a GPU.

One `Engine.generate` on a 2-layer and an 8-layer tiny Llama (random weights; the 8-layer model is
the 2-layer one plus 6 layers whose output projections are zero, so both generate the same tokens
and the cache does the same work, while attention runs in all 8 layers): every per-step sync
(batch building, sampling, commits) happens once per step either way, so the totals must be equal,
and the count inside the attention function must be zero. Counted with TRITON_INTERPRET=1 (Triton
kernels, interpreted) and unset (torch references).
"""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

transformers = pytest.importorskip("transformers")
from transformers import AttentionInterface  # noqa: E402

from radixkv.integrations import attention as attention_mod  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402

_ALWAYS_SYNC = {"_local_scalar_dense", "item", "nonzero", "_unique", "_unique2", "unique_dim",
                "unique_consecutive", "unique_dim_consecutive", "masked_select", "equal",
                "is_nonzero", "argwhere", "bincount", "histc", "masked_scatter", "allclose"}


def _is_sync(func: Any, args: tuple, kwargs: dict) -> bool:
    name = func.overloadpacket.__name__
    if name in _ALWAYS_SYNC:
        return True
    if name == "repeat_interleave":  # output size from the values unless given
        return kwargs.get("output_size") is None
    if name in ("index", "index_put", "index_put_"):  # a boolean mask index is a nonzero
        indices = args[1] if len(args) > 1 else ()
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)
    return False


class SyncCounter(TorchDispatchMode):
    """Counts synchronising ops by name; `inside` counts those made within the attention
    function (the per-layer path), `total` all of them."""

    def __init__(self) -> None:
        super().__init__()
        self.total: collections.Counter[str] = collections.Counter()
        self.inside: collections.Counter[str] = collections.Counter()
        self.depth = 0  # > 0 while the attention function runs

    def record(self, name: str) -> None:
        self.total[name] += 1
        if self.depth:
            self.inside[name] += 1

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if _is_sync(func, args, kwargs):
            self.record(func.overloadpacket.__name__)
        return func(*args, **kwargs)


@contextmanager
def counting_syncs() -> Iterator[SyncCounter]:
    """Count synchronising ops inside the block; `.tolist()`/`.numpy()` are counted by wrapping
    the methods (they read memory below the dispatcher), but only when radixkv code calls them,
    because the Triton interpreter itself copies every kernel argument to numpy."""
    counter = SyncCounter()
    wrapped = attention_mod.radixkv_attention

    def attention(*args: Any, **kwargs: Any) -> Any:
        counter.depth += 1
        try:
            return wrapped(*args, **kwargs)
        finally:
            counter.depth -= 1

    with pytest.MonkeyPatch.context() as patch:
        for method in ("tolist", "numpy"):
            patch.setattr(torch.Tensor, method, _counted(counter, method, getattr(torch.Tensor, method)))
        AttentionInterface.register(attention_mod.ATTN_IMPLEMENTATION, attention)
        try:
            with counter:
                yield counter
        finally:
            AttentionInterface.register(attention_mod.ATTN_IMPLEMENTATION, wrapped)


def _counted(counter: SyncCounter, name: str, method: Callable) -> Callable:
    def call(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        caller = os.path.normpath(sys._getframe(1).f_code.co_filename)
        if f"{os.sep}radixkv{os.sep}" in caller:
            counter.record(name)
        return method(self, *args, **kwargs)
    return call


def _model(num_layers: int) -> torch.nn.Module:
    """Layers 0-1 and the embeddings as in the 2-layer model (seed 0); layers 2 and up add nothing
    to the residual stream (o_proj and down_proj zero), so every model says the same tokens."""
    def build(n: int) -> torch.nn.Module:
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=2,
                                       max_position_embeddings=256, initializer_range=0.2,
                                       bos_token_id=None, eos_token_id=None, pad_token_id=None)
        return transformers.LlamaForCausalLM(cfg).eval()

    model = build(num_layers)
    model.load_state_dict(build(2).state_dict(), strict=False)
    with torch.no_grad():
        for layer in model.model.layers[2:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


PROMPTS = [[5, 9, 2, 7, 1, 3, 8, 4, 6, 10, 11, 12], [5, 9, 2, 7, 1, 3, 8, 4, 20, 21], [30, 31, 32]]


def _count(num_layers: int, max_new_tokens: int) -> tuple[SyncCounter, list[list[int]]]:
    """Syncs during one generate() of PROMPTS (after a warm-up call that caches a prefix), and its
    output."""
    engine = Engine(_model(num_layers), num_slots=512, page_size=4, max_requests=8, max_context_len=64)
    engine.generate([PROMPTS[0]], max_new_tokens=1)  # cached, so the counted call reuses a prefix
    with counting_syncs() as counter:
        out = engine.generate(PROMPTS, max_new_tokens=max_new_tokens)
    return counter, out


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("interpret", [True, False], ids=["triton", "reference"])
def test_per_layer_path_has_no_host_sync(interpret: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """max_new_tokens=2: a prefill step (extend attention, with a cached prefix) and a decode
    step (decode attention). Syncs per step are allowed; per layer none."""
    if not interpret:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (c2, out2), (c8, out8) = (_count(n, 2) for n in (2, 8))
    assert out2 == out8, "the 8-layer model must say what the 2-layer one says (same schedule)"
    for n, c in ((2, c2), (8, c8)):
        assert not c.inside, f"{n} layers: syncs inside the attention function: {dict(c.inside)}"
    assert sum(c2.total.values()) > 0, "the counter must see the per-step syncs (batch, sampling)"
    assert c2.total == c8.total, f"sync counts differ: 2 layers {dict(c2.total)}, 8 layers {dict(c8.total)}"


def test_counter_sees_a_per_layer_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: with the checked store_kv in the attention function (its slot checks
    read min/max and unique to the host), syncs appear inside attention and grow with layers."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(attention_mod.kernels, "store_kv_unchecked", attention_mod.kernels.store_kv)
    (c2, _), (c8, _) = (_count(n, 2) for n in (2, 8))
    assert c2.inside and c8.inside, "the counter missed store_kv's checks"
    assert sum(c8.inside.values()) == 4 * sum(c2.inside.values()), (dict(c2.inside), dict(c8.inside))
