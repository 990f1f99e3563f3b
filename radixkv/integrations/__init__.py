"""Generation loops on top of the request-level API.

- `radixkv.integrations.transformers`: `Engine` for HuggingFace causal LMs of the Llama family
  (continuous batching, chunked prefill, preemption, token-identical greedy output).
- `attention`: the "radixkv" function registered with transformers' `AttentionInterface`.
- `sampling`, `stats`: the Engine's parts, usable by a hand-written loop; `scheduler` re-exports
  radixkv.scheduling's Scheduler (its home since issue 20's third round).
- `recurrent` (with `recurrent_state`, `recurrent_batch`, `state_store`): models with recurrent
  layers (Mamba, gated delta net): per-request state and prefix reuse through state snapshots.

Nothing is imported here, so `import radixkv.integrations` does not require transformers.
"""
