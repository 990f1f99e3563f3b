"""The Engine on a CUDA GPU (skipped without one): model and cache on the device, the Triton kernels
compiled, greedy tokens equal to `model.generate`'s with cascade decode forced on and with it off.

On CUDA `cache.batch(cascade=True)` plans a step's cascade only when it saves enough KV reads
(radixkv.cascade.min_saved_positions), which these tiny models never do, so the cascade case lowers the bar to 0 to
exercise the kernels end to end."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import radixkv.cascade  # noqa: E402
from radixkv import kernels  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402
from hf_helpers import assert_cache_idle, assert_same_tokens, build, reference, shared_prefix_prompts  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("cascade", [True, False], ids=["cascade", "flat"])
def test_engine_on_cuda_matches_model_generate(kind: str, page_size: int, cascade: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    model = build(kind).cuda()
    prompts = shared_prefix_prompts(seed=30 + page_size, groups=2, per_group=4, system=40, own=(1, 24))
    want = reference(model, prompts, 12)
    calls: list[int] = []
    launch = kernels.cascade_decode_launch
    monkeypatch.setattr(kernels, "cascade_decode_launch", lambda q, *a: calls.append(q.shape[0]) or launch(q, *a))
    monkeypatch.setattr(radixkv.cascade, "CUDA_MIN_SAVED_BYTES", 0)  # plan every shared step
    engine = Engine(model, num_slots=4096, page_size=page_size, dtype=torch.float32, max_context_len=256,
                    max_batch_tokens=64, cascade=cascade, device="cuda")
    assert engine.cache.kv_pool.k_buffer[0].device.type == "cuda"
    assert_same_tokens(engine.generate(prompts, max_new_tokens=12), want)
    assert_cache_idle(engine)
    assert (len(calls) > 0) == cascade, calls
