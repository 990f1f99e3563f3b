"""extend_attention: Triton (interpreter) vs the torch reference, the reference vs torch SDPA, and
the last new token vs decode_attention over the same stored KV. Ragged batch with prefix/extend
lengths (0, 1), (7, 97), (300, 7), (33, 33), (5, 0); GQA ratios 1, 2, 4; page sizes 1 and 16;
shuffled slots; stale (out-of-pool) table entries past each prefix; fp32/fp16/bf16; the block
sizes chosen for sm_80 and sm_90 run in the interpreter too; unchecked equals checked."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixkv.errors import InvalidSlotsError
from radixkv.kernels import (ExtendLens, decode_attention, extend_attention, extend_attention_ref,
                             extend_attention_unchecked, store_kv, write_req_to_token)
from radixkv.kernels._common import KernelInputError
from radixkv.kernels.extend import extend_launch, extend_config
from kernel_checks import assert_close, randn

NUM_SLOTS, MAX_REQ, MAX_CTX = 1024, 7, 400
PREFIX_EXTEND = [(0, 1), (7, 97), (300, 7), (33, 33), (5, 0)]  # 33: one past a block of 32
KV_HEADS, DIM = 2, 24  # dim 24 is padded to 32 inside the kernel
# (dtype, atol, rtol): the kernel multiplies the stored values exactly (fp32 accumulate) but rounds
# the softmax weights p to fp16/bf16 before p @ V, as FlashAttention does; the reference stays in
# fp32. Both round once to the output dtype (about one output ulp apart near |x| = 1: fp16
# 9.8e-4, bf16 7.8e-3); fp32 differs by summation order only.
TOLS = [(torch.float32, 2e-5, 2e-5), (torch.float16, 2e-3, 2e-3), (torch.bfloat16, 1.6e-2, 1.6e-2)]


def _batch(group: int, dtype: torch.dtype, page_size: int = 1, pe: list = PREFIX_EXTEND):
    """Inputs of one extend call. Each request's prefix sits in shuffled pages; the table holds
    -1 (outside the pool) after each prefix. q, k, v are slices of one fused qkv tensor."""
    pages = torch.randperm(NUM_SLOTS // page_size)
    all_slots = (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)
    table = torch.full((MAX_REQ, MAX_CTX), -1, dtype=torch.int32)
    rows = torch.randperm(MAX_REQ)[:len(pe)].to(torch.int32)
    used = 0
    for row, (p, _) in zip(rows.tolist(), pe):
        table[row, :p] = all_slots[used:used + p].to(torch.int32)
        used += -(-p // page_size) * page_size
    k_buf = randn(NUM_SLOTS, KV_HEADS, DIM, dtype=dtype)
    v_buf = randn(NUM_SLOTS, KV_HEADS, DIM, dtype=dtype)
    heads = KV_HEADS * group
    qkv = randn(sum(e for _, e in pe), heads + 2 * KV_HEADS, DIM, dtype=dtype)
    q, k, v = qkv[:, :heads], qkv[:, heads:heads + KV_HEADS], qkv[:, heads + KV_HEADS:]
    lens = [torch.tensor(x, dtype=torch.int32) for x in zip(*pe)]
    return (q, k, v, k_buf, v_buf, table, rows, *lens), all_slots[used:]


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("dtype,atol,rtol", TOLS)
def test_extend_matches_ref(group: int, dtype: torch.dtype, atol: float, rtol: float) -> None:
    args, _ = _batch(group, dtype, page_size=16 if group == 2 else 1)
    got = extend_attention(*args, DIM**-0.5)
    want = extend_attention_ref(*args, DIM**-0.5)
    assert_close(f"extend group={group}", got, want, atol, rtol)


@pytest.mark.parametrize("group", [1, 4])
def test_extend_ref_matches_sdpa(group: int) -> None:
    """Pins the reference: per request, SDPA over [prefix K/V ; new K/V] with the query at
    position prefix + i allowed keys 0 .. prefix + i."""
    args, _ = _batch(group, torch.float32)
    q, k, v, k_buf, v_buf, table, rows, prefix_lens, extend_lens = args
    got = extend_attention_ref(*args, 0.3)
    start = 0
    for row, p, e in zip(rows.tolist(), prefix_lens.tolist(), extend_lens.tolist()):
        slots = table[row, :p].long()
        keys = torch.cat([k_buf[slots], k[start:start + e]]).repeat_interleave(group, 1).transpose(0, 1)
        vals = torch.cat([v_buf[slots], v[start:start + e]]).repeat_interleave(group, 1).transpose(0, 1)
        mask = torch.arange(p + e)[None, :] <= p + torch.arange(e)[:, None]
        want = F.scaled_dot_product_attention(q[start:start + e].transpose(0, 1), keys, vals,
                                              attn_mask=mask, scale=0.3).transpose(0, 1)
        assert_close(f"ref vs sdpa (prefix {p}, extend {e})", got[start:start + e], want, 1e-5, 1e-5)
        start += e


def test_extend_last_token_equals_decode() -> None:
    """Store the new tokens' K/V behind each prefix: the last new token's extend output must equal
    decode_attention over the whole sequence (two kernels, one answer)."""
    pe = [(7, 97), (300, 7), (33, 33), (0, 1)]
    args, free = _batch(2, torch.float32, page_size=16, pe=pe)
    q, k, v, k_buf, v_buf, table, rows, prefix_lens, extend_lens = args
    new_slots = free[torch.randperm(free.numel())[:q.shape[0]]]
    store_kv(k_buf, v_buf, new_slots, k.contiguous(), v.contiguous())
    write_req_to_token(table, rows, prefix_lens, new_slots, extend_lens)
    got = extend_attention(*args, 0.2)
    last = torch.cumsum(extend_lens.long(), 0) - 1
    want = decode_attention(q[last], k_buf, v_buf, table, rows, prefix_lens + extend_lens, 0.2)
    assert_close("extend last token vs decode", got[last], want, 2e-5, 2e-5)


@pytest.mark.parametrize("target", [(8, 0), (9, 0)], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize("dim", [64, 128, 256])
def test_extend_gpu_configs_in_interpreter(target: tuple[int, int], dim: int) -> None:
    """The block sizes the launcher picks for a GPU (what bench/compile_check.py compiles), run
    by the interpreter in fp16 on a batch whose lengths straddle those blocks."""
    pe = [(70, 130), (0, 65), (129, 3)]
    config = extend_config(dim, 2, torch.float16, target)
    k_buf, v_buf = (randn(NUM_SLOTS, KV_HEADS, dim, dtype=torch.float16),
                    randn(NUM_SLOTS, KV_HEADS, dim, dtype=torch.float16))
    (_, _, _, _, _, table, rows, prefix_lens, extend_lens), _ = _batch(2, torch.float16, pe=pe)
    n = int(extend_lens.sum())
    q, k, v = (randn(n, h, dim, dtype=torch.float16) for h in (2 * KV_HEADS, KV_HEADS, KV_HEADS))
    args = (q, k, v, k_buf, v_buf, table, rows, prefix_lens, extend_lens, dim**-0.5)
    got = extend_launch(*args, 130, config, None)
    want = extend_attention_ref(*args)
    assert_close(f"extend {config} dim={dim}", got, want, 2e-3, 2e-3)


@pytest.mark.parametrize("interpret", [True, False], ids=["triton", "reference"])
def test_extend_unchecked_equals_checked(interpret: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-layer launcher (no checks, host lengths given) returns exactly what the checked one
    does, on the Triton path and on the reference path."""
    if not interpret:
        monkeypatch.delenv("TRITON_INTERPRET")
    args, _ = _batch(2, torch.float16, page_size=16)
    want = extend_attention(*args, 0.2)
    lens = ExtendLens.read(*args[6:])
    assert lens.max_extend_len == max(e for _, e in PREFIX_EXTEND)
    got = extend_attention_unchecked(*args, 0.2, lens)
    assert torch.equal(got, want), "unchecked differs from checked"


def test_extend_rejects_bad_inputs() -> None:
    args, _ = _batch(2, torch.float32, pe=[(5, 3), (2, 4)])
    q, k, v, k_buf, v_buf, table, rows, prefix_lens, extend_lens = args
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    with pytest.raises(KernelInputError, match="sum to"):
        extend_attention(q, k, v, k_buf, v_buf, table, rows, prefix_lens, i32(3, 3), 1.0)
    with pytest.raises(InvalidSlotsError, match="outside the pool"):
        extend_attention(q, k, v, k_buf, v_buf, table, rows, i32(6, 2), extend_lens, 1.0)
    with pytest.raises(KernelInputError, match="expected"):
        extend_attention(q, k[:, :1], v, k_buf, v_buf, table, rows, prefix_lens, extend_lens, 1.0)
    with pytest.raises(KernelInputError, match="dtype"):
        extend_attention(q, k.half(), v, k_buf, v_buf, table, rows, prefix_lens, extend_lens, 1.0)
    with pytest.raises(KernelInputError, match="below 0"):
        extend_attention(q, k, v, k_buf, v_buf, table, rows, i32(-1, 2), extend_lens, 1.0)
    with pytest.raises(KernelInputError, match="entries"):
        extend_attention(q, k, v, k_buf, v_buf, table, rows[:1], prefix_lens, extend_lens, 1.0)
    with pytest.raises(KernelInputError, match="sm_scale"):
        extend_attention(q, k, v, k_buf, v_buf, table, rows, prefix_lens, extend_lens, "0.5")
    with pytest.raises(KernelInputError, match="heads"):
        extend_attention(q[:, :0], k, v, k_buf, v_buf, table, rows, prefix_lens, extend_lens, 1.0)
