"""Triton kernels that read and write KV through slot indices, each beside its torch reference.

Every public op `name(...)` checks its inputs, then launches its Triton kernel when a tensor is on
CUDA or `TRITON_INTERPRET=1` is set at call time, and runs `name_ref(...)` (plain torch, same
signature, same result) otherwise. See `_common.use_triton`.
"""

from __future__ import annotations

from radixkv.kernels._common import KernelInputError, use_triton
from radixkv.kernels.cascade import (cascade_attention, cascade_attention_ref, cascade_decode,
                                     cascade_decode_launch, cascade_decode_ref)
from radixkv.kernels.cascade_plan import CascadeLevel, CascadePlan, PaddedLevel, with_padding
from radixkv.kernels.decode import decode_attention, decode_attention_ref
from radixkv.kernels.extend import extend_attention, extend_attention_ref
from radixkv.kernels.gather import gather_kv, gather_kv_ref
from radixkv.kernels.indices import (build_kv_indices, build_kv_indices_ref, write_req_to_token,
                                     write_req_to_token_ref)
from radixkv.kernels.merge import merge_states, merge_states_ref
from radixkv.kernels.store import store_kv, store_kv_ref

__all__ = [
    "KernelInputError", "use_triton",
    "store_kv", "store_kv_ref", "gather_kv", "gather_kv_ref",
    "build_kv_indices", "build_kv_indices_ref", "write_req_to_token", "write_req_to_token_ref",
    "decode_attention", "decode_attention_ref", "extend_attention", "extend_attention_ref",
    "CascadeLevel", "CascadePlan", "PaddedLevel", "with_padding", "cascade_attention", "cascade_attention_ref", "cascade_decode",
    "cascade_decode_launch", "cascade_decode_ref", "merge_states", "merge_states_ref",
]
