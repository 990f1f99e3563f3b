"""The cache a transformers model needs: its KV layout, the CacheConfig built from it, and the check
that a given cache fits the model (the Engine's, radixkv/integrations/transformers.py)."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from radixkv import CacheConfig, ConfigError, RadixCache
from radixkv.integrations.layer_groups import check_position_limit, layer_groups
from radixkv.integrations.recurrent_families import state_groups

if TYPE_CHECKING:
    from transformers import PreTrainedModel

CACHE_FIELDS = {f.name for f in fields(CacheConfig)}  # what Engine(**cache_options) accepts


def model_layout(model: PreTrainedModel) -> dict[str, int]:
    """`num_layers`, `num_kv_heads`, `head_dim` of a Llama-family model's KV."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return dict(num_layers=cfg.num_hidden_layers, num_kv_heads=cfg.num_key_value_heads, head_dim=head_dim)


def cache_config_for(model: PreTrainedModel, **overrides: Any) -> CacheConfig:
    """A CacheConfig whose layers, KV heads, head_dim, dtype and device match `model`."""
    cfg = model.config
    # 16k slots: a few dozen requests of a few hundred tokens each.
    base = dict(**model_layout(model), num_slots=16384, max_requests=64,
                max_context_len=min(getattr(cfg, "max_position_embeddings", 4096), 4096),
                dtype=model.dtype, device=model.device, kv_layers=kv_layers(model.config))
    fields = {**base, **overrides}
    fields.setdefault("groups", state_groups(model.config, fields["max_requests"]))  # recurrent models' snapshots
    return CacheConfig(**fields)


def kv_layers(config: Any) -> tuple[int, ...] | None:
    """The decoder layers with attention in a model's config, when some have none (a hybrid model's
    recurrent-only layers: the pool allocates no KV for them); None when every layer has attention."""
    layers = tuple(sorted({i for g in layer_groups(config) if g.kind != "recurrent" for i in g.layers}))
    return None if len(layers) == config.get_text_config(decoder=True).num_hidden_layers else layers


def check_layout(model: PreTrainedModel, cache: RadixCache, max_batch_tokens: int) -> None:
    """ConfigError unless `cache` holds `model`'s KV: layers, heads, head_dim, every attention layer,
    and positions up to the model's limit."""
    for name, want in model_layout(model).items():
        got = getattr(cache.config, name)
        if got != want:
            raise ConfigError(f"cache_config.{name} = {got} but the model has {want}")
    needed = kv_layers(model.config)
    missing = sorted(set(range(cache.config.num_layers) if needed is None else needed)
                     - set(cache.kv_pool.kv_layers))
    if missing:
        raise ConfigError(f"cache_config.kv_layers leaves out attention layers {missing} of the model")
    check_position_limit(model.config, max(cache.config.max_context_len, max_batch_tokens),
                         type(model).__name__)
