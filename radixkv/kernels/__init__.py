"""Triton kernels that read and write KV through slot indices, each beside its torch reference.

Every public op `name(...)` checks its inputs, then launches its Triton kernel when a tensor is on
CUDA or `TRITON_INTERPRET=1` is set at call time, and runs `name_ref(...)` (plain torch, same
signature, same result) otherwise. See `_common.use_triton`.

Each op also has `name_unchecked(...)`: the same dispatch with no checks and no device->host
sync, for the per-layer path after `RadixCache.batch()` validated the step once. The attention
ops take the host-side lengths they need (`max_seq_len`, `ExtendLens`) read once per step.

The attention ops take an `AttentionVariant` (variant.py): sliding window, chunks, logit
soft-capping, attention sinks; the default is plain causal attention. Below the unchecked ops lies
the launch layer, `radixkv.kernels.launch`: launch configurations and bare Triton launches.
"""

from __future__ import annotations

from radixkv.kernels._common import KernelInputError, use_triton
from radixkv.kernels.cascade import cascade_attention, cascade_decode, cascade_decode_launch
from radixkv.kernels.cascade_ref import cascade_attention_ref, cascade_decode_ref
from radixkv.kernels.cascade_plan import CascadeLevel, CascadePlan, PaddedLevel, with_padding
from radixkv.kernels.decode import decode_attention, decode_attention_ref, decode_attention_unchecked
from radixkv.kernels.extend import (ExtendLens, extend_attention, extend_attention_ref,
                                    extend_attention_unchecked)
from radixkv.kernels.gather import gather_kv, gather_kv_ref, gather_kv_unchecked
from radixkv.kernels.indices import (build_kv_indices, build_kv_indices_ref, build_kv_indices_unchecked,
                                     write_req_to_token, write_req_to_token_ref,
                                     write_req_to_token_unchecked)
from radixkv.kernels.merge import merge_states, merge_states_ref
from radixkv.kernels.store import store_kv, store_kv_ref, store_kv_unchecked
from radixkv.kernels.variant import CAUSAL, AttentionVariant

__all__ = [
    "KernelInputError", "use_triton", "ExtendLens", "AttentionVariant", "CAUSAL",
    "store_kv", "store_kv_unchecked", "store_kv_ref",
    "gather_kv", "gather_kv_unchecked", "gather_kv_ref",
    "build_kv_indices", "build_kv_indices_unchecked", "build_kv_indices_ref",
    "write_req_to_token", "write_req_to_token_unchecked", "write_req_to_token_ref",
    "decode_attention", "decode_attention_unchecked", "decode_attention_ref",
    "extend_attention", "extend_attention_unchecked", "extend_attention_ref",
    "CascadeLevel", "CascadePlan", "PaddedLevel", "with_padding",
    "cascade_attention", "cascade_attention_ref", "cascade_decode", "cascade_decode_launch", "cascade_decode_ref",
    "merge_states", "merge_states_ref",
]
