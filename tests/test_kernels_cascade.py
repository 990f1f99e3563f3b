"""cascade_decode: the Triton kernels (interpreter) and the torch reference against flat
`decode_attention_ref` over each row's concatenated KV, on plans from a real cache (system prompt,
document, tails; pages 1 and 16) and on hand-built plans (empty groups, chunked runs, rows in several
groups of one level, a row with no shared level), GQA 1/2/4, odd head_dim, fp32/fp16. Also the partial
states and the merge on their own, the checked launcher's errors, and no host sync on the per-layer path.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernel_checks import assert_close, randn, random_kv_cache
from test_cascade_plan import decoding
from radixkv.kernels import (CascadeLevel, CascadePlan, KernelInputError, cascade_attention,
                             cascade_attention_ref, cascade_decode, cascade_decode_launch, decode_attention_ref,
                             merge_states, merge_states_ref, with_padding)
from radixkv.kernels.merge import merge_launch_config

KV_HEADS, DIM, SCALE = 2, 24, 0.3  # dim 24 is padded to 32 inside the kernel
# (dtype, atol, rtol): both sides compute in fp32 and round once to the output dtype; the cascade
# sums in another order and merges partials, ~1e-6 apart in fp32; fp16 output ulp is 9.8e-4 near 1.
TOLS = [(torch.float32, 2e-5, 2e-5), (torch.float16, 2e-3, 2e-3)]


def _i32(x: list[int]) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.int32)


def _level(groups: list[tuple[list[int], list[int]]]) -> CascadeLevel:
    """A level from (rows, slots) groups."""
    qo, kv = [0], [0]
    for rows, slots in groups:
        qo.append(qo[-1] + len(rows))
        kv.append(kv[-1] + len(slots))
    return CascadeLevel(_i32(qo), _i32([r for rows, _ in groups for r in rows]), _i32(kv),
                        torch.tensor([s for _, slots in groups for s in slots], dtype=torch.int64),
                        max(len(r) for r, _ in groups), max(len(s) for _, s in groups))


def _plan(levels: list[list[tuple[list[int], list[int]]]], num_rows: int) -> tuple[CascadePlan, list[list[int]]]:
    """A plan from host groups, and each row's slots in merge order (what flat decode must read)."""
    owner = [(r, slots) for groups in levels for rows, slots in groups for r in rows]
    ptr, ids, row_slots = [0], [], []
    for r in range(num_rows):
        mine = [e for e, (o, _) in enumerate(owner) if o == r]
        ids += mine
        ptr.append(len(ids))
        row_slots.append([s for e in mine for s in owner[e][1]])
    per_row = max(b - a for a, b in zip(ptr, ptr[1:]))
    return CascadePlan(tuple(_level(g) for g in levels), _i32(ptr), _i32(ids), per_row), row_slots


def _flat(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, row_slots: list[list[int]]) -> torch.Tensor:
    table = torch.full((len(row_slots), max(map(len, row_slots))), -1, dtype=torch.int32)
    for r, slots in enumerate(row_slots):
        table[r, :len(slots)] = _i32(slots)
    lens = _i32([len(s) for s in row_slots])
    return decode_attention_ref(q, k_buf, v_buf, table, torch.arange(len(row_slots), dtype=torch.int32), lens, SCALE)


def _cache_plan(page_size: int, group: int, dtype: torch.dtype, scale_rows: int = 1):
    """A decode step of 7 rows: 5 under a system prompt, 3 of them under a document, 2 alone."""
    g = torch.Generator().manual_seed(page_size)
    tok = lambda n: torch.randint(0, 500, (n,), generator=g, device="cpu").tolist()  # noqa: E731
    system, doc = tok(37), tok(29)
    prompts = ([system + doc + tok(3 + i) for i in range(3 * scale_rows)] + [system + tok(11), system + tok(2)]
               + [tok(19), tok(5)])
    cache = random_kv_cache(KV_HEADS, DIM, 2048, page_size, 32, dtype)
    seqs = decoding(cache, prompts)
    b = cache.batch(seqs, cascade=True)
    assert len(b.cascade.levels) >= 3  # system, document, tails (maybe split by length)
    q = randn(len(seqs), KV_HEADS * group, DIM, dtype=dtype)
    kb, vb = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]
    want = decode_attention_ref(q, kb, vb, cache.req_pool.req_to_token, b.rows, b.seq_lens, SCALE)
    return q, kb, vb, b.cascade, want


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("dtype,atol,rtol", TOLS)
def test_triton_matches_flat_decode(group: int, page_size: int, dtype: torch.dtype, atol: float, rtol: float) -> None:
    q, kb, vb, plan, want = _cache_plan(page_size, group, dtype)
    assert_close(f"cascade group={group} page={page_size}", cascade_decode(q, kb, vb, plan, SCALE), want, atol, rtol)


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("dtype,atol,rtol", TOLS)
def test_reference_matches_flat_decode(group: int, dtype: torch.dtype, atol: float, rtol: float,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET")
    q, kb, vb, plan, want = _cache_plan(16, group, dtype, scale_rows=8)  # 28 rows, 24 under the document
    assert_close("cascade ref", cascade_decode(q, kb, vb, plan, SCALE), want, atol, rtol)


HAND = [  # 5 rows; row 4 has no shared level; level 1 holds an empty group and two chunks of one run
    [([0, 1, 2, 3], list(range(100, 141)))],
    [([0, 2], []), ([1, 2, 3], list(range(200, 217))), ([1, 2, 3], list(range(300, 302)))],
    [([0], [7, 9, 11]), ([1], [400]), ([2], list(range(500, 533))), ([3], [12]), ([4], list(range(600, 619)))],
]


@pytest.mark.parametrize("triton", [True, False])
def test_hand_built_plan(triton: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not triton:
        monkeypatch.delenv("TRITON_INTERPRET")
    plan, row_slots = _plan(HAND, 5)
    kb, vb, q = randn(1024, KV_HEADS, DIM), randn(1024, KV_HEADS, DIM), randn(5, KV_HEADS * 2, DIM)
    want = _flat(q, kb, vb, row_slots)
    assert_close("hand plan", cascade_decode(q, kb, vb, plan, SCALE), want, 2e-5, 2e-5)
    padded = with_padding(plan)  # the reference's layout built ahead, as the planner does on CPU
    assert all(lvl.padded is not None for lvl in padded.levels) and padded.merge_padded is not None
    assert_close("hand plan, padded", cascade_decode(q, kb, vb, padded, SCALE), want, 2e-5, 2e-5)


def test_states_and_merge_against_references() -> None:
    plan, _ = _plan(HAND, 5)
    kb, vb, q = randn(1024, 1, DIM), randn(1024, 1, DIM), randn(5, 4, DIM)
    o, lse = cascade_attention(q, kb, vb, plan.levels[1], SCALE)
    o_ref, lse_ref = cascade_attention_ref(q, kb, vb, plan.levels[1], SCALE)
    assert torch.isinf(lse[:2]).all() and (o[:2] == 0).all()  # the empty group: no keys, weight 0
    assert_close("states o", o, o_ref, 2e-5, 2e-5)
    assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref)) and torch.isinf(lse).sum() == 2 * 4
    assert_close("states lse", lse[2:], lse_ref[2:], 2e-5, 2e-5)
    k = kb[200:217, 0].float()  # entry 2 is row 1 against slots 200..216
    assert_close("lse by hand", lse[2], torch.logsumexp(SCALE * q[1].float() @ k.T, dim=-1), 2e-5, 2e-5)
    parts = [cascade_attention_ref(q, kb, vb, lvl, SCALE) for lvl in plan.levels]
    o_all, lse_all = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    for dtype in (torch.float32, torch.float16):
        args = (o_all, lse_all, plan.merge_indptr, plan.merge_indices, plan.max_entries, dtype)
        assert_close(f"merge {dtype}", merge_states(*args), merge_states_ref(*args), 2e-5, 2e-3)


def test_merge_of_a_row_without_keys_is_zero() -> None:
    o, lse = randn(3, 2, 8), torch.tensor([[0.5, 1.0], [float("-inf")] * 2, [float("-inf")] * 2])
    ptr, ids = _i32([0, 1, 3]), _i32([0, 1, 2])
    for fn in (merge_states, merge_states_ref):
        out = fn(o, lse, ptr, ids, 2, torch.float32)
        assert_close("row 0 alone", out[0], o[0], 1e-6, 1e-6)
        assert (out[1] == 0).all()


@pytest.mark.parametrize("dim", [256, 250])
def test_merge_of_rows_longer_than_one_block(dim: int) -> None:
    """head_dim 256: 8 entries a block (merge_launch_config), so rows of 9 and 21 entries loop; the
    21-entry row's first block has no keys (-inf), then its running sums start from the second block."""
    assert merge_launch_config(21, dim)["BLOCK_E"] == 8
    counts = [0, 3, 8, 9, 21]
    o, lse = randn(sum(counts), 3, dim), 4 * randn(sum(counts), 3)
    lse[20:28] = float("-inf")
    lse[33, 1] = float("-inf")
    others = torch.cat([torch.arange(20), torch.arange(28, sum(counts))])[torch.randperm(sum(counts) - 8)]
    ids = torch.cat([others[:20], torch.arange(20, 28), others[20:]]).int()  # row 4 starts with 20..27
    ptr = _i32([0] + torch.tensor(counts).cumsum(0).tolist())
    args = (o, lse, ptr, ids, 21, torch.float32)
    out, ref = merge_states(*args), merge_states_ref(*args)
    assert (out[0] == 0).all()
    assert_close(f"merge, head_dim {dim}", out, ref, 2e-5, 2e-5)


def test_checked_launcher_rejects_bad_plans() -> None:
    plan, _ = _plan(HAND, 5)
    kb, vb, q = randn(1024, KV_HEADS, DIM), randn(1024, KV_HEADS, DIM), randn(5, KV_HEADS, DIM)
    lvl = plan.levels[0]
    bad = {
        "slot outside the pool": plan._replace(levels=(lvl._replace(kv_indices=lvl.kv_indices + 2000),)),
        "row outside q": plan._replace(levels=(lvl._replace(qo_indices=lvl.qo_indices + 4),)),
        "max_rows too small": plan._replace(levels=(lvl._replace(max_rows=3),)),
        "max_kv too small": plan._replace(levels=(lvl._replace(max_kv=40),)),
        "indptr not from 0": plan._replace(levels=(lvl._replace(qo_indptr=_i32([1, 4])),)),
        "merge entry outside": plan._replace(merge_indices=plan.merge_indices + 20),
        "max_entries too small": plan._replace(max_entries=1),
        "not a plan": tuple(plan),
        "padding of another level": plan._replace(levels=(lvl._replace(padded=with_padding(plan).levels[2].padded),)),
        "padding of another merge": with_padding(plan)._replace(merge_indices=plan.merge_indices.flip(0)),
    }
    for name, p in bad.items():
        with pytest.raises(KernelInputError):
            cascade_decode(q, kb, vb, p, SCALE)
        assert name
    with pytest.raises(KernelInputError):
        cascade_decode(q[:4], kb, vb, plan, SCALE)
    with pytest.raises(KernelInputError):
        cascade_decode(q.half(), kb, vb, plan, SCALE)


class _SyncCounter(TorchDispatchMode):
    """Counts ops that make the host wait for the device (a value read back, or a data-dependent shape)."""
    SYNCING = ("_local_scalar_dense", "nonzero", "unique", "masked_select", "item", "equal", "is_nonzero")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if any(s in func.__name__ for s in self.SYNCING):
            self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.cpu
def test_per_layer_path_has_no_host_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET")  # the CPU path: the torch reference, as the Engine runs it
    q, kb, vb, plan, want = _cache_plan(16, 2, torch.float32)
    with _SyncCounter() as counter:
        out = cascade_decode_launch(q, kb, vb, plan, SCALE)
    assert counter.seen == [], counter.seen
    with _SyncCounter() as counter:  # the counter does see a value read back
        int(plan.merge_indptr[-1])
    assert counter.seen == ["_local_scalar_dense.default"], counter.seen
    assert_close("unchecked", out, want, 2e-5, 2e-5)
