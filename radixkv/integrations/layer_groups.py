"""Which decoder layers keep what: a model's layers grouped by kind, read from its transformers config.

transformers 5.x names every layer's kind in `config.layer_types` (its cache classes dispatch on it:
cache_utils.DYNAMIC_LAYER_TYPE_MAPPING). A layer belongs to one group per kind of state it keeps:

- "full": KV for every token (`full_attention`);
- "sliding": KV of the last `window` tokens (`sliding_attention`; one group per window);
- "chunked": KV within the current `chunk` of tokens (`chunked_attention`);
- "recurrent": a fixed-size state per request (conv + SSM / linear-attention state), `mixer` the
  `layer_types` value (`linear_attention`, `conv`, ...). A `hybrid` layer (Falcon-H1: a Mamba mixer
  and attention side by side) is in a full group and in a recurrent group.

A config without `layer_types` is all full attention, unless it sets `sliding_window` (every layer
sliding) or `attention_chunk_size` (every layer chunked), as transformers infers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixkv.errors import UnsupportedModelError

# Recurrent mixers the Engine serves exactly (integrations/recurrent.py): those that keep their state
# in transformers' LinearAttentionLayer through the Cache API (get/update_conv_state and
# get/update_recurrent_state), as Jamba and Qwen3-Next ("linear_attention") and Falcon-H1 ("hybrid") do.
SERVED_RECURRENT: frozenset[str] = frozenset({"linear_attention", "hybrid"})

_ATTENTION = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}
_RECURRENT = {"linear_attention", "conv", "mamba", "hybrid", "hybrid_sliding"}
_NO_STATE = {"moe", "mlp", "dummy"}  # layers without attention or state


@dataclass(frozen=True)
class LayerGroup:
    kind: str  # "full" | "sliding" | "chunked" | "recurrent"
    layers: tuple[int, ...]  # decoder-layer indices in this group
    window: int = 0  # sliding
    chunk: int = 0  # chunked
    mixer: str = ""  # recurrent: the transformers layer_types value ("linear_attention", "hybrid", ...)


def layer_types(config: Any) -> list[str]:
    """The `layer_types` of a (text) config, inferred as transformers does when it has none."""
    types = getattr(config, "layer_types", None)
    if types is not None:
        return list(types)
    n = config.num_hidden_layers
    if getattr(config, "sliding_window", None) is not None:
        return ["sliding_attention"] * n
    if getattr(config, "attention_chunk_size", None) is not None:
        return ["chunked_attention"] * n
    return ["full_attention"] * n


def layer_groups(config: Any) -> tuple[LayerGroup, ...]:
    """The layer groups of `config`, in order of first layer. UnsupportedModelError names a layer
    kind this module does not know."""
    members: dict[tuple[str, int, int, str], list[int]] = {}
    for i, kind in enumerate(layer_types(config)):
        for key in _group_keys(config, kind, i):
            members.setdefault(key, []).append(i)
    return tuple(LayerGroup(kind, tuple(layers), window, chunk, mixer)
                 for (kind, window, chunk, mixer), layers in members.items())


def _group_keys(config: Any, kind: str, i: int) -> list[tuple[str, int, int, str]]:
    if kind in _ATTENTION:
        group = _ATTENTION[kind]
        window = int(getattr(config, "sliding_window", 0) or 0) if group == "sliding" else 0
        chunk = int(getattr(config, "attention_chunk_size", 0) or 0) if group == "chunked" else 0
        return [(group, window, chunk, "")]
    if kind in _RECURRENT:
        keys = [("recurrent", 0, 0, kind)]
        if kind == "hybrid":
            keys.insert(0, ("full", 0, 0, ""))
        if kind == "hybrid_sliding":
            keys.insert(0, ("sliding", int(getattr(config, "sliding_window", 0) or 0), 0, ""))
        return keys
    if kind in _NO_STATE:
        return []
    raise UnsupportedModelError(f"layer {i} of {getattr(config, 'model_type', 'this model')} is of kind {kind!r}, "
                                f"which radixkv does not know how to serve")
