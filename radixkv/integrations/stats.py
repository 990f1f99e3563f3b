"""What one `Engine.generate` call did and where its time went (wall-clock, `time.perf_counter`).

Time buckets do not overlap except that `attention_s` lies inside `forward_s` (and the decode /
extend kernel times inside `attention_s`):

```
wall_s = forward_s (model forward, attention_s included) + cache_s (scheduler + batch + commit + close)
       + sample_s + other (Python glue: building inputs, stop checks)
```
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class GenerateStats:
    wall_s: float = 0.0
    forward_s: float = 0.0  # inside model(...): embeddings, projections, MLP, norms, lm_head, attention
    attention_s: float = 0.0  # inside the radixkv attention function: store_kv + attention kernels
    decode_attention_s: float = 0.0  # of which in kernels.decode_attention
    extend_attention_s: float = 0.0  # of which in kernels.extend_attention
    cascade_calls: int = 0  # decode attention calls (layers x steps) through kernels.cascade_decode
    masked_cascade_calls: int = 0  # of which sliding-window or chunked layers
    cache_s: float = 0.0  # radixkv bookkeeping: schedule (open/reserve/close), batch, commit
    sample_s: float = 0.0
    steps: int = 0  # forwards run
    output_tokens: int = 0
    prompt_tokens: int = 0
    prefill_computed: int = 0  # prompt positions whose KV was computed (recomputation after preemption included)
    prefill_reused: int = 0  # prompt positions found in the cache when each request was first admitted
    preemptions: int = 0
    ttft_s: list[float] = field(default_factory=list)  # per request: generate() start -> first new token

    @property
    def other_s(self) -> float:
        return self.wall_s - self.forward_s - self.cache_s - self.sample_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else float("nan")

    def ttft_percentiles(self) -> tuple[float, float, float]:
        """(p50, p90, p99) time to first token, seconds (linear interpolation; nan without requests)."""
        if not self.ttft_s:
            return (float("nan"),) * 3
        p50, p90, p99 = np.percentile(self.ttft_s, [50, 90, 99]).tolist()
        return p50, p90, p99

    def profile(self) -> dict[str, float]:
        """Seconds per bucket, non-overlapping, summing to `wall_s`."""
        return {
            "model forward (w/o attention)": self.forward_s - self.attention_s,
            "decode_attention": self.decode_attention_s,
            "extend_attention": self.extend_attention_s,
            "store_kv + layout": self.attention_s - self.decode_attention_s - self.extend_attention_s,
            "cache bookkeeping": self.cache_s,
            "sampling": self.sample_s,
            "python glue": self.other_s,
        }
