"""decode_attention: Triton (interpreter) vs the torch reference, and the reference vs torch SDPA,
on a batch with sequence lengths 1, 7, 97 and 300, GQA ratios 1, 2, 4, page sizes 1 and 16, slots
in shuffled order, stale (out-of-pool) table entries past each length, fp32/fp16/bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixkv.errors import ContextLengthError, InvalidSlotsError
from radixkv.kernels import decode_attention, decode_attention_ref
from radixkv.kernels._common import KernelInputError
from radixkv.kernels.decode import _decode_launch, block_n_for, num_splits_for
from kernel_checks import assert_close, randn

NUM_SLOTS, MAX_REQ, MAX_CTX = 1024, 7, 320
SEQ_LENS = [1, 7, 97, 300]
KV_HEADS, DIM = 2, 40  # dim 40 is padded to 64 inside the kernel
# (dtype, atol, rtol): both sides compute in fp32 and round once to the output dtype, so they
# differ by about one output ulp near |x| = 1: fp32 summation order ~1e-6, fp16 ulp 9.8e-4,
# bf16 ulp 7.8e-3.
TOLS = [(torch.float32, 2e-5, 2e-5), (torch.float16, 2e-3, 2e-3), (torch.bfloat16, 1.6e-2, 1.6e-2)]


def _table(seq_lens: list[int], page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """req_to_token rows for `seq_lens`, slots from shuffled pages; -1 (outside the pool) after
    each length, so a read past a sequence's end would fault. Returns (table, rows)."""
    pages = torch.randperm(NUM_SLOTS // page_size)
    slots = (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)
    table = torch.full((MAX_REQ, MAX_CTX), -1, dtype=torch.int32)
    rows = torch.randperm(MAX_REQ)[:len(seq_lens)].to(torch.int32)
    used = 0
    for row, n in zip(rows.tolist(), seq_lens):
        n_pages = -(-n // page_size)  # a request owns whole pages; its tail page is part-used
        table[row, :n] = slots[used:used + n].to(torch.int32)
        used += n_pages * page_size
    return table, rows


def _inputs(group: int, dtype: torch.dtype, page_size: int = 1, seq_lens: list[int] = SEQ_LENS):
    k_buf = randn(NUM_SLOTS, KV_HEADS, DIM, dtype=dtype)
    v_buf = randn(NUM_SLOTS, KV_HEADS, DIM, dtype=dtype)
    table, rows = _table(seq_lens, page_size)
    q = randn(len(seq_lens), KV_HEADS * group, DIM, dtype=dtype)
    return q, k_buf, v_buf, table, rows, torch.tensor(seq_lens, dtype=torch.int32)


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("dtype,atol,rtol", TOLS)
def test_decode_matches_ref(group: int, page_size: int, dtype: torch.dtype, atol: float, rtol: float) -> None:
    args = _inputs(group, dtype, page_size)
    got = decode_attention(*args, DIM**-0.5)
    want = decode_attention_ref(*args, DIM**-0.5)
    assert_close(f"decode group={group} page={page_size}", got, want, atol, rtol)


@pytest.mark.parametrize("num_splits", [1, 3, 16])
def test_decode_split_counts_agree(num_splits: int) -> None:
    """The reduction is exact for any split count, including splits longer than some sequences
    (empty splits) and more splits than positions (seq_len 1 with 16 splits)."""
    args = _inputs(2, torch.float32)
    got = _decode_launch(*args, 0.3, num_splits)
    want = decode_attention_ref(*args, 0.3)
    assert_close(f"decode splits={num_splits}", got, want, 2e-5, 2e-5)


def test_decode_wide_group_smaller_block() -> None:
    """GQA 8 at head_dim 128 (Llama-70B's shape) runs with BLOCK_N 16: still equal to the ref."""
    assert block_n_for(8, 128) == 16 and block_n_for(4, 64) == 32
    k_buf, v_buf = randn(NUM_SLOTS, 1, 128), randn(NUM_SLOTS, 1, 128)
    table, rows = _table([97, 7], 1)
    q, lens = randn(2, 8, 128), torch.tensor([97, 7], dtype=torch.int32)
    got = decode_attention(q, k_buf, v_buf, table, rows, lens, 128**-0.5)
    want = decode_attention_ref(q, k_buf, v_buf, table, rows, lens, 128**-0.5)
    assert_close("decode group=8 dim=128", got, want, 2e-5, 2e-5)


def test_num_splits_heuristic() -> None:
    assert num_splits_for(1, 8, 1) == 1
    assert num_splits_for(1, 8, 4096) == 16
    assert num_splits_for(256, 8, 4096) == 1  # 2048 programs already fill the GPU


def test_decode_noncontiguous_q() -> None:
    """q as every other head of a wider tensor."""
    q, k_buf, v_buf, table, rows, lens = _inputs(2, torch.float16)
    wide = randn(q.shape[0], 2 * q.shape[1], DIM, dtype=torch.float16)
    q = wide[:, ::2]
    got = decode_attention(q, k_buf, v_buf, table, rows, lens, 0.2)
    want = decode_attention_ref(q.contiguous(), k_buf, v_buf, table, rows, lens, 0.2)
    assert_close("decode strided q", got, want, 2e-3, 2e-3)


@pytest.mark.parametrize("group", [1, 4])
def test_decode_ref_matches_sdpa(group: int) -> None:
    """Pins the reference itself: per request, SDPA over the gathered K/V (heads repeated)."""
    q, k_buf, v_buf, table, rows, lens = _inputs(group, torch.float32)
    got = decode_attention_ref(q, k_buf, v_buf, table, rows, lens, 0.25)
    for b, (row, n) in enumerate(zip(rows.tolist(), lens.tolist())):
        slots = table[row, :n].long()
        k = k_buf[slots].repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, n, dim]
        v = v_buf[slots].repeat_interleave(group, dim=1).transpose(0, 1)
        want = F.scaled_dot_product_attention(q[b][:, None], k, v, scale=0.25)[:, 0]
        assert_close(f"ref vs sdpa, request {b} (len {n})", got[b], want, 1e-5, 1e-5)


def test_decode_rejects_bad_inputs() -> None:
    q, k_buf, v_buf, table, rows, lens = _inputs(2, torch.float32, seq_lens=[5, 9])
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    with pytest.raises(KernelInputError, match="below 1"):
        decode_attention(q, k_buf, v_buf, table, rows, i32(0, 9), 1.0)
    with pytest.raises(ContextLengthError):
        decode_attention(q, k_buf, v_buf, table, rows, i32(5, MAX_CTX + 1), 1.0)
    with pytest.raises(InvalidSlotsError, match="outside the pool"):
        decode_attention(q, k_buf, v_buf, table, rows, i32(5, 10), 1.0)  # position 9 is -1
    with pytest.raises(KernelInputError, match="rows"):
        decode_attention(q, k_buf, v_buf, table, i32(0, MAX_REQ), lens, 1.0)
    with pytest.raises(KernelInputError, match="num_kv_heads"):
        decode_attention(q[:, :3], k_buf, v_buf, table, rows, lens, 1.0)
    with pytest.raises(KernelInputError, match="dtype"):
        decode_attention(q.half(), k_buf, v_buf, table, rows, lens, 1.0)
    with pytest.raises(KernelInputError, match="entries"):
        decode_attention(q, k_buf, v_buf, table, rows, i32(5), 1.0)
