"""Per-request recurrent state (conv + SSM / linear-attention state of every recurrent layer) and the
transformers `Cache` that lends a batch of them to one model forward.

How transformers 5.x carries recurrent state (cache_utils.py): a `Cache` is a list of per-layer
objects; a recurrent layer's is a `LinearAttentionLayer` holding `conv_states[i]`
(`[batch, conv_dim, kernel]`) and `recurrent_states[i]` (`[batch, ...]`, e.g. `[batch, d_inner,
d_state]` for Mamba, `[batch, heads, d_k, d_v]` for a gated delta net), `i` < `number_of_states`. The
mixer reads them with `cache.get_conv_state / get_recurrent_state` (None until the first forward:
`has_previous_state[i]`), and writes them with `update_conv_state` (which also returns the conv input
with its left context) and `update_recurrent_state` (an in-place copy). Decode (one token with a state)
updates both in place. Attention layers call `cache.update(k, v, layer_idx)` and attend over what it
returns.

`StateCache` is such a Cache, built for one forward over a batch of requests: the recurrent layers
are `LinearAttentionLayer`s whose tensors are the requests' own states stacked along the batch, and
the attention layers store nothing (`update` hands back the new K/V; radixkv's attention function
reads the prefix from the pool). After the forward, `RecurrentState.take` reads each request's row
back. A state never mixes requests: each row is one request's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache, LinearAttentionLayer


class _StateLayer(LinearAttentionLayer):
    """A recurrent layer's state for one forward; `update` (attention of a hybrid layer) stores nothing."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        return key_states, value_states


class _NoKV:
    """An attention-only layer: radixkv holds its KV, so the Cache keeps nothing."""

    is_compileable = True
    is_croppable = True
    supports_early_init = False

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        return key_states, value_states


@dataclass
class LayerState:
    """One recurrent layer's state for one request: tensors with a leading batch dimension of 1."""
    conv: dict[int, torch.Tensor] = field(default_factory=dict)  # state index -> [1, conv_dim, kernel]
    recurrent: dict[int, torch.Tensor] = field(default_factory=dict)  # state index -> [1, ...]
    kernel: dict[int, int] = field(default_factory=dict)  # state index -> conv kernel size

    def clone(self) -> LayerState:
        return LayerState({i: t.clone() for i, t in self.conv.items()},
                          {i: t.clone() for i, t in self.recurrent.items()}, dict(self.kernel))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.conv.values(), *self.recurrent.values()))


@dataclass
class RecurrentState:
    """Every recurrent layer's state for one request after some number of tokens (empty: no token yet)."""
    layers: dict[int, LayerState] = field(default_factory=dict)  # decoder layer index -> its state

    @property
    def started(self) -> bool:
        return bool(self.layers)

    def clone(self) -> RecurrentState:
        """A deep copy (copy-on-write: a snapshot and the request that resumes from it never share)."""
        return RecurrentState({i: s.clone() for i, s in self.layers.items()})

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.layers.values())

    @staticmethod
    def take(cache: StateCache, row: int, batch: int) -> RecurrentState:
        """Row `row` of a `batch`-row StateCache after its forward (views when batch > 1)."""
        out = RecurrentState()
        for i, layer in cache.state_layers().items():
            pick = (lambda t: t) if batch == 1 else (lambda t: t[row:row + 1])
            out.layers[i] = LayerState(
                {k: pick(t) for k, t in layer.conv_states.items() if layer.is_conv_states_initialized[k]},
                {k: pick(t) for k, t in layer.recurrent_states.items() if layer.is_recurrent_states_initialized[k]},
                {k: n for k, n in layer.conv_kernel_size.items() if n is not None})
        return out


class StateCache(Cache):
    """A transformers Cache over `states` (one per request, all started or all fresh), stacked in order.

    Args:
        recurrent_layers: decoder-layer index -> `number_of_states` for each recurrent layer.
        num_layers: decoder layers in the model.
        states: the batch's states, in batch order; fresh ones (no token yet) start from zero.
    """

    def __init__(self, recurrent_layers: dict[int, int], num_layers: int, states: list[RecurrentState]) -> None:
        started = {s.started for s in states}
        if len(started) != 1 or (len(states) > 1 and not states[0].started):
            raise ValueError("a StateCache batches started states only; a fresh state runs alone")
        layers: list[object] = []
        for i in range(num_layers):
            if i in recurrent_layers:
                layers.append(_stacked(_StateLayer(number_of_states=recurrent_layers[i]),
                                       [s.layers[i] for s in states] if states[0].started else []))
            else:
                layers.append(_NoKV())
        super().__init__(layers=layers)
        self._last_read: torch.Tensor | None = None

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        """transformers' read of a layer's state; remembered for `last_read` (recurrent_scan.py)."""
        state = super().get_recurrent_state(layer_idx, state_idx)
        self._last_read = state
        return state

    def last_read(self) -> torch.Tensor | None:
        """The recurrent state the model read last (None: that layer had none yet), as it is until the
        model updates it: the state a mixer that reads, then scans, starts its scan from."""
        return self._last_read

    def state_layers(self) -> dict[int, _StateLayer]:
        return {i: layer for i, layer in enumerate(self.layers) if isinstance(layer, _StateLayer)}


def _stacked(layer: _StateLayer, states: list[LayerState]) -> _StateLayer:
    """`layer` holding `states` stacked along the batch (nothing: the mixer initialises it lazily)."""
    if not states:
        return layer
    first = states[0]
    for k in first.conv:
        layer.conv_states[k] = first.conv[k] if len(states) == 1 else torch.cat([s.conv[k] for s in states])
        layer.is_conv_states_initialized[k] = True
        layer.conv_kernel_size[k] = first.kernel[k]
        layer.has_previous_state[k] = True
        layer.device, layer.dtype = first.conv[k].device, first.conv[k].dtype
    for k in first.recurrent:
        rec = [s.recurrent[k] for s in states]
        layer.recurrent_states[k] = rec[0] if len(states) == 1 else torch.cat(rec)
        layer.is_recurrent_states_initialized[k] = True
        layer.has_previous_state[k] = True
    return layer
