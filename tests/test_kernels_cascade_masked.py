"""Masked cascade decode: a sliding window or chunks over a plan with positions (`q_pos`, `kv_pos`).

A decode step from a real cache (system prompt 37, document 29, tails; page 1 and 16): the Triton
kernel (interpreter) and the torch reference, on the planner's plan and on `for_layer`'s cut plan,
against flat `decode_attention_ref` with the same variant. Windows smaller than the system prompt
(which then lies wholly behind every query's window), straddling it, and larger than every row;
chunk boundaries inside the prefix; soft-capping and sinks; fp32 and fp16, GQA 1 and 3, head_dim 24.
Keys no query sees are not read (NaN there changes nothing), and a window group's pool is read
through its own slot map.
"""

from __future__ import annotations

import pytest
import torch

from kernel_checks import assert_close, randn, random_kv_cache
from test_cascade_plan import decoding
from radixkv import RadixCache
from radixkv.cascade import for_layer, visible
from radixkv.kernels.variant import first_key_ref
from radixkv.kernels import (AttentionVariant, CascadePlan, KernelInputError, cascade_decode, cascade_decode_launch,
                             cascade_decode_ref, decode_attention_ref)

KV_HEADS, DIM, SCALE, SYSTEM, DOC = 2, 24, 0.3, 37, 29
TOLS = {torch.float32: (2e-5, 2e-5), torch.float16: (2e-3, 2e-3)}  # as tests/test_kernels_cascade.py


def _step(page_size: int, dtype: torch.dtype, group: int, seed: int = 0):
    """7 decode rows (q at positions 5..80): 5 under the system prompt, 3 of them under the document."""
    g = torch.Generator().manual_seed(seed)
    tok = lambda n: torch.randint(0, 500, (n,), generator=g, device="cpu").tolist()  # noqa: E731
    system, doc = tok(SYSTEM), tok(DOC)
    prompts = ([system + doc + tok(3 + 5 * i) for i in range(3)] + [system + tok(11), system + tok(6)]
               + [tok(19), tok(5)])
    cache = random_kv_cache(KV_HEADS, DIM, 1024, page_size, 16, dtype)
    seqs = decoding(cache, prompts)
    b = cache.batch(seqs, cascade=True)
    assert b.cascade is not None and b.cascade.has_positions
    assert b.cascade.q_pos.tolist() == [s.kv_len - 1 for s in seqs]
    q = randn(len(seqs), KV_HEADS * group, DIM, dtype=dtype)
    return cache, b, q


def _flat(cache: RadixCache, b, q: torch.Tensor, variant: AttentionVariant) -> torch.Tensor:
    kb, vb = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]
    return decode_attention_ref(q, kb, vb, cache.req_pool.req_to_token, b.rows, b.seq_lens, SCALE, variant)


def _sinks(heads: int) -> torch.Tensor:
    return randn(heads)


# (window, chunk, softcap, sinks): what each case tests
CASES = {
    "window inside the tails": (4, 0, 0.0, False),  # the system prompt lies behind every window: not read
    "window straddles the prefix": (40, 0, 0.0, True),  # rows see the document and part of the system prompt
    "window larger than every row": (200, 0, 1.5, False),  # the same keys as causal
    "chunks inside the prefix": (0, 16, 1.5, True),  # boundaries at 16, 32, 48, 64 cut the shared runs
    "window and chunks": (20, 32, 0.0, False),
}


# every case in fp32 (GQA 3, page 1); two in fp16 (GQA 1, page 16): the interpreter takes ~1 s a call
PARAMS = ([(case, 1, torch.float32, 3) for case in CASES]
          + [(case, 16, torch.float16, 1) for case in ("window straddles the prefix", "chunks inside the prefix")])


@pytest.mark.parametrize("case,page_size,dtype,group", PARAMS)
def test_triton_and_reference_match_flat_decode(case: str, page_size: int, dtype: torch.dtype, group: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    window, chunk, softcap, sinks = CASES[case]
    cache, b, q = _step(page_size, dtype, group)
    variant = AttentionVariant(window, chunk, softcap, _sinks(q.shape[1]) if sinks else None)
    kb, vb = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]
    want = _flat(cache, b, q, variant)
    atol, rtol = TOLS[dtype]
    assert_close(f"{case}: triton", cascade_decode(q, kb, vb, b.cascade, SCALE, variant), want, atol, rtol)
    cut = for_layer(b.cascade, variant)
    if dtype == torch.float32:
        assert_close(f"{case}: triton, cut plan", cascade_decode(q, kb, vb, cut, SCALE, variant), want, atol, rtol)
    monkeypatch.delenv("TRITON_INTERPRET")  # the torch reference, as the Engine runs it on CPU
    assert_close(f"{case}: ref", cascade_decode(q, kb, vb, b.cascade, SCALE, variant), want, atol, rtol)
    assert_close(f"{case}: ref, cut plan", cascade_decode_launch(q, kb, vb, cut, SCALE, variant), want, atol, rtol)


def _slots(plan: CascadePlan) -> int:
    return sum(lvl.kv_indices.numel() for lvl in plan.levels)


def test_cut_plan_keeps_only_what_some_row_sees() -> None:
    """Window 4: each row sees its last 4 positions, all in its own tail (rows whose tail is shorter
    reach into a shared run): the system prompt's level is gone, the slots are at most 4 per row."""
    _, b, _ = _step(16, torch.float32, 1)
    cut = visible(b.cascade, AttentionVariant(window=4))
    assert len(cut.levels) < len(b.cascade.levels) and _slots(cut) <= 4 * 7 < _slots(b.cascade)
    assert torch.equal(cut.q_pos, b.cascade.q_pos)
    same = visible(b.cascade, AttentionVariant(window=500))  # sees everything: the same runs
    assert _slots(same) == _slots(b.cascade)


@pytest.mark.parametrize("window,chunk", [(4, 0), (0, 16)])
def test_keys_no_query_sees_are_not_read(window: int, chunk: int) -> None:
    """NaN in the shared prefix's slots below every first key of the rows that share it: the
    kernel's output is unchanged (it never loads them), on the planner's plan as it stands."""
    cache, b, q = _step(1, torch.float32, 2)
    variant = AttentionVariant(window, chunk)
    kb, vb = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]
    want = cascade_decode(q, kb, vb, b.cascade, SCALE, variant)
    unseen = int(first_key_ref(variant, b.cascade.q_pos[:5].long()).min())  # rows 0-4 share the system prompt
    assert unseen > 0
    slots = cache.req_pool.req_to_token[int(b.rows[0]), :unseen].long()  # page 1: only rows 0-4 hold these
    kb[slots], vb[slots] = float("nan"), float("nan")
    got = cascade_decode(q, kb, vb, b.cascade, SCALE, variant)
    assert torch.equal(got, want)


def test_window_pool_slots_through_the_slot_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer whose K/V live in another pool reads `slot_map[slot]`: the same attention as flat decode
    over that pool through the translated table."""
    cache, b, q = _step(1, torch.float32, 2)
    slot_map = torch.randperm(2048)[:1024]  # full slot -> slot of a pool of 2048
    kw, vw = randn(2048, KV_HEADS, DIM), randn(2048, KV_HEADS, DIM)
    variant = AttentionVariant(window=40)
    table = slot_map[cache.req_pool.req_to_token.long()].int()
    want = decode_attention_ref(q, kw, vw, table, b.rows, b.seq_lens, SCALE, variant)
    plan = for_layer(b.cascade, variant, slot_map)
    assert_close("window pool, triton", cascade_decode(q, kw, vw, plan, SCALE, variant), want, 2e-5, 2e-5)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert_close("window pool, ref", cascade_decode(q, kw, vw, plan, SCALE, variant), want, 2e-5, 2e-5)


def test_masked_variant_needs_positions() -> None:
    cache, b, q = _step(1, torch.float32, 1)
    kb, vb = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]
    bare = b.cascade._replace(q_pos=None)
    with pytest.raises(KernelInputError, match="positions"):
        cascade_decode(q, kb, vb, bare, SCALE, AttentionVariant(window=4))
    with pytest.raises(KernelInputError, match="positions"):
        visible(bare, AttentionVariant(window=4))
    bad = b.cascade._replace(q_pos=b.cascade.q_pos[:-1])
    with pytest.raises(KernelInputError, match="q_pos"):
        cascade_decode(q, kb, vb, bad, SCALE, AttentionVariant(window=4))
    lvl = b.cascade.levels[0]
    bad = b.cascade._replace(levels=(lvl._replace(kv_pos=lvl.kv_pos.long()),) + b.cascade.levels[1:])
    with pytest.raises(KernelInputError, match="kv_pos"):
        cascade_decode(q, kb, vb, bad, SCALE, AttentionVariant(window=4))
    # without a window the positions are not needed: the bare plan is plain cascade decode
    want = cascade_decode_ref(q, kb, vb, b.cascade, SCALE)
    assert_close("causal, no positions", cascade_decode(q, kb, vb, bare, SCALE), want, 2e-5, 2e-5)
