"""Jamba's Mamba chunks continued from a carried state in one forward (recurrent_scan.py): the library's
zero-start scan plus the carried state's share equals a token-by-token scan from that state, and the
Engine runs a Jamba continuation chunk as one forward with greedy output equal to `model.generate`.
Before, each continuation chunk ran token by token (one model forward per token)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")
from hf_helpers import assert_same_tokens, no_interpreter, one_thread, reference  # noqa: E402, F401
from transformers.models.jamba import modeling_jamba  # noqa: E402

from radixkv.integrations.recurrent_scan import continued_scan  # noqa: E402
from radixkv.integrations.recurrent_state import LayerState, RecurrentState, StateCache  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402
from radixkv.testing.hybrid_models import build_hybrid  # noqa: E402


def scan_reference(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   h0: torch.Tensor, D: torch.Tensor, z: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Mamba's recurrence from `h0`, one token at a time. x, dt, z: [B, I, T]; A: [I, N]; B, C: [B, N, T]."""
    dt = F.softplus(dt + bias[:, None])
    h, ys = h0, []
    for t in range(x.shape[-1]):
        h = torch.exp(A * dt[:, :, t, None]) * h + dt[:, :, t, None] * B[:, None, :, t] * x[:, :, t, None]
        ys.append((h * C[:, None, :, t]).sum(-1))
    return (torch.stack(ys, -1) + x * D[None, :, None]) * F.silu(z), h


@pytest.mark.parametrize("batch, inner, steps, n", [(1, 6, 7, 3), (3, 5, 13, 4)])
def test_scan_from_carried_state(batch: int, inner: int, steps: int, n: int) -> None:
    g = torch.Generator().manual_seed(steps)
    x, dt, z = (torch.randn(batch, inner, steps, generator=g, dtype=torch.float64) for _ in range(3))
    B, C = (torch.randn(batch, n, steps, generator=g, dtype=torch.float64) for _ in range(2))
    A = -torch.rand(inner, n, generator=g, dtype=torch.float64) * 2
    D, bias = torch.randn(inner, generator=g, dtype=torch.float64), torch.randn(inner, generator=g, dtype=torch.float64)
    h0 = torch.randn(batch, inner, n, generator=g, dtype=torch.float64)
    states = [RecurrentState({0: LayerState({}, {0: h0[i:i + 1].clone()})}) for i in range(batch)]
    cache = StateCache({0: 1}, 1, states)
    original = modeling_jamba.mamba_selective_scan
    with continued_scan("jamba", cache):
        assert modeling_jamba.mamba_selective_scan is not original
        torch.testing.assert_close(cache.get_recurrent_state(0), h0)  # what the mixer reads before it scans
        out, last = modeling_jamba.mamba_selective_scan(x, dt, A, B, C, D=D, z=z, delta_bias=bias,
                                                       delta_softplus=True, return_last_state=True)
    assert modeling_jamba.mamba_selective_scan is original
    want_out, want_last = scan_reference(x, dt, A, B, C, h0, D, z, bias)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(last.to(torch.float64), want_last)


def test_jamba_continues_chunks_in_one_forward(no_interpreter: None) -> None:
    """A 45-token prompt in 8-token chunks, then a next turn resuming from a snapshot: one model forward per
    chunk (token by token needed one per prompt token), output equal to model.generate."""
    model = build_hybrid("jamba")
    engine = Engine(model, num_slots=512, page_size=4, dtype=torch.float32, max_context_len=128, max_batch_tokens=8)
    forwards = []
    prompt = [(7 * i + 3) % 256 for i in range(45)]
    hook = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        first = engine.generate([prompt], max_new_tokens=5)
    finally:
        hook.remove()
    assert_same_tokens(first, reference(model, [prompt], 5))
    # 6 chunks, one more split at the prompt's last page boundary (a snapshot), 4 decode steps
    assert len(forwards) == 6 + 1 + 4, len(forwards)
    reused, logits = engine.score(prompt + [1, 2, 3, 4, 5, 6])  # 7 positions in one forward from a snapshot
    with torch.no_grad():
        full = model(torch.tensor([prompt + [1, 2, 3, 4, 5, 6]])).logits[0, reused:]
    assert reused == 44
    torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-4)  # from a zero state: off by ~2
    again = [prompt + first[0] + [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    got = engine.generate(again, max_new_tokens=3)
    assert_same_tokens(got, reference(model, again, 3))
    assert engine.last_stats.prefill_reused >= 48
