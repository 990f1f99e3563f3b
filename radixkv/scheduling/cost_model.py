"""What one forward costs on one H100 serving an 8B model: the clock of `radixkv simulate`.

A step's time is `overhead + max(compute, memory)`, a roofline:

    compute = (2 * params * (prefill_tokens + decode_rows)        linear layers, 2 FLOPs per weight per token
               + 4 * layers * hidden * attended_positions)        QK^T and PV over every position a query reads
              / (peak_flops * mfu)
    memory  = (weight_bytes                                       every weight read once per step
               + kv_bytes_per_token * kv_tokens_read)             cached context of prefill chunks and decode rows
              / (hbm_bandwidth * bandwidth_utilization)

Prefill is compute-bound (about 26k tokens/s here) and decode memory-bound (about 6 ms for the
weights plus the batch's KV), as measured systems show; the constants below say where each comes
from. It prices nothing else: no sampling, no network, no CPU-GPU overlap beyond `overhead_s`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class CostModel:
    name: str = "Llama-3-8B (bf16) on one H100 SXM 80GB"
    params: float = 8.03e9  # Llama-3-8B parameters (model card)
    layers: int = 32  # Llama-3-8B config.json: num_hidden_layers
    hidden: int = 4096  # config.json: hidden_size (= 32 query heads x head_dim 128)
    kv_bytes_per_token: int = 131072  # 32 layers x 8 KV heads x 128 head_dim x 2 (K and V) x 2 bytes (bf16)
    peak_flops: float = 989e12  # H100 SXM dense BF16 tensor-core peak (NVIDIA H100 datasheet)
    mfu: float = 0.5  # assumed model-FLOPs utilization of large prefill batches (not measured here)
    hbm_bandwidth: float = 3.35e12  # H100 SXM HBM3 bytes/s (NVIDIA H100 datasheet)
    bandwidth_utilization: float = 0.8  # assumed share of peak HBM bandwidth a decode step reaches
    overhead_s: float = 0.002  # assumed per-step launch and scheduling time (CUDA graphs, Python)
    kv_capacity_tokens: int = 400_000  # (80 GB x 0.9 - 16 GB weights - ~4 GB activations) / 128 KiB per token
    max_batch_tokens: int = 8192  # prefill tokens per step: SGLang's default chunked-prefill size on an H100

    @property
    def weight_bytes(self) -> float:
        return 2.0 * self.params  # bf16

    def step_seconds(self, prefill_tokens: float, decode_rows: float, attended: float | np.ndarray,
                     kv_read: float | np.ndarray) -> float | np.ndarray:
        """One forward. `attended`: positions all queries read (causal prefill: a chunk [a, b) reads
        about (b^2 - a^2) / 2; a decode row reads its context); `kv_read`: cached tokens whose KV the
        step reads from HBM (a chunk's prefix, once; each decode row's context). Arrays price many
        steps at once."""
        flops = 2.0 * self.params * (prefill_tokens + decode_rows) + 4.0 * self.layers * self.hidden * attended
        memory = self.weight_bytes + self.kv_bytes_per_token * kv_read
        return self.overhead_s + np.maximum(flops / (self.peak_flops * self.mfu),
                                            memory / (self.hbm_bandwidth * self.bandwidth_utilization))

    def prefill_tokens_per_s(self) -> float:
        """Tokens/s of a full prefill step with no cached context: the unit of the Scheduler's clock."""
        n = self.max_batch_tokens
        return n / self.step_seconds(n, 0, n * n / 2, 0)

    def request_seconds(self, prompt: int, output: int, batch: int, context: float) -> float:
        """What one request costs the server with no prefix reuse: its whole prompt prefilled alone,
        and `output` decode rows each taking 1/batch of a decode step of `batch` rows of `context`
        tokens (the load the trace is rescaled to)."""
        prefill = self.step_seconds(prompt, 0, prompt * prompt / 2, 0) - self.overhead_s
        row = self.step_seconds(0, batch, batch * context, batch * context) / batch
        return prefill + output * row

    def as_dict(self) -> dict[str, float | int | str]:
        return {**asdict(self), "prefill_tokens_per_s": round(self.prefill_tokens_per_s())}
