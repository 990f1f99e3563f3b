"""Attention variants (sliding window, chunks, soft-capping, sinks) in decode, extend and cascade:
the references against a dense computation written from transformers' own definitions (its mask
overlays, gpt-oss's eager sinks, Gemma 2's tanh soft-capping), the Triton kernels (interpreter)
against the references on odd sizes in fp32 and fp16, cascade against flat decode, and the checks.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.masking_utils import chunked_overlay, sliding_window_overlay  # noqa: E402

from kernel_checks import assert_close, here, paged_table, randn  # noqa: E402
from test_cascade_plan import decoding  # noqa: E402
from radixkv import CacheConfig, RadixCache  # noqa: E402
from radixkv.kernels import (AttentionVariant, KernelInputError, cascade_decode, cascade_decode_ref,  # noqa: E402
                             decode_attention, decode_attention_ref, decode_attention_unchecked,
                             extend_attention, extend_attention_ref, merge_states, merge_states_ref)

NUM_SLOTS, MAX_REQ, MAX_CTX = 1024, 6, 320
KV_HEADS, DIM, SCALE = 2, 24, 0.3
PREFIX_EXTEND = [(0, 5), (7, 97), (150, 7), (33, 33), (61, 1)]
# fp32: summation order only; fp16: the kernel rounds p to fp16 before p @ V (one output ulp ~1e-3)
TOLS = [(torch.float32, 2e-5, 2e-5), (torch.float16, 2e-3, 2e-3)]


def _variants(heads: int) -> list[AttentionVariant]:
    sinks = randn(heads)
    return [AttentionVariant(window=1), AttentionVariant(window=13), AttentionVariant(window=40),
            AttentionVariant(chunk=16), AttentionVariant(chunk=37), AttentionVariant(softcap=0.7),
            AttentionVariant(sinks=sinks), AttentionVariant(window=19, softcap=1.5, sinks=sinks),
            AttentionVariant(chunk=8, sinks=sinks)]


def _here(v: AttentionVariant) -> AttentionVariant:
    """The variant with its sinks on the test's device (the cases are built at collection, on the CPU)."""
    return v if v.sinks is None else v._replace(sinks=here(v.sinks))


def _ids(v: AttentionVariant) -> str:
    return f"w{v.window}-c{v.chunk}-cap{v.softcap}-{'sinks' if v.sinks is not None else 'nosinks'}"


def _store(page_size: int, lens: list[int], dtype: torch.dtype):
    """A pool with random K/V and a table giving each request `lens[i]` slots from shuffled pages."""
    table, rows = paged_table(lens, page_size, NUM_SLOTS, MAX_REQ, MAX_CTX)
    return randn(NUM_SLOTS, KV_HEADS, DIM, dtype=dtype), randn(NUM_SLOTS, KV_HEADS, DIM, dtype=dtype), table, rows


def _dense(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, q_pos: torch.Tensor,
           variant: AttentionVariant) -> torch.Tensor:
    """One request, written as transformers' eager attention: scores, Gemma 2's softcap, the causal
    mask with its sliding / chunked overlay, gpt-oss's sink column. q [n, H, D], keys/vals [k, Hkv, D]."""
    group = q.shape[1] // keys.shape[1]
    k = keys.float().repeat_interleave(group, 1).transpose(0, 1)  # [H, k, D]
    v = vals.float().repeat_interleave(group, 1).transpose(0, 1)
    s = q.float().transpose(0, 1) @ k.transpose(1, 2) * SCALE  # [H, n, k]
    if variant.softcap:
        s = torch.tanh(s / variant.softcap) * variant.softcap
    kv_pos = torch.arange(keys.shape[0])
    keep = kv_pos[None, :] <= q_pos[:, None]
    if variant.window:
        keep &= sliding_window_overlay(variant.window)(0, 0, q_pos[:, None], kv_pos[None, :])
    if variant.chunk:
        keep &= chunked_overlay(variant.chunk, torch.zeros(1, dtype=torch.long))(0, 0, q_pos[:, None], kv_pos[None, :])
    s = s.masked_fill(~keep, float("-inf"))
    if variant.sinks is not None:
        s = torch.cat([s, variant.sinks.float().view(-1, 1, 1).expand(-1, s.shape[1], 1)], dim=-1)
        s = s - s.amax(-1, keepdim=True)
    p = torch.softmax(s, dim=-1)[..., :keys.shape[0]]
    return (p @ v).transpose(0, 1)  # [n, H, D]


@pytest.mark.parametrize("variant", _variants(KV_HEADS * 3), ids=_ids)
def test_references_match_transformers_definitions(variant: AttentionVariant) -> None:
    variant = _here(variant)
    lens = [1, 9, 130, 61]
    k_buf, v_buf, table, rows = _store(1, lens, torch.float32)
    q = randn(len(lens), KV_HEADS * 3, DIM)
    got = decode_attention_ref(q, k_buf, v_buf, table, rows, torch.tensor(lens, dtype=torch.int32), SCALE, variant)
    for b, n in enumerate(lens):
        slots = table[rows[b], :n].long()
        want = _dense(q[b:b + 1], k_buf[slots], v_buf[slots], torch.tensor([n - 1]), variant)
        assert_close(f"decode ref request {b}", got[b:b + 1], want, 2e-5, 2e-5)
    (q, k, v, k_buf, v_buf, table, rows, pre, ext) = _extend_inputs(3, torch.float32, 1)
    got = extend_attention_ref(q, k, v, k_buf, v_buf, table, rows, pre, ext, SCALE, variant)
    start = 0
    for b, (p, e) in enumerate(PREFIX_EXTEND):
        slots = table[rows[b], :p].long()
        keys, vals = torch.cat([k_buf[slots], k[start:start + e]]), torch.cat([v_buf[slots], v[start:start + e]])
        want = _dense(q[start:start + e], keys, vals, torch.arange(p, p + e), variant)
        assert_close(f"extend ref request {b}", got[start:start + e], want, 2e-5, 2e-5)
        start += e


def _extend_inputs(group: int, dtype: torch.dtype, page_size: int):
    k_buf, v_buf, table, rows = _store(page_size, [p for p, _ in PREFIX_EXTEND], dtype)
    tokens, heads = sum(e for _, e in PREFIX_EXTEND), KV_HEADS * group
    q, k, v = randn(tokens, heads, DIM, dtype=dtype), randn(tokens, KV_HEADS, DIM, dtype=dtype), randn(
        tokens, KV_HEADS, DIM, dtype=dtype)
    pre, ext = (torch.tensor(x, dtype=torch.int32) for x in zip(*PREFIX_EXTEND))
    return q, k, v, k_buf, v_buf, table, rows, pre, ext


@pytest.mark.parametrize("variant", _variants(KV_HEADS * 2), ids=_ids)
@pytest.mark.parametrize("dtype,atol,rtol", TOLS)
@pytest.mark.parametrize("page_size", [1, 16])
def test_triton_matches_reference(variant: AttentionVariant, dtype: torch.dtype, atol: float, rtol: float,
                                  page_size: int) -> None:
    variant = _here(variant)
    lens = [1, 17, 300, 64, 33]
    k_buf, v_buf, table, rows = _store(page_size, lens, dtype)
    q = randn(len(lens), KV_HEADS * 2, DIM, dtype=dtype)
    seq = torch.tensor(lens, dtype=torch.int32)
    got = decode_attention(q, k_buf, v_buf, table, rows, seq, SCALE, variant)
    assert_close("decode", got, decode_attention_ref(q, k_buf, v_buf, table, rows, seq, SCALE, variant), atol, rtol)
    unchecked = decode_attention_unchecked(q, k_buf, v_buf, table, rows, seq, SCALE, MAX_CTX, variant)
    assert torch.equal(unchecked, got)
    args = _extend_inputs(2, dtype, page_size)
    got = extend_attention(*args, SCALE, variant)
    assert_close("extend", got, extend_attention_ref(*args, SCALE, variant), atol, rtol)


def test_a_window_changes_the_result() -> None:
    """The variants reach the kernels: a window, a cap, a sink each move the output."""
    lens = [200]
    k_buf, v_buf, table, rows = _store(1, lens, torch.float32)
    q, seq = randn(1, KV_HEADS, DIM), torch.tensor(lens, dtype=torch.int32)
    plain = decode_attention(q, k_buf, v_buf, table, rows, seq, SCALE)
    for variant in (AttentionVariant(window=50), AttentionVariant(chunk=64), AttentionVariant(softcap=0.5),
                    AttentionVariant(sinks=torch.full((KV_HEADS,), 2.0))):
        assert (decode_attention(q, k_buf, v_buf, table, rows, seq, SCALE, variant) - plain).abs().max() > 1e-3


def _cascade_step(dtype: torch.dtype):
    """A decode step of 6 rows from a real cache: 4 share a system prompt, 2 of them a document."""
    g = torch.Generator().manual_seed(5)
    tok = lambda n: torch.randint(0, 500, (n,), generator=g, device="cpu").tolist()  # noqa: E731
    system, doc = tok(37), tok(29)
    prompts = [system + doc + tok(3), system + doc + tok(8), system + tok(11), system + tok(2), tok(19), tok(5)]
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=KV_HEADS, head_dim=DIM, num_slots=1024,
                                   page_size=16, max_requests=8, max_context_len=128, dtype=dtype,
                                   device=torch.get_default_device()))
    cache.kv_pool.k_buffer[0].copy_(randn(1024, KV_HEADS, DIM, dtype=dtype))
    cache.kv_pool.v_buffer[0].copy_(randn(1024, KV_HEADS, DIM, dtype=dtype))
    b = cache.batch(decoding(cache, prompts), cascade=True)
    assert len(b.cascade.levels) >= 2
    return cache, b, randn(len(prompts), KV_HEADS * 2, DIM, dtype=dtype)


@pytest.mark.parametrize("dtype,atol,rtol", TOLS)
@pytest.mark.parametrize("interpret", [True, False], ids=["triton", "reference"])
def test_cascade_with_softcap_and_sinks_equals_flat_decode(dtype: torch.dtype, atol: float, rtol: float,
                                                           interpret: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not interpret:
        monkeypatch.delenv("TRITON_INTERPRET")
    cache, b, q = _cascade_step(dtype)
    variant = AttentionVariant(softcap=0.8, sinks=randn(q.shape[1]))
    kb, vb = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]
    want = decode_attention_ref(q, kb, vb, cache.req_pool.req_to_token, b.rows, b.seq_lens, 0.3, variant)
    assert_close("cascade", cascade_decode(q, kb, vb, b.cascade, 0.3, variant), want, atol, rtol)
    assert_close("cascade ref", cascade_decode_ref(q, kb, vb, b.cascade, 0.3, variant), want, atol, rtol)


def test_merge_with_sinks_matches_reference() -> None:
    o, lse = randn(7, 3, DIM), randn(7, 3)
    lse[2] = float("-inf")  # a part with no keys
    ptr, idx = torch.tensor([0, 3, 3, 7], dtype=torch.int32), torch.tensor([0, 1, 2, 3, 4, 5, 6], dtype=torch.int32)
    sinks = randn(3)
    got = merge_states(o, lse, ptr, idx, 4, torch.float32, sinks)
    want = merge_states_ref(o, lse, ptr, idx, 4, torch.float32, sinks)
    assert_close("merge with sinks", got, want, 2e-6, 2e-6)
    # row 0 by hand: the sink's weight joins the denominator
    w = torch.cat([lse[:3], sinks[None]]).softmax(0)  # [4, heads]
    assert_close("row 0", got[0], (w[:3, :, None] * o[:3]).sum(0), 2e-6, 2e-6)
    assert torch.equal(got[1], torch.zeros_like(got[1]))  # a row with only its sink: no value


@pytest.mark.parametrize("variant,match", [
    (AttentionVariant(window=-1), "window"), (AttentionVariant(window=True), "window"),
    (AttentionVariant(chunk=2.5), "chunk"), (AttentionVariant(softcap=float("nan")), "softcap"),
    (AttentionVariant(softcap=-1.0), "softcap"), (AttentionVariant(sinks=torch.zeros(3)), "sinks"),
    (AttentionVariant(sinks=torch.zeros(4, dtype=torch.float16)), "sinks"), ((16, 0), "AttentionVariant"),
])
def test_bad_variants_are_rejected_before_launch(variant: object, match: str) -> None:
    k_buf, v_buf, table, rows = _store(1, [5], torch.float32)
    q, seq = randn(1, 4, DIM), torch.tensor([5], dtype=torch.int32)
    with pytest.raises(KernelInputError, match=match):
        decode_attention(q, k_buf, v_buf, table, rows, seq, SCALE, variant)
