"""Test setup. TRITON_INTERPRET must be set before any @triton.jit is defined: with no GPU the
Triton kernels run only under the interpreter, and radixkv.kernels dispatches to them when it is set."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
