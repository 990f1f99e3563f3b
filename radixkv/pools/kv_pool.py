"""TokenToKVPool: `kv[slot] -> (k, v)`, one K and one V buffer per layer.

Each buffer is `[num_slots, num_kv_heads, head_dim]` (NHD, as SGLang's MHATokenToKVPool and
FlashInfer's NHD layout), any float dtype, any device; `pin_memory` for a host tier next to a GPU. Slot indices come from SlotAllocator; this
pool never decides who owns a slot. `layer_slots` gives some layers a pool of their own size: the
layers of a sliding-window group (CacheConfig.groups) keep `[window_slots, num_kv_heads, head_dim]`,
indexed by window slots (cache_windows.py translates full slots into them).
"""

from __future__ import annotations

import torch


class TokenToKVPool:
    def __init__(self, num_slots: int, num_layers: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: str | torch.device, pin_memory: bool = False,
                 layer_slots: dict[int, int] | None = None) -> None:
        self.num_slots = num_slots
        self.num_layers = num_layers
        self.dtype = dtype
        self.device = torch.device(device)
        sizes = [num_slots] * num_layers
        for layer, n in (layer_slots or {}).items():
            sizes[layer] = n

        def buffer(n: int) -> torch.Tensor:
            return torch.zeros((n, num_kv_heads, head_dim), dtype=dtype, device=self.device, pin_memory=pin_memory)

        self.k_buffer = [buffer(n) for n in sizes]
        self.v_buffer = [buffer(n) for n in sizes]

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token over all layers (a token of every layer's pool)."""
        k = self.k_buffer[0]
        return 2 * self.num_layers * k.shape[1] * k.shape[2] * k.element_size()
