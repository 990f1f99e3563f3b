"""TokenToKVPool: `kv[slot] -> (k, v)`, one K and one V buffer per layer that holds KV.

Each buffer is `[num_slots, num_kv_heads, head_dim]` (NHD, as SGLang's MHATokenToKVPool and
FlashInfer's NHD layout), any float dtype, any device; `pin_memory` for a host tier next to a GPU. Slot indices come from SlotAllocator; this
pool never decides who owns a slot.

Layers without attention (a hybrid model's recurrent-only layers: Jamba's Mamba, Qwen3-Next's gated
delta net) hold no KV: `kv_layers` lists the decoder layers that do, and buffers exist for those
only, `k_buffer[buffer_index[layer]]` (identity when every layer holds KV). `layer_slots` gives some
layers a pool of their own size: the layers of a sliding-window group (CacheConfig.groups) keep
`[window_slots, num_kv_heads, head_dim]`, indexed by window slots (cache_windows.py translates
full slots into them).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class TokenToKVPool:
    def __init__(self, num_slots: int, num_layers: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: str | torch.device, pin_memory: bool = False,
                 kv_layers: Sequence[int] | None = None, layer_slots: dict[int, int] | None = None) -> None:
        self.num_slots = num_slots
        self.num_layers = num_layers
        self.dtype = dtype
        self.device = torch.device(device)
        self.kv_layers = tuple(range(num_layers) if kv_layers is None else kv_layers)
        self.buffer_index = {layer: i for i, layer in enumerate(self.kv_layers)}  # decoder layer -> buffer
        sizes = [(layer_slots or {}).get(layer, num_slots) for layer in self.kv_layers]

        def buffer(n: int) -> torch.Tensor:
            return torch.zeros((n, num_kv_heads, head_dim), dtype=dtype, device=self.device, pin_memory=pin_memory)

        self.k_buffer = [buffer(n) for n in sizes]
        self.v_buffer = [buffer(n) for n in sizes]
        # one layer's K and V of one token (what a cascade step saves per shared read), and all layers'
        self.layer_token_bytes = 2 * num_kv_heads * head_dim * torch.empty(0, dtype=dtype).element_size()
        self._token_bytes = len(self.kv_layers) * self.layer_token_bytes

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token over all layers that hold KV (a token of each layer's pool)."""
        return self._token_bytes
