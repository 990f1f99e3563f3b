"""radixkv with torch alone (the CPU pip route, macOS): Triton hidden from the import system in a
fresh interpreter, `import radixkv`, the request API and the Engine still work, and every kernel
op runs its torch reference even with TRITON_INTERPRET=1 set (there is nothing to interpret)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers")

BLOCKER = """
import sys
class _HideTriton:
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ImportError(f"No module named {name!r} (hidden by the test)")
sys.meta_path.insert(0, _HideTriton())
"""

PROGRAM = """
import torch
import radixkv
from radixkv import CacheConfig, RadixCache
from radixkv.kernels._common import HAS_TRITON, use_triton
assert "triton" not in sys.modules and not HAS_TRITON and not use_triton(torch.zeros(1))

cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=1, head_dim=4, num_slots=64, page_size=4,
                               max_requests=4, max_context_len=64))
prompt = list(range(1, 13))
first = cache.open(prompt, max_reuse=11)
cache.reserve(first, 12)
cache.commit(first, prompt)
cache.close(first)
again = cache.open(prompt, max_reuse=11)
batch = cache.batch([again])
assert again.cached_len == 8 and batch.prefix_lens.tolist() == [8], (again.cached_len, batch)
cache.close(again)
cache.check_invariants()

sys.path.insert(0, "tests")
from hf_helpers import build
from radixkv.integrations.transformers import Engine
model = build("llama")
prompts = [[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 9, 10, 12]]
ours = Engine(model).generate(prompts, max_new_tokens=4)
ref = [model.generate(torch.tensor([p]), max_new_tokens=4, do_sample=False)[0, len(p):].tolist() for p in prompts]
assert ours == ref, (ours, ref)
assert "triton" not in sys.modules
print("torch alone: ok")
"""


def test_import_requests_and_engine_work_without_triton() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = BLOCKER + "\n" + textwrap.dedent(PROGRAM)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), timeout=300)
    assert run.returncode == 0 and "torch alone: ok" in run.stdout, run.stderr[-3000:]
