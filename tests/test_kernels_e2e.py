"""End to end through the tree: KV written through RadixCache's slots and read back by the Triton
kernels (interpreter) equals torch SDPA over the same tokens' K/V laid out contiguously.

Request A writes its prompt's K/V and closes; B and A' reopen sharing A's prefix (the tree's
slots, not copies), add their own tokens, and decode (or extend) through their rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixkv import CacheConfig, RadixCache
from radixkv.kernels import decode_attention, extend_attention, store_kv
from kernel_checks import randn

pytestmark = pytest.mark.cpu  # the cache it drives lives on the CPU (device="cpu")

KV_HEADS, GROUP, DIM = 2, 2, 16
HEADS = KV_HEADS * GROUP
SCALE = DIM**-0.5


class World:
    """A cache plus the ground truth: the K/V of every (prompt, position) kept contiguous."""

    def __init__(self, page_size: int) -> None:
        self.cache = RadixCache(CacheConfig(
            num_layers=1, num_kv_heads=KV_HEADS, head_dim=DIM, num_slots=1024, page_size=page_size,
            max_requests=8, max_context_len=256, dtype=torch.float32, device="cpu"))
        self.k_buf, self.v_buf = self.cache.kv_pool.k_buffer[0], self.cache.kv_pool.v_buffer[0]

    def fill(self, seq, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Reserve slots for the rest of seq's tokens and store their K/V (rows kv_len onward)."""
        n = len(seq.tokens) - seq.kv_len
        slots = self.cache.reserve(seq, n)
        store_kv(self.k_buf, self.v_buf, slots, k[seq.kv_len - n:], v[seq.kv_len - n:])
        return slots

    def cache_prompt(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """A request with n random tokens and K/V: prefill, commit, close. Returns (prompt, k, v,
        the slots its KV went to)."""
        prompt, k, v = torch.randint(0, 50_000, (n,)), randn(n, KV_HEADS, DIM), randn(n, KV_HEADS, DIM)
        seq = self.cache.open(prompt)
        self.fill(seq, k, v)
        self.cache.commit(seq, prompt[seq.committed_len:])
        slots = torch.from_numpy(seq.slots().copy())
        self.cache.close(seq)
        return prompt, k, v, slots


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_offset: int | None) -> torch.Tensor:
    """q `[t, heads, dim]` over contiguous k, v `[n, kv_heads, dim]`; query i sees keys
    0 .. causal_offset + i (all keys when None)."""
    k = k.repeat_interleave(GROUP, dim=1).transpose(0, 1)
    v = v.repeat_interleave(GROUP, dim=1).transpose(0, 1)
    mask = None
    if causal_offset is not None:
        mask = torch.arange(k.shape[1])[None, :] <= causal_offset + torch.arange(q.shape[0])[:, None]
    return F.scaled_dot_product_attention(q.transpose(0, 1), k, v, attn_mask=mask,
                                          scale=SCALE).transpose(0, 1)


@pytest.mark.parametrize("page_size", [1, 16])
def test_decode_through_shared_prefix_equals_sdpa(page_size: int) -> None:
    w = World(page_size)
    prompt_a, k_a, v_a, slots_a = w.cache_prompt(100)

    # B shares A's first 80 tokens (whole pages for both page sizes) and adds 17 of its own
    prompt_b = torch.cat([prompt_a[:80], torch.randint(0, 50_000, (17,))])
    k_b = torch.cat([k_a[:80], randn(17, KV_HEADS, DIM)])
    v_b = torch.cat([v_a[:80], randn(17, KV_HEADS, DIM)])
    seq_b = w.cache.open(prompt_b)
    assert seq_b.cached_len == 80, f"B reused {seq_b.cached_len} tokens, expected 80"
    assert torch.equal(torch.from_numpy(seq_b.slots(0, 80).copy()), slots_a[:80]), \
        "B's prefix must read A's slots (KV exists once)"
    w.fill(seq_b, k_b, v_b)
    w.cache.commit(seq_b, prompt_b[seq_b.committed_len:])

    seq_a2 = w.cache.open(prompt_a)  # A again: its whole pages are cached; the rest is re-stored
    w.fill(seq_a2, k_a, v_a)
    w.cache.commit(seq_a2, prompt_a[seq_a2.committed_len:])

    b = w.cache.batch([seq_b, seq_a2])
    assert b.seq_lens.tolist() == [97, 100]
    q = randn(2, HEADS, DIM)
    got = decode_attention(q, w.k_buf, w.v_buf, w.cache.req_pool.req_to_token, b.rows, b.seq_lens, SCALE)
    for i, (k, v) in enumerate([(k_b, v_b), (k_a, v_a)]):
        want = _sdpa(q[i:i + 1], k, v, causal_offset=None)[0]
        torch.testing.assert_close(got[i], want, atol=2e-5, rtol=2e-5,
                                   msg=lambda m, i=i: f"decode of request {i} vs SDPA: {m}")
    w.cache.close(seq_b)
    w.cache.close(seq_a2)
    w.cache.check_invariants()


@pytest.mark.parametrize("page_size", [1, 16])
def test_extend_through_shared_prefix_equals_sdpa(page_size: int) -> None:
    """Prefill of C's new tokens over A's cached prefix, before commit (batch() gives
    prefix_lens = committed_len, extend_lens = the reserved positions, out_slots where K/V go)."""
    w = World(page_size)
    prompt_a, k_a, v_a, _ = w.cache_prompt(64)

    prompt_c = torch.cat([prompt_a[:48], torch.randint(0, 50_000, (23,))])
    seq_c = w.cache.open(prompt_c)
    assert seq_c.cached_len == 48
    k_new, v_new = randn(23, KV_HEADS, DIM), randn(23, KV_HEADS, DIM)
    w.cache.reserve(seq_c, 23)
    b = w.cache.batch([seq_c])
    assert (b.prefix_lens.tolist(), b.extend_lens.tolist()) == ([48], [23])
    store_kv(w.k_buf, w.v_buf, b.out_slots, k_new, v_new)
    q = randn(23, HEADS, DIM)
    got = extend_attention(q, k_new, v_new, w.k_buf, w.v_buf, w.cache.req_pool.req_to_token, b.rows,
                           b.prefix_lens, b.extend_lens, SCALE)
    want = _sdpa(q, torch.cat([k_a[:48], k_new]), torch.cat([v_a[:48], v_new]), causal_offset=48)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5,
                               msg=lambda m: f"extend through the tree vs SDPA: {m}")
    w.cache.commit(seq_c, prompt_c[seq_c.committed_len:])
    w.cache.close(seq_c)
    w.cache.check_invariants()
