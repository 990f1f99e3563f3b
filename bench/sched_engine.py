"""The real-forward check of issue 20 (item 4): the transformers Engine on a tiny random Llama (CPU),
four prefix groups arriving interleaved (A B C D A B C D ...) into a cache that holds about two
system prompts beside the running requests. Per schedule: prompt tokens reused (`last_stats`),
prompt tokens computed, and whether greedy output equals `model.generate` token for token. The same
setting is tests/test_engine_schedules.py.

    python bench/sched_engine.py
"""

from __future__ import annotations

import sys

if sys.path and sys.path[0].rstrip("/").endswith("bench"):  # see bench/e2e.py: bench/kernels.py shadows
    del sys.path[0]  # the `kernels` package transformers probes for

import torch  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402

from radixkv.integrations.transformers import Engine  # noqa: E402
from radixkv.scheduling import POLICIES  # noqa: E402

VOCAB, GROUPS, PER_GROUP, SYSTEM, OWN, NEW = 256, 4, 4, 64, 16, 4


def main() -> int:
    torch.manual_seed(1)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                         initializer_range=0.2, bos_token_id=None, eos_token_id=None,
                                         pad_token_id=None)).eval()
    g = torch.Generator().manual_seed(20)
    heads = [torch.randint(0, VOCAB, (SYSTEM,), generator=g).tolist() for _ in range(GROUPS)]
    prompts = [heads[k] + torch.randint(0, VOCAB, (OWN,), generator=g).tolist()
               for _ in range(PER_GROUP) for k in range(GROUPS)]
    gen = GenerationConfig(max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                               generation_config=gen)[0, len(p):].tolist() for p in prompts]
    print(f"{len(prompts)} prompts, {GROUPS} groups of {SYSTEM}-token system prompts, interleaved; "
          f"256 slots, page 16, 96 tokens a step")
    print(f"{'schedule':<11} {'reused':>7} {'computed':>9}  output == model.generate")
    for name in POLICIES:
        engine = Engine(model, schedule=name, num_slots=256, page_size=16, max_batch_tokens=96, max_requests=8)
        got = engine.generate(prompts, max_new_tokens=NEW)
        s = engine.last_stats
        print(f"{name:<11} {s.prefill_reused:7d} {s.prefill_computed:9d}  {got == want}")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
