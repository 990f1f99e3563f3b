"""decode_attention: Triton (interpreter) vs the torch reference, and the reference vs torch SDPA,
on a batch with sequence lengths 1, 7, 97 and 300, GQA ratios 1, 2, 4 (and 8, 20: two head blocks),
page sizes 1 and 16, slots in shuffled order, stale (out-of-pool) table entries past each length,
fp32/fp16/bf16; the launch configurations chosen for sm_80 and sm_90 run in the interpreter too;
the unchecked launcher equals the checked one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixkv.errors import ContextLengthError, InvalidSlotsError
from radixkv.kernels import decode_attention, decode_attention_ref, decode_attention_unchecked
from radixkv.kernels._common import KernelInputError
from radixkv.kernels.decode import decode_launch, decode_config, num_splits_for
from kernel_checks import assert_close, paged_table, randn

NUM_SLOTS, MAX_REQ, MAX_CTX = 1024, 7, 320
SEQ_LENS = [1, 7, 97, 300]
KV_HEADS, DIM = 2, 40  # dim 40 is padded to 64 inside the kernel
# (dtype, atol, rtol): the kernel multiplies the stored fp16/bf16 values exactly (fp32 accumulate)
# but rounds the softmax weights p to the storage dtype before p @ V, as FlashAttention does
# (relative error <= 2**-11 in fp16, 2**-8 in bf16, averaging out over the positions); the
# reference stays in fp32. Both round once to the output dtype: about one output ulp apart near
# |x| = 1: fp32 summation order ~1e-6, fp16 ulp 9.8e-4, bf16 ulp 7.8e-3.
TOLS = [(torch.float32, 2e-5, 2e-5), (torch.float16, 2e-3, 2e-3), (torch.bfloat16, 1.6e-2, 1.6e-2)]


def _table(seq_lens: list[int], page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return paged_table(seq_lens, page_size, NUM_SLOTS, MAX_REQ, MAX_CTX)


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
    config = decode_config(DIM, 2, torch.float32, None)
    got = decode_launch(*args, 0.3, num_splits, config, None)
    want = decode_attention_ref(*args, 0.3)
    assert_close(f"decode splits={num_splits}", got, want, 2e-5, 2e-5)


@pytest.mark.parametrize("target", [(8, 0), (9, 0)], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize("dim,group", [(64, 1), (128, 4), (256, 8)])
def test_decode_gpu_configs_in_interpreter(target: tuple[int, int], dim: int, group: int) -> None:
    """The block sizes the launcher picks for a GPU (what bench/compile_check.py compiles), run
    here by the interpreter in fp16: same result as the reference."""
    k_buf, v_buf = randn(NUM_SLOTS, 2, dim, dtype=torch.float16), randn(NUM_SLOTS, 2, dim, dtype=torch.float16)
    table, rows = _table([97, 7, 40], 1)
    q, lens = randn(3, 2 * group, dim, dtype=torch.float16), torch.tensor([97, 7, 40], dtype=torch.int32)
    config = decode_config(dim, group, torch.float16, target)
    got = decode_launch(q, k_buf, v_buf, table, rows, lens, dim**-0.5, 2, config, None)
    want = decode_attention_ref(q, k_buf, v_buf, table, rows, lens, dim**-0.5)
    assert_close(f"decode {config} dim={dim} group={group}", got, want, 2e-3, 2e-3)


@pytest.mark.parametrize("group", [8, 20])
def test_decode_wide_groups(group: int) -> None:
    """GQA 8 at head_dim 128 (Llama-70B's shape) in one head block; GQA 20 in two (16 + 4 heads
    of one kv head, the second block padded)."""
    k_buf, v_buf = randn(NUM_SLOTS, 1, 128), randn(NUM_SLOTS, 1, 128)
    table, rows = _table([97, 7], 1)
    q, lens = randn(2, group, 128), torch.tensor([97, 7], dtype=torch.int32)
    got = decode_attention(q, k_buf, v_buf, table, rows, lens, 128**-0.5)
    want = decode_attention_ref(q, k_buf, v_buf, table, rows, lens, 128**-0.5)
    assert_close(f"decode group={group} dim=128", got, want, 2e-5, 2e-5)


@pytest.mark.parametrize("interpret", [True, False], ids=["triton", "reference"])
def test_decode_unchecked_equals_checked(interpret: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-layer launcher (no checks, host max length given) returns exactly what the
    checked one does, on the Triton path and on the reference path; a larger max_seq_len than
    the batch's (a step's bound reused) changes nothing."""
    if not interpret:
        monkeypatch.delenv("TRITON_INTERPRET")
    args = _inputs(2, torch.float16, page_size=16)
    want = decode_attention(*args, 0.2)
    for max_len in (max(SEQ_LENS), MAX_CTX):
        got = decode_attention_unchecked(*args, 0.2, max_len)
        assert torch.equal(got, want), f"unchecked (max_seq_len {max_len}) differs from checked"


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
    with pytest.raises(KernelInputError, match="sm_scale"):
        decode_attention(q, k_buf, v_buf, table, rows, lens, float("nan"))


@pytest.mark.parametrize("num_q", [1, 3])
def test_decode_rejects_query_rows_not_matching_batch(num_q: int) -> None:
    """Issue 10, 3h: 3 query rows for 2 requests read rows/seq_lens past their end (a segfault in
    the interpreter); 1 row was silently accepted. One query row per request, or KernelInputError."""
    _, k_buf, v_buf, table, rows, lens = _inputs(2, torch.float32, seq_lens=[5, 9])
    q = randn(num_q, 2 * KV_HEADS, DIM)
    with pytest.raises(KernelInputError, match="query rows"):
        decode_attention(q, k_buf, v_buf, table, rows, lens, 1.0)
