"""tests/conftest.py: the Triton interpreter only where there is no CUDA GPU; with one, the kernel
tests' tensors live on it so their kernels run compiled (a run there fails these before the fix)."""

from __future__ import annotations

import os

import pytest
import torch

from radixkv.kernels import use_triton


def test_interpreter_only_without_a_gpu() -> None:
    gpu = torch.cuda.is_available()
    assert os.environ["TRITON_INTERPRET"] == ("0" if gpu else "1")
    x = torch.zeros(4)  # as a kernel test makes its inputs
    assert x.device.type == ("cuda" if gpu else "cpu")
    assert use_triton(x)  # compiled on the GPU, interpreted without one: Triton either way


@pytest.mark.cpu
def test_a_cpu_marked_kernel_test_keeps_cpu_tensors() -> None:
    assert torch.zeros(1).device.type == "cpu"
