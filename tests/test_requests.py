"""Request level: open / reserve / commit / close / batch, and the KV identity test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixkv import CacheConfig, RadixCache


def make(page_size: int, num_slots: int = 256, **kw: object) -> RadixCache:
    cfg = dict(num_layers=3, num_kv_heads=2, head_dim=4, num_slots=num_slots, page_size=page_size,
               max_requests=8, max_context_len=128, dtype=torch.float32)
    return RadixCache(CacheConfig(**{**cfg, **kw}))


def kv_of(tokens: list[int], positions: range, layer: int, which: int) -> torch.Tensor:
    """K (which=0) or V (which=1) derived from (token, position): `[n, heads, dim]`, never zero."""
    tok = torch.tensor([tokens[p] for p in positions], dtype=torch.float32)[:, None, None]
    pos = torch.tensor(list(positions), dtype=torch.float32)[:, None, None]
    lane = torch.arange(8, dtype=torch.float32).reshape(1, 2, 4)
    return 1 + tok * 1000 + pos + 0.125 * lane + 0.0625 * layer + 0.5 * which


def run_request(cache: RadixCache, prompt: list[int], new: list[int]) -> object:
    """Prefill the prompt (writing K/V of the uncached part), then decode `new` one token at a time."""
    seq = cache.open(prompt)
    cache.reserve(seq, len(prompt) - seq.kv_len)
    tokens = list(prompt)
    for step in range(len(new) + 1):
        b = cache.batch([seq])
        pos = range(seq.committed_len, seq.kv_len)
        for layer in range(cache.config.num_layers):
            cache.kv_pool.k_buffer[layer][b.out_slots] = kv_of(tokens, pos, layer, 0)
            cache.kv_pool.v_buffer[layer][b.out_slots] = kv_of(tokens, pos, layer, 1)
        cache.commit(seq, tokens[seq.committed_len:seq.kv_len])
        cache.check_invariants()
        if step < len(new):
            tokens.append(new[step])
            cache.reserve(seq, 1)
    return seq


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_kv_identity_through_a_later_match(page_size: int) -> None:
    cache = make(page_size)
    prompt, answer = list(range(100, 137)), [7, 8, 9, 10, 11, 12, 13]
    cache.close(run_request(cache, prompt, answer))
    full = prompt + answer
    later = cache.open(full + [5, 6])
    assert later.cached_len == len(full) // page_size * page_size > 0
    slots = torch.from_numpy(later.slots(0, later.cached_len).copy())
    for layer in range(3):
        pos = range(later.cached_len)
        assert torch.equal(cache.kv_pool.k_buffer[layer][slots], kv_of(full, pos, layer, 0))
        assert torch.equal(cache.kv_pool.v_buffer[layer][slots], kv_of(full, pos, layer, 1))
    cache.close(later)
    cache.check_invariants()


@pytest.mark.parametrize("page_size", [1, 4])
def test_batch_inputs_describe_the_forward(page_size: int) -> None:
    cache = make(page_size)
    cache.close(run_request(cache, list(range(20)), []))
    a, b = cache.open(list(range(20)) + [50, 51, 52]), cache.open([60, 61])
    cache.reserve(a, a_extra := 23 - a.kv_len)
    cache.reserve(b, 2)
    bi = cache.batch([a, b])
    assert bi.rows.tolist() == [a.row, b.row] and bi.rows.dtype == torch.int32
    assert bi.prefix_lens.tolist() == [a.committed_len, 0] and bi.extend_lens.tolist() == [a_extra, 2]
    assert bi.seq_lens.tolist() == [23, 2] and bi.kv_indptr.tolist() == [0, 23, 25]
    rtt = cache.req_pool.req_to_token
    assert torch.equal(bi.kv_indices, torch.cat([rtt[a.row, :23], rtt[b.row, :2]]).long())
    assert torch.equal(bi.out_slots, torch.cat([rtt[a.row, a.committed_len:23], rtt[b.row, :2]]).long())
    assert bi.kv_indices.dtype == bi.out_slots.dtype == torch.int64


def test_max_reuse_keeps_the_last_position_uncached() -> None:
    cache = make(1)
    cache.close(run_request(cache, [1, 2, 3, 4], []))
    assert cache.open([1, 2, 3, 4]).cached_len == 4
    seq = cache.open([1, 2, 3, 4], max_reuse=3)
    assert seq.cached_len == seq.kv_len == 3 and list(seq.tokens) == [1, 2, 3, 4]


def test_reserve_fills_the_private_page_tail_first() -> None:
    cache = make(4)
    seq = cache.open([1, 2, 3])
    first = cache.reserve(seq, 2)
    second = cache.reserve(seq, 3)
    assert second[0] == first[1] + 1 and second[1] == first[1] + 2  # same page
    assert second[2] % 4 == 0  # then a fresh page
    assert cache.reserve(seq, 0).numel() == 0
    assert cache.sizes().private == 8
    cache.close(seq)
    assert cache.sizes().private == 0 and cache.sizes().cached == 0


def test_commit_shares_full_pages_immediately_and_close_frees_the_tail() -> None:
    cache = make(4)
    seq = cache.open(list(range(10)))
    cache.reserve(seq, 10)
    cache.commit(seq, list(range(6)))
    assert cache.sizes().cached == 4 and cache.sizes().protected == 4  # locked by the Sequence
    other = cache.open(list(range(10)))
    assert other.cached_len == 4
    cache.close(other)
    cache.commit(seq, list(range(6, 10)))
    assert seq.tree_len == 8 and cache.sizes().cached == 8
    cache.close(seq)
    assert cache.sizes() == (256 - 8, 8, 8, 0, 0, 256)
    cache.check_invariants()


def test_concurrent_identical_prompts_deduplicate() -> None:
    cache = make(1)
    a, b = cache.open([5, 6, 7]), cache.open([5, 6, 7])
    sa, sb = cache.reserve(a, 3), cache.reserve(b, 3)
    cache.commit(a, [5, 6, 7])
    free = cache.sizes().free
    cache.commit(b, [5, 6, 7])
    assert cache.sizes().free == free + 3  # b's copies were freed
    assert torch.equal(cache.req_pool.req_to_token[b.row, :3].long(), sa)
    assert not set(sb.tolist()) & set(cache.batch([a, b]).kv_indices.tolist())
    cache.close(a)
    cache.close(b)
    cache.check_invariants()


@pytest.mark.parametrize("kind", ["list", "numpy", "tensor", "int32 tensor", "uint16 numpy"])
def test_token_containers(kind: str) -> None:
    cache = make(1)
    raw = [3, 1, 4, 1, 5]
    tokens = {"list": raw, "numpy": np.array(raw), "tensor": torch.tensor(raw),
              "int32 tensor": torch.tensor(raw, dtype=torch.int32), "uint16 numpy": np.array(raw, np.uint16)}[kind]
    cache.insert(tokens, cache.alloc(5))
    assert cache.match_prefix(raw).length == 5
    assert cache.match_prefix([]).length == 0 and cache.open([]).kv_len == 0
