"""store_kv and gather_kv: Triton (interpreter) vs torch reference, compared exactly (pure copies),
on random non-zero data, odd sizes, slots drawn with randperm (page size 1) or as shuffled whole
pages of 16; bad slots raise before anything is written; the unchecked launchers equal the checked
ones."""

from __future__ import annotations

import pytest
import torch

from radixkv.errors import InvalidSlotsError, RadixKVError
from radixkv.kernels import (gather_kv, gather_kv_ref, gather_kv_unchecked, store_kv, store_kv_ref,
                             store_kv_unchecked)
from radixkv.kernels._common import KernelInputError
from kernel_checks import assert_equal, here, randn

NUM_SLOTS = 640
# (n tokens, num_kv_heads, head_dim): odd counts; padded heads (3 -> 4); odd and non-pow2 dims.
# One program per token, and the interpreter runs each as Python: 97 tokens already launch programs
# far apart in the pool (a 300-token case cost 6 s per parametrization and tested nothing more).
CASES = [(1, 1, 16), (7, 3, 7), (97, 2, 40)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]  # copies: no arithmetic, exact in bf16 too


def _slots(n: int, page_size: int) -> torch.Tensor:
    """n distinct slots in no order: randperm of slots, or of pages of `page_size` slots."""
    if page_size == 1:
        return torch.randperm(NUM_SLOTS)[:n]
    pages = torch.randperm(NUM_SLOTS // page_size)
    return (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)[:n]


@pytest.mark.parametrize("n,heads,dim", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 16])
def test_store_kv_matches_ref(n: int, heads: int, dim: int, dtype: torch.dtype, page_size: int) -> None:
    k_buf, v_buf = randn(NUM_SLOTS, heads, dim, dtype=dtype), randn(NUM_SLOTS, heads, dim, dtype=dtype)
    slots = _slots(n, page_size)
    k, v = randn(n, heads, dim, dtype=dtype), randn(n, heads, dim, dtype=dtype)
    k_want, v_want = k_buf.clone(), v_buf.clone()
    store_kv_ref(k_want, v_want, slots, k, v)
    store_kv(k_buf, v_buf, slots, k, v)
    assert_equal("k_buf", k_buf, k_want)
    assert_equal("v_buf", v_buf, v_want)
    assert_equal("k_buf[slots]", k_buf[slots], k)  # pins the reference itself


def test_store_kv_strided_source() -> None:
    """k, v as views with a head stride of 2 * dim (every other head of a wider tensor)."""
    k_buf, v_buf = randn(NUM_SLOTS, 3, 8, dtype=torch.float16), randn(NUM_SLOTS, 3, 8, dtype=torch.float16)
    wide = randn(2, 31, 6, 8, dtype=torch.float16)
    k, v = wide[0, :, ::2], wide[1, :, 1::2]
    slots = _slots(31, 1)
    store_kv(k_buf, v_buf, slots, k, v)
    assert_equal("k_buf[slots]", k_buf[slots], k)
    assert_equal("v_buf[slots]", v_buf[slots], v)


@pytest.mark.parametrize("n,heads,dim", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_kv_matches_ref(n: int, heads: int, dim: int, dtype: torch.dtype) -> None:
    buf = randn(NUM_SLOTS, heads, dim, dtype=dtype)
    slots = torch.randint(0, NUM_SLOTS, (n,))  # repeats allowed for reads
    got = gather_kv(buf, slots)
    want = gather_kv_ref(buf, slots)
    assert_equal("gather_kv", got, want)
    assert got.is_contiguous()
    assert_equal("gather_kv vs buf[slots]", got, buf[slots])


def test_store_then_gather_round_trip() -> None:
    k_buf = randn(NUM_SLOTS, 2, 40, dtype=torch.float32)
    v_buf = randn(NUM_SLOTS, 2, 40, dtype=torch.float32)
    slots = _slots(97, 16)
    k, v = randn(97, 2, 40, dtype=torch.float32), randn(97, 2, 40, dtype=torch.float32)
    store_kv(k_buf, v_buf, slots, k, v)
    assert_equal("k", gather_kv(k_buf, slots), k)
    assert_equal("v", gather_kv(v_buf, slots), v)


@pytest.mark.parametrize("interpret", [True, False], ids=["triton", "reference"])
def test_unchecked_equal_checked(interpret: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not interpret:
        monkeypatch.delenv("TRITON_INTERPRET")
    k_buf, v_buf = randn(NUM_SLOTS, 3, 7, dtype=torch.float16), randn(NUM_SLOTS, 3, 7, dtype=torch.float16)
    k_want, v_want = k_buf.clone(), v_buf.clone()
    slots, k, v = _slots(97, 16), randn(97, 3, 7, dtype=torch.float16), randn(97, 3, 7, dtype=torch.float16)
    store_kv(k_want, v_want, slots, k, v)
    store_kv_unchecked(k_buf, v_buf, slots, k, v)
    assert_equal("k_buf", k_buf, k_want)
    assert_equal("v_buf", v_buf, v_want)
    reads = torch.randint(0, NUM_SLOTS, (300,))
    assert_equal("gather_kv", gather_kv_unchecked(k_buf, reads), gather_kv(k_buf, reads))


def test_empty_store_and_gather() -> None:
    k_buf = randn(NUM_SLOTS, 2, 8, dtype=torch.float32)
    before = k_buf.clone()
    empty = torch.empty(0, 2, 8)
    store_kv(k_buf, k_buf, torch.empty(0, dtype=torch.int64), empty, empty)
    assert_equal("k_buf", k_buf, before)
    assert gather_kv(k_buf, torch.empty(0, dtype=torch.int64)).shape == (0, 2, 8)


def _bad_store_cases():
    ok = torch.arange(3)
    yield "slot == num_slots", torch.tensor([0, NUM_SLOTS, 2]), (3, 2, 8), torch.float32, InvalidSlotsError
    yield "negative slot", torch.tensor([0, -1, 2]), (3, 2, 8), torch.float32, InvalidSlotsError
    yield "duplicate slot", torch.tensor([4, 5, 4]), (3, 2, 8), torch.float32, InvalidSlotsError
    yield "int32 slots", ok.int(), (3, 2, 8), torch.float32, KernelInputError
    yield "too few rows", ok, (2, 2, 8), torch.float32, KernelInputError
    yield "wrong heads", ok, (3, 1, 8), torch.float32, KernelInputError
    yield "wrong dtype", ok, (3, 2, 8), torch.float16, KernelInputError


@pytest.mark.parametrize("case", list(_bad_store_cases()), ids=lambda c: c[0])
def test_store_kv_rejects_before_writing(case) -> None:
    _, slots, shape, dtype, err = case
    slots = here(slots)
    k_buf, v_buf = randn(NUM_SLOTS, 2, 8, dtype=torch.float32), randn(NUM_SLOTS, 2, 8, dtype=torch.float32)
    k_before, v_before = k_buf.clone(), v_buf.clone()
    with pytest.raises(err):
        store_kv(k_buf, v_buf, slots, randn(*shape, dtype=dtype), randn(*shape, dtype=dtype))
    assert issubclass(err, RadixKVError)
    assert_equal("k_buf after a rejected store", k_buf, k_before)
    assert_equal("v_buf after a rejected store", v_buf, v_before)


def test_gather_kv_rejects_out_of_range() -> None:
    buf = randn(NUM_SLOTS, 2, 8, dtype=torch.float32)
    with pytest.raises(InvalidSlotsError):
        gather_kv(buf, torch.tensor([NUM_SLOTS]))
    with pytest.raises(InvalidSlotsError):
        gather_kv(buf, torch.tensor([-1, 0]))
    with pytest.raises(KernelInputError):
        gather_kv(buf[:, :, :4].transpose(1, 2), torch.tensor([0]))  # last dim not unit-stride
