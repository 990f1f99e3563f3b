"""write_req_to_token and build_kv_indices: Triton (interpreter) vs torch reference, compared
exactly (they are pure copies), for batches the references copy row by row and batches they copy
through one flat index (> 8 rows); a hand-written example pins the reference itself; bad inputs
(overlapping writes included) raise before the table is touched; the unchecked launchers equal the
checked ones; dispatch follows TRITON_INTERPRET at call time."""

from __future__ import annotations

import pytest
import torch

from radixkv.errors import ContextLengthError, InvalidSlotsError, RadixKVError
from radixkv.kernels import (KernelInputError, build_kv_indices, build_kv_indices_ref,
                             build_kv_indices_unchecked, write_req_to_token, write_req_to_token_ref,
                             write_req_to_token_unchecked)
from radixkv.kernels import indices as indices_mod
from kernel_checks import assert_equal, here

MAX_REQ, MAX_CTX, NUM_SLOTS = 13, 320, 5000
# odd lengths around the kernel's block of 128, plus empty rows; the last two exceed the 8 rows
# the references copy one by one
LENS_CASES = [[1], [7, 0, 97], [300, 1, 129, 0, 7], [0, 0], [1] * 11, [3, 0, 130, 1, 1, 9, 0, 2, 17, 1]]


def _random_batch(lens: list[int], dtype: torch.dtype):
    batch = len(lens)
    table = torch.randint(-5, NUM_SLOTS, (MAX_REQ, MAX_CTX), dtype=torch.int32)  # stale garbage
    rows = torch.randperm(MAX_REQ)[:batch].to(dtype)
    lens_t = torch.tensor(lens, dtype=dtype)
    starts = torch.tensor([int(torch.randint(0, MAX_CTX - n + 1, ())) for n in lens], dtype=dtype)
    slots = torch.randperm(NUM_SLOTS)[:sum(lens)]  # int64, no duplicates, no order
    return table, rows, starts, slots, lens_t


@pytest.mark.parametrize("lens", LENS_CASES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_write_req_to_token_matches_ref(lens: list[int], dtype: torch.dtype) -> None:
    table, rows, starts, slots, lens_t = _random_batch(lens, dtype)
    want = table.clone()
    write_req_to_token_ref(want, rows, starts, slots, lens_t)
    write_req_to_token(table, rows, starts, slots, lens_t)
    assert_equal("req_to_token", table, want)


@pytest.mark.parametrize("interpret", [True, False], ids=["triton", "reference"])
def test_unchecked_equal_checked(interpret: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not interpret:
        monkeypatch.delenv("TRITON_INTERPRET")
    for lens in LENS_CASES:
        table, rows, starts, slots, lens_t = _random_batch(lens, torch.int32)
        want = table.clone()
        write_req_to_token(want, rows, starts, slots, lens_t)
        write_req_to_token_unchecked(table, rows, starts, slots, lens_t)
        assert_equal(f"req_to_token {lens}", table, want)
        checked = build_kv_indices(table, rows, lens_t)
        for num_tokens in (None, sum(lens)):
            got = build_kv_indices_unchecked(table, rows, lens_t, num_tokens=num_tokens)
            assert_equal(f"kv_indptr {lens}", got[0], checked[0])
            assert_equal(f"kv_indices {lens}", got[1], checked[1])


def test_refs_on_a_strided_table() -> None:
    """A table that is a column slice of a wider one (row stride > max_context_len): both copy
    paths of the references address it through its strides."""
    wide = torch.randint(-5, NUM_SLOTS, (MAX_REQ, MAX_CTX + 37), dtype=torch.int32)
    lens = [5, 0, 17, 2, 1, 1, 3, 8, 4, 6]
    for batch in (3, len(lens)):
        table, rows, starts, slots, lens_t = _random_batch(lens[:batch], torch.int64)
        view, dense = wide.clone()[:, :MAX_CTX], table.clone()
        view.copy_(dense)
        write_req_to_token_ref(view, rows, starts, slots, lens_t)
        write_req_to_token_ref(dense, rows, starts, slots, lens_t)
        assert_equal(f"strided write, {batch} rows", view, dense)
        assert_equal(f"strided build, {batch} rows", build_kv_indices_ref(view, rows, lens_t)[1],
                     build_kv_indices_ref(dense, rows, lens_t)[1])


def test_write_req_to_token_ref_by_hand() -> None:
    table = torch.full((3, 6), -1, dtype=torch.int32)
    write_req_to_token_ref(table, torch.tensor([2, 0], dtype=torch.int32),
                           torch.tensor([1, 0], dtype=torch.int32), torch.tensor([10, 11, 12, 20]),
                           torch.tensor([3, 1], dtype=torch.int32))
    want = torch.tensor([[20, -1, -1, -1, -1, -1], [-1] * 6, [-1, 10, 11, 12, -1, -1]],
                        dtype=torch.int32)
    assert_equal("req_to_token", table, want)


@pytest.mark.parametrize("lens", LENS_CASES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_build_kv_indices_matches_ref(lens: list[int], dtype: torch.dtype) -> None:
    table = torch.randint(0, NUM_SLOTS, (MAX_REQ, MAX_CTX), dtype=torch.int32)
    rows = torch.randperm(MAX_REQ)[:len(lens)].to(dtype)
    seq_lens = torch.tensor(lens, dtype=dtype)
    got_indptr, got_indices = build_kv_indices(table, rows, seq_lens)
    want_indptr, want_indices = build_kv_indices_ref(table, rows, seq_lens)
    assert_equal("kv_indptr", got_indptr, want_indptr)
    assert_equal("kv_indices", got_indices, want_indices)


def test_build_kv_indices_ref_by_hand() -> None:
    table = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    indptr, indices = build_kv_indices_ref(table, torch.tensor([2, 0, 1], dtype=torch.int32),
                                           torch.tensor([3, 0, 2], dtype=torch.int32))
    assert_equal("kv_indptr", indptr, torch.tensor([0, 3, 3, 5], dtype=torch.int32))
    assert_equal("kv_indices", indices, torch.tensor([8, 9, 10, 4, 5]))


def test_write_then_build_round_trip() -> None:
    """Rows written from position 0 read back, through the CSR, as the slots that were written."""
    lens = [97, 1, 7, 300]
    table, rows, _, slots, lens_t = _random_batch(lens, torch.int32)
    write_req_to_token(table, rows, torch.zeros_like(lens_t), slots, lens_t)
    indptr, indices = build_kv_indices(table, rows, lens_t)
    assert_equal("kv_indices", indices, slots)
    assert indptr.tolist() == [0, 97, 98, 105, 405]


def _bad_write_cases():
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    yield "row out of range", (i32(MAX_REQ), i32(0), torch.arange(3), i32(3)), KernelInputError
    yield "negative row", (i32(-1), i32(0), torch.arange(3), i32(3)), KernelInputError
    yield "past max_context_len", (i32(0), i32(MAX_CTX - 2), torch.arange(3), i32(3)), KernelInputError
    yield "len past max_context_len", (i32(0), i32(0), torch.arange(MAX_CTX + 1), i32(MAX_CTX + 1)), \
        ContextLengthError
    yield "negative start", (i32(0), i32(-1), torch.arange(3), i32(3)), KernelInputError
    yield "slots count", (i32(0), i32(0), torch.arange(4), i32(3)), InvalidSlotsError
    yield "negative slot", (i32(0), i32(0), torch.tensor([0, -1, 2]), i32(3)), InvalidSlotsError
    yield "slot over int32", (i32(0), i32(0), torch.tensor([0, 2**31, 2]), i32(3)), InvalidSlotsError
    yield "int32 slots", (i32(0), i32(0), i32(0, 1, 2), i32(3)), KernelInputError
    yield "float lens", (i32(0), i32(0), torch.arange(3), torch.tensor([3.0])), KernelInputError
    yield "overlapping ranges of one row", (i32(4, 2, 4), i32(0, 0, 2), torch.arange(7), i32(3, 1, 3)), \
        KernelInputError


@pytest.mark.parametrize("case", list(_bad_write_cases()), ids=lambda c: c[0])
def test_write_req_to_token_rejects_before_writing(case) -> None:
    _, args, err = case
    rows, starts, slots, lens = map(here, args)
    table = torch.full((MAX_REQ, MAX_CTX), -1, dtype=torch.int32)
    with pytest.raises(err):
        write_req_to_token(table, rows, starts, slots, lens)
    assert issubclass(err, RadixKVError)
    assert bool((table == -1).all()), "a rejected call wrote into the table"


def test_build_kv_indices_rejects_bad_rows_and_lens() -> None:
    table = torch.zeros((MAX_REQ, MAX_CTX), dtype=torch.int32)
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    with pytest.raises(KernelInputError):
        build_kv_indices(table, i32(MAX_REQ), i32(1))
    with pytest.raises(ContextLengthError):
        build_kv_indices(table, i32(0), i32(MAX_CTX + 1))
    with pytest.raises(KernelInputError):
        build_kv_indices(table, i32(0, 1), i32(1))
    with pytest.raises(KernelInputError):
        build_kv_indices(table.long(), i32(0), i32(1))


@pytest.mark.cpu
@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA, @triton.jit compiles (interpreter off at import)")
def test_dispatch_reads_env_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset TRITON_INTERPRET on a CPU tensor: the launcher must call the reference."""
    calls = []
    real_ref = indices_mod.build_kv_indices_ref

    def spy(*args):
        calls.append(args)
        return real_ref(*args)

    monkeypatch.setattr(indices_mod, "build_kv_indices_ref", spy)
    table = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    rows, lens = torch.tensor([1], dtype=torch.int32), torch.tensor([4], dtype=torch.int32)
    build_kv_indices(table, rows, lens)
    assert calls == [], "with TRITON_INTERPRET=1 the kernel, not the reference, must run"
    monkeypatch.delenv("TRITON_INTERPRET")
    _, got = build_kv_indices(table, rows, lens)
    assert len(calls) == 1, "without TRITON_INTERPRET on CPU the reference must run"
    assert_equal("kv_indices", got, torch.tensor([4, 5, 6, 7]))
