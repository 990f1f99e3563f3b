"""The kernels' middle layer, by name: launch configurations and the bare Triton launches.

Three layers per op (kernels/__init__.py): the checked public op (`decode_attention`), the
unchecked per-layer op (`decode_attention_unchecked`, still dispatching to the torch reference off
GPU), and, here, what lies under both: the choice of block sizes for a target (`decode_config`) and
the launch itself (`decode_launch`), which always launches Triton, checks nothing and never syncs.
Tools that compile or time kernels for a given target (bench/compile_check.py) use this layer;
generation loops use the two above it.
"""

from __future__ import annotations

from radixkv.kernels._common import Target, target_of
from radixkv.kernels.cascade import cascade_launch, launch_config as cascade_config
from radixkv.kernels.decode import DecodeConfig, decode_config, decode_launch, num_splits_for
from radixkv.kernels.extend import ExtendConfig, extend_config, extend_launch
from radixkv.kernels.gather import gather_kv_launch
from radixkv.kernels.indices import build_kv_indices_launch, write_req_to_token_launch
from radixkv.kernels.merge import merge_launch_config, merge_states_kernel_launch
from radixkv.kernels.store import store_kv_launch
from radixkv.kernels.variant import launch_args as variant_args

__all__ = [
    "Target", "target_of", "variant_args",
    "DecodeConfig", "decode_config", "decode_launch", "num_splits_for",
    "ExtendConfig", "extend_config", "extend_launch",
    "cascade_config", "cascade_launch", "merge_launch_config", "merge_states_kernel_launch",
    "store_kv_launch", "gather_kv_launch", "build_kv_indices_launch", "write_req_to_token_launch",
]
