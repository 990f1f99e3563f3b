"""Every Python block of README.md runs as written, each in a fresh namespace, as a reader would paste
it. A `print(...)  # 32: ...` line must print what its comment says. A block may be skipped only with
a reason, in an HTML comment on the line before its fence: `<!-- not run: needs a Redis server -->`."""

from __future__ import annotations

import re

import pytest
import torch
from scripts import ROOT

BLOCK = re.compile(r"(?:^<!-- not run: (?P<reason>[^>]+?) -->\n)?^```python\n(?P<code>.*?)^```", re.S | re.M)
BLOCKS = [(m.group("code"), m.group("reason"), (ROOT / "README.md").read_text()[:m.start()].count("\n") + 1)
          for m in BLOCK.finditer((ROOT / "README.md").read_text())]


def test_most_blocks_run() -> None:
    skipped = [line for _, reason, line in BLOCKS if reason]
    assert len(BLOCKS) - len(skipped) >= 2 and len(skipped) <= 3, (len(BLOCKS), skipped)


@pytest.mark.parametrize("code, reason, line", BLOCKS, ids=[f"README.md:{line}" for *_, line in BLOCKS])
def test_block_runs_as_written(code: str, reason: str | None, line: int, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    if reason:
        pytest.skip(f"README.md:{line} is marked not run: {reason}")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # as on a user's CPU: the torch references
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out.splitlines()
    prints = re.findall(r"^print\(.*?\)(?:\s+# ([^:\s]+))?", code, re.M)
    assert printed and len(printed) == len(prints), (printed, prints)
    for got, want in zip(printed, prints):
        assert not want or got == want, f"README.md:{line}: a print shows {got!r}, its comment says {want!r}"
