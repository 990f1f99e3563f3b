"""Test setup. TRITON_INTERPRET must be set before any @triton.jit is defined.

Without a CUDA GPU the Triton kernels run only under the interpreter: TRITON_INTERPRET=1, and
radixkv.kernels dispatches CPU tensors to them. With a GPU the interpreter stays off
(TRITON_INTERPRET=0, which Triton reads as off, so tests may still unset it) and the kernel tests
(tests/test_kernels_*.py) create their tensors on the GPU, so their kernels run compiled. A kernel
test about the CPU path itself is marked `cpu` and keeps CPU tensors everywhere.
"""

from __future__ import annotations

import os

import torch

GPU = torch.cuda.is_available()  # torch's CUDA probe imports no Triton kernel
os.environ.setdefault("TRITON_INTERPRET", "0" if GPU else "1")

import random  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile("ci")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu: a kernel test of the CPU path: CPU tensors even where a GPU is")


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)


@pytest.fixture(autouse=True)
def _kernel_tensors_on_gpu(request: pytest.FixtureRequest) -> Iterator[None]:
    """On a GPU, tensors a kernel test creates default to it (compiled kernels); elsewhere nothing."""
    on_gpu = (GPU and request.module.__name__.rpartition(".")[2].startswith("test_kernels_")
              and request.node.get_closest_marker("cpu") is None)
    if on_gpu:
        torch.set_default_device("cuda")
    yield
    if on_gpu:
        torch.set_default_device(None)


@pytest.fixture
def auto_own_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """`auto`'s own order from the first arrival, as on a cache of one H100's KV: its lpm start on a smaller cache
    (radixkv/scheduling/auto.py, LPM_UNTIL; tests/test_scheduling_lpm_start.py) off, for tests of the rules after it."""
    from radixkv.scheduling.auto import Auto
    monkeypatch.setattr(Auto, "LPM_UNTIL", 0)
