"""Which layers of a transformers model hold what: full KV, window KV, chunk KV, recurrent state.

`layer_groups(config)` reads a model's config (no weights) and returns one `LayerGroup` per kind of
layer (per window size, chunk size or recurrent mixer); `check_served(groups)` raises
`UnsupportedModelError` for any group the Engine would not serve exactly. Each layer lies in one
group, except a "hybrid" layer (Falcon-H1, Zamba: attention and a Mamba mixer side by side), which
lies in one attention group and one recurrent group.

Where the layout comes from, in transformers 5.x (first that applies):
  1. `config.layer_types`, one name per decoder layer (legacy "mamba" / "attention" read as
     "linear_attention" / "full_attention", as transformers' `remap_legacy_layer_types` does):
       full_attention -> full; sliding_attention -> sliding, window `config.sliding_window`;
       chunked_attention -> chunked, chunk `config.attention_chunk_size`;
       linear_attention, conv -> recurrent (mixer = that name); hybrid, hybrid_sliding -> both;
       anything else (indexed, compressed sparse, window_attention, moe/mlp-only layers, ...) is
       refused: its attention is not causal softmax attention over every layer's own KV.
  2. older hybrid fields: `layers_block_type` / `block_types` (Jamba, RecurrentGemma, ...),
     `attn_layer_period` + `attn_layer_offset` (Jamba), `full_attn_idxs` (LFM2); any other
     recurrent-state field (`state_size`, `ssm_state_size`, `mamba_d_ssm`, ...) makes every layer
     recurrent (pure Mamba, RWKV-style);
  3. `attention_chunk_size` (Llama 4 without layer_types): chunked where `no_rope_layers[i]` is set;
  4. `sliding_window` unless `use_sliding_window` is False (Mistral, Mixtral, Qwen2-style with
     `max_window_layers`: layers from that index on slide);
  5. otherwise every layer is full attention.

Window semantics are transformers': a sliding layer's query at position q sees keys k with
q - window < k <= q (the window counts the query itself); a chunked layer's query sees keys with
k // chunk == q // chunk and k <= q.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radixkv.config import GroupSpec
from radixkv.errors import UnsupportedModelError


@dataclass(frozen=True)
class LayerGroup:
    kind: str  # "full" | "sliding" | "chunked" | "recurrent"
    layers: tuple[int, ...]  # decoder-layer indices in this group, ascending
    window: int = 0  # sliding: transformers' sliding_window (tokens a query sees, itself included)
    chunk: int = 0  # chunked: attention_chunk_size
    mixer: str = ""  # recurrent: the transformers layer_types value ("linear_attention", "conv", ...)


SERVED_ATTENTION: frozenset[str] = frozenset({"full", "sliding", "chunked"})  # kinds the Engine serves exactly
# Recurrent mixers the Engine serves exactly (integrations/recurrent.py: each request's state through
# transformers' Cache API, as Jamba and Qwen3-Next ("linear_attention") and Falcon-H1 ("hybrid") keep it).
SERVED_RECURRENT: frozenset[str] = frozenset({"linear_attention", "hybrid", "conv"})

# layer_types value -> (attention kind or "", recurrent mixer or "")
_KINDS = {
    "full_attention": ("full", ""), "sliding_attention": ("sliding", ""), "chunked_attention": ("chunked", ""),
    "linear_attention": ("", "linear_attention"), "conv": ("", "conv"),
    "hybrid": ("full", "hybrid"), "hybrid_sliding": ("sliding", "hybrid_sliding"),
}
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention", "recurrent": "linear_attention"}
_RECURRENT_FIELDS = ("state_size", "ssm_state_size", "mamba_d_ssm", "mamba_d_conv", "mamba_d_state",
                     "linear_num_value_heads", "linear_num_key_heads", "hybrid_override_pattern", "conv_L_cache")


def layer_groups(config: Any) -> tuple[LayerGroup, ...]:
    """The layer groups of a transformers config (a multimodal config's text config), in order of
    their first layer. Raises UnsupportedModelError for a layer kind no group describes."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    if getattr(cfg, "is_heterogeneous", False):
        raise UnsupportedModelError(f"{_name(cfg)} has per-layer configs (heterogeneous layers); the Engine "
                                    "needs one attention shape for every layer")
    if _field(cfg, "use_bidirectional_attention"):
        raise UnsupportedModelError(f"{_name(cfg)} uses bidirectional attention; the Engine serves causal models")
    n = int(cfg.num_hidden_layers)
    types = [_LEGACY.get(t, t) for t in _layer_types(cfg, n)]
    if len(types) != n:
        raise UnsupportedModelError(f"{_name(cfg)} lists {len(types)} layer types for {n} layers")
    unknown = sorted({t for t in types if t not in _KINDS})
    if unknown:
        bad = unknown[0]
        raise UnsupportedModelError(f"{_name(cfg)}: layer kind {bad!r} (layers {_layers_of(types, bad)}) is not "
                                    f"causal softmax attention over its own KV or a known recurrent mixer")
    keys: dict[tuple[str, int, int, str], list[int]] = {}
    for i, t in enumerate(types):
        attention, mixer = _KINDS[t]
        if attention:
            keys.setdefault(_attention_key(cfg, attention), []).append(i)
        if mixer:
            keys.setdefault(("recurrent", 0, 0, mixer), []).append(i)
    groups = [LayerGroup(kind, tuple(layers), window, chunk, mixer)
              for (kind, window, chunk, mixer), layers in keys.items()]
    return tuple(sorted(groups, key=lambda g: (g.layers[0], g.kind)))


def check_served(groups: Sequence[LayerGroup], model_name: str = "the model") -> None:
    """Raises UnsupportedModelError naming the first group the Engine would not serve exactly."""
    for g in groups:
        served = g.mixer in SERVED_RECURRENT if g.kind == "recurrent" else g.kind in SERVED_ATTENTION
        if not served:
            what = f"recurrent mixer {g.mixer!r}" if g.kind == "recurrent" else f"{g.kind} attention"
            raise UnsupportedModelError(
                f"{model_name}: {what} in layers {list(g.layers)} is not served exactly by the radixkv Engine "
                f"(it serves {sorted(SERVED_ATTENTION)} attention and recurrent mixers {sorted(SERVED_RECURRENT)})")


def layer_masks(groups: Sequence[LayerGroup], num_layers: int) -> tuple[tuple[int, int], ...]:
    """`(window, chunk)` of each layer's attention ((0, 0): full, or no attention)."""
    masks = [(0, 0)] * num_layers
    for g in groups:
        if g.kind in ("sliding", "chunked"):
            for i in g.layers:
                masks[i] = (g.window, g.chunk)
    return tuple(masks)


def window_specs(groups: Sequence[LayerGroup], num_slots: int, page_size: int, max_requests: int,
                 max_batch_tokens: int) -> tuple[GroupSpec, ...]:
    """One window group (CacheConfig.groups) per sliding layer group, one chunk group per chunked
    layer group: its layers keep KV in a pool of their own, sized to hold every request's window at
    once (W + 2 pages each: the window, the page it starts in and the private tail) plus one
    forward's chunk, at most `num_slots`. What
    the pool holds beyond the running windows is reuse, evicted first when it runs short. A chunked
    group (Llama 4) is a chunk group (GroupSpec kind "chunk"): a query reads only its own chunk, so a
    request keeps only its current chunk's KV (radix/windows.py); sized like a window of W = chunk."""
    specs = []
    for g in groups:
        if g.kind in ("sliding", "chunked"):
            size = g.window if g.kind == "sliding" else g.chunk
            want = max_requests * (size + 2 * page_size) + max_batch_tokens + page_size
            slots = min(num_slots, -(-want // page_size) * page_size)
            specs.append(GroupSpec("window" if g.kind == "sliding" else "chunk", slots, size=size, layers=g.layers))
    return tuple(specs)


def check_position_limit(config: Any, longest: int, model_name: str = "the model") -> None:
    """Raises UnsupportedModelError when a context or forward of `longest` tokens passes the
    model's `position_limit`."""
    limit = position_limit(config)
    if limit is not None and longest > limit:
        raise UnsupportedModelError(f"{model_name} scales no-RoPE queries by position from {limit + 1} on, counted "
                                    f"in a way the packed forward does not reproduce: use max_context_len and "
                                    f"max_batch_tokens <= {limit} (got {longest})")


def position_limit(config: Any) -> int | None:
    """The longest context and forward the Engine serves exactly, when the model caps it (else None).

    Llama 4's no-RoPE layers scale queries by `log1p(floor((pos + 1) / floor_scale))`, with `pos`
    counted from the start of the forward's input (a cache's length, or 0), not from `position_ids`;
    in the Engine's packed forward that is the index in the pack. Both agree (scale 1) while every
    position and every pack stays below `floor_scale - 1`."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    if _field(cfg, "attn_temperature_tuning") and _field(cfg, "no_rope_layers") is not None:
        if not all(_field(cfg, "no_rope_layers")):
            return int(_field(cfg, "floor_scale")) - 1
    return None


def _attention_key(cfg: Any, kind: str) -> tuple[str, int, int, str]:
    if kind == "sliding":
        return ("sliding", _positive(cfg, "sliding_window"), 0, "")
    if kind == "chunked":
        return ("chunked", 0, _positive(cfg, "attention_chunk_size"), "")
    return ("full", 0, 0, "")


def _layer_types(cfg: Any, n: int) -> list[str]:
    types = _field(cfg, "layer_types")
    if types:
        return list(types)
    blocks = _field(cfg, "layers_block_type") or _field(cfg, "block_types")
    if blocks:
        return [str(b) for b in blocks][:n] if len(blocks) >= n else [str(blocks[i % len(blocks)]) for i in range(n)]
    period = _field(cfg, "attn_layer_period")
    if period:
        offset = _field(cfg, "attn_layer_offset") or 0
        return ["full_attention" if i % period == offset else "linear_attention" for i in range(n)]
    attn_idxs = _field(cfg, "full_attn_idxs")
    if attn_idxs is not None:
        return ["full_attention" if i in set(attn_idxs) else "conv" for i in range(n)]
    if any(_field(cfg, f) for f in _RECURRENT_FIELDS):
        return ["linear_attention"] * n  # a recurrent-state field and no layer split to read: all recurrent
    if _field(cfg, "attention_chunk_size"):
        no_rope = _field(cfg, "no_rope_layers")
        return ["chunked_attention" if no_rope is None or no_rope[i] else "full_attention" for i in range(n)]
    if _field(cfg, "sliding_window") and _field(cfg, "use_sliding_window") is not False:
        first = _field(cfg, "max_window_layers")
        return ["sliding_attention" if first is None or i >= first else "full_attention" for i in range(n)]
    return ["full_attention"] * n


def _field(cfg: Any, name: str) -> Any:
    """`cfg.name`, or None when absent (or when transformers refuses a global read of a per-layer field)."""
    try:
        return getattr(cfg, name, None)
    except Exception as e:  # transformers' AmbiguousGlobalPerLayerAttributeError
        raise UnsupportedModelError(f"{_name(cfg)}: {name} varies per layer ({type(e).__name__})") from e


def _positive(cfg: Any, name: str) -> int:
    value = _field(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UnsupportedModelError(f"{_name(cfg)}: {name} = {value!r}, expected a positive int")
    return value


def _layers_of(types: list[str], kind: str) -> list[int]:
    return [i for i, t in enumerate(types) if t == kind]


def _name(cfg: Any) -> str:
    return str(getattr(cfg, "model_type", "") or type(cfg).__name__)
