"""Comparisons shared by the kernel tests; failure messages name the first or worst mismatch."""

from __future__ import annotations

import torch


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
