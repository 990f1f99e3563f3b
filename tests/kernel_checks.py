"""Comparisons shared by the kernel tests; failure messages name the first or worst mismatch."""

from __future__ import annotations

import torch

from radixkv import CacheConfig, RadixCache


def here(t: torch.Tensor) -> torch.Tensor:
    """`t` on the current default device: parametrize cases are built at collection time, on the CPU,
    while a kernel test on a GPU machine runs with CUDA as the default device (tests/conftest.py)."""
    return t.to(torch.get_default_device())


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal values pushed 0.1 away from zero (a kernel that writes zeros cannot pass)."""
    x = torch.randn(*shape)
    return (x + torch.where(x >= 0, 0.1, -0.1)).to(dtype)


def assert_close(name: str, got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{name}: got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}")
    if got.numel() == 0:
        return
    err = (got.float() - want.float()).abs() - rtol * want.float().abs()
    worst = int(err.argmax())
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), got.shape))
    assert err.max() <= atol, (f"{name}: worst mismatch at {idx}: got {got[idx].item()}, want "
                               f"{want[idx].item()} (atol {atol}, rtol {rtol})")


def assert_equal(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{name}: got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}")
    bad = (got != want).nonzero()
    assert bad.numel() == 0, (f"{name}: {bad.shape[0]} elements differ, first at {bad[0].tolist()}: "
                              f"got {got[tuple(bad[0])].item()}, want {want[tuple(bad[0])].item()}")


def paged_table(lens: list[int], page_size: int, num_slots: int, max_req: int,
                max_ctx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """req_to_token rows for requests of `lens` tokens, slots from shuffled whole pages of a pool of
    `num_slots`; -1 (outside the pool) after each length, so a read past a request's end would fault.
    Returns (table [max_req, max_ctx] int32, rows int32)."""
    pages = torch.randperm(num_slots // page_size)
    slots = (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)
    table = torch.full((max_req, max_ctx), -1, dtype=torch.int32)
    rows = torch.randperm(max_req)[:len(lens)].to(torch.int32)
    used = 0
    for row, n in zip(rows.tolist(), lens):
        table[row, :n] = slots[used:used + n].to(torch.int32)
        used += -(-n // page_size) * page_size  # a request owns whole pages; its tail page is part-used
    return table, rows


def random_kv_cache(kv_heads: int, dim: int, num_slots: int, page_size: int, max_requests: int,
                    dtype: torch.dtype) -> RadixCache:
    """A one-layer RadixCache (max context 128) whose K/V buffers hold random non-zero values."""
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=kv_heads, head_dim=dim, num_slots=num_slots,
                                   page_size=page_size, max_requests=max_requests, max_context_len=128, dtype=dtype,
                                   device=torch.get_default_device()))
    cache.kv_pool.k_buffer[0].copy_(randn(num_slots, kv_heads, dim, dtype=dtype))
    cache.kv_pool.v_buffer[0].copy_(randn(num_slots, kv_heads, dim, dtype=dtype))
    return cache
