"""One forward of a transformers model over a step's packed tokens, with radixkv's attention: the
Engine's forward for models without recurrent layers (integrations/recurrent.py has the other).

In transformers 5.x every decoder layer of these models applies RoPE itself,
then calls `ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation)(module, q, k, v, mask,
scaling=..., **kwargs)`, and every extra keyword given to `model(...)` reaches that call. So we
register one function, "radixkv", with `AttentionInterface` and pass the step's `BatchInputs`
through a keyword: the function receives the post-RoPE K/V of exactly the tokens being computed,
stores them through their slots (`store_kv`) and attends over `req_to_token`
(`decode_attention` / `extend_attention`). Nothing of the modeling code is copied. The other
candidate, a custom `Cache` subclass, must return dense `[batch, kv_heads, kv_len, head_dim]` K/V
from `update()`, so every layer of every step would gather the whole prefix (an O(context) copy per
token), and it comes with padded batches, a 4D mask and positions inferred from padding. Here:

- one packed ragged batch: `input_ids` is `[1, sum(extend_lens)]` and `position_ids` come from each
  request (`committed_len + i`), not from padding;
- `use_cache=False, past_key_values=None` keeps transformers' own cache out;
- "radixkv" has no entry in `ALL_MASK_ATTENTION_FUNCTIONS`, so `create_causal_mask` returns None
  without building a mask (the kernels are causal by construction);
- the scheduler packs decode tokens first, so a mixed step sends those to `decode_attention` (one
  batched call) and only the prefill chunks to `extend_attention`;
- when decoding requests share cached prefixes, `cache.batch(..., cascade=True)` plans from the radix
  tree which of them read which shared KV, and `cascade_decode` reads each shared run once per group
  instead of once per request (`Engine(cascade=False)` turns it off; on CUDA a step uses it only
  when the KV reads it saves outweigh its extra launches, `radixkv.cascade.min_saved_positions`);
- `logits_to_keep` as an index tensor runs `lm_head` only on the positions that sample;
- `set_attn_implementation("radixkv")` holds only during `generate()`; the previous implementation
  is restored afterwards, so the same model object still runs `model.generate` unchanged.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from radixkv.integrations.attention import ATTN_IMPLEMENTATION, ForwardBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from radixkv import BatchInputs, RadixCache
    from radixkv.scheduling.scheduler import Plan


def packed_forward(model: PreTrainedModel, cache: RadixCache, plan: Plan, inputs: BatchInputs, keep: list[int],
                   layer_masks: tuple[tuple[int, int], ...]) -> tuple[torch.Tensor, ForwardBatch]:
    """One model forward over the planned positions (packed, in plan order).

    Args:
        plan: requests and their chunk lengths; their slots are reserved, not yet committed.
        inputs: `cache.batch()` of the plan's Sequences.
        keep: indices into the packed positions whose logits to return.
        layer_masks: each layer's window or chunk (layer_groups.layer_masks).
    Returns:
        (`[len(keep), vocab]` logits, the ForwardBatch with the attention timings).
    """
    device = model.device
    ids = list(itertools.chain.from_iterable(
        r.tokens[r.seq.committed_len:r.seq.committed_len + n] for r, n in zip(plan.requests, plan.chunks)))
    extend_lens = inputs.extend_lens.to(device=device, dtype=torch.int64)
    starts = torch.cumsum(extend_lens, 0) - extend_lens
    offsets = inputs.prefix_lens.to(device=device, dtype=torch.int64) - starts
    position_ids = torch.arange(len(ids), device=device) + torch.repeat_interleave(offsets, extend_lens,
                                                                                  output_size=len(ids))
    num_decode = next((i for i, n in enumerate(plan.chunks) if n != 1), len(plan.chunks))
    batch = ForwardBatch(cache, inputs, num_decode, layer_masks=layer_masks)
    out = model(input_ids=torch.tensor([ids], device=device), position_ids=position_ids[None],
                use_cache=False, logits_to_keep=torch.tensor(keep, dtype=torch.int64, device=device),
                radixkv_batch=batch)
    return out.logits[0], batch


@contextlib.contextmanager
def attention_backend(model: PreTrainedModel) -> Iterator[None]:
    """`model` attends with radixkv's function inside the block; its previous implementation after."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
