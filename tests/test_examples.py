"""The examples run in CI: `examples/own_loop.py` asserts its cached decode equals a no-cache
recompute, so running its `main()` is the test."""

from __future__ import annotations

import pytest
import torch
from scripts import ROOT, load_script

EXAMPLES = ROOT / "examples"


def test_own_loop_matches_no_cache(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # torch references: the interpreter is slow
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a toy model: extra threads only contend on a busy CI box
    try:
        load_script(EXAMPLES / "own_loop.py").main()
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "turn 1: 3 requests x 8 tokens == no-cache; reused [24, 24, 24]" in out, out


def test_own_loop_stays_short() -> None:
    """The issue's budget: the loop a user copies fits in under 80 lines."""
    assert len((EXAMPLES / "own_loop.py").read_text().splitlines()) < 80
