"""CacheConfig: one frozen dataclass, validated once; the parts below it receive plain scalars."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixkv.errors import ConfigError
from radixkv.events.hashing import EVENT_HASHES
from radixkv.eviction import POLICIES

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
GROUP_KINDS = ("window", "chunk", "state")
KV_GROUP_KINDS = ("window", "chunk")  # kinds that keep KV per page of positions in a pool of their own


@dataclass(frozen=True)
class GroupSpec:
    """A secondary layer group (radixkv/cache_groups.py): its own pool, priced on its own.

    kind "window": sliding-window KV of `layers` (window `size`, transformers' sliding_window), in a
    pool of `num_slots` token slots (a multiple of page_size), one window page per page of positions.
    kind "chunk": chunked-attention KV (`size` = attention_chunk_size, Llama 4), kept like a window's
    but only for the current chunk (radix/windows.py).
    kind "state": recurrent-state snapshots, `num_slots` snapshot slots (one per snapshot); the
    state tensors live with their owner (radixkv/integrations), the cache keeps the slot ids."""

    kind: str
    num_slots: int
    size: int = 0  # window: W tokens a query sees, itself included; chunk: C; state: 0
    layers: tuple[int, ...] = ()  # window, chunk: layers whose KV lives in this pool; state: ()

    def __post_init__(self) -> None:
        if self.kind not in GROUP_KINDS:
            raise ConfigError(f"GroupSpec.kind must be one of {GROUP_KINDS}, got {self.kind!r:.40}")
        for name in ("num_slots", "size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (name == "num_slots"):
                raise ConfigError(f"GroupSpec.{name} must be a {'positive' if name == 'num_slots' else 'non-negative'} "
                                  f"int, got {value!r:.40}")
        if not isinstance(self.layers, tuple) or not all(type(i) is int and i >= 0 for i in self.layers):
            raise ConfigError(f"GroupSpec.layers must be a tuple of layer indices, got {self.layers!r:.60}")
        if (self.kind in KV_GROUP_KINDS) != (self.size > 0 and bool(self.layers)):
            raise ConfigError(f"GroupSpec: a window or chunk group needs size > 0 and layers; a state group neither "
                              f"(got kind {self.kind!r}, size {self.size}, layers {self.layers})")


@dataclass(frozen=True)
class CacheConfig:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_slots: int  # token slots in the device pool; a multiple of page_size
    page_size: int = 1  # tokens per page; matching, insertion and eviction are page-granular
    max_requests: int = 64  # rows of req_to_token: how many Sequences may be open at once
    max_context_len: int = 4096  # columns of req_to_token: the longest Sequence
    dtype: torch.dtype = torch.float16
    device: str | torch.device = "cpu"
    # A name in radixkv.eviction.POLICIES. "adaptive" follows whichever of LRU and LFU a shadow cache
    # shows winning on the live traffic (eviction/adaptive.py; margins in bench/RESULTS.md).
    eviction: str = "adaptive"
    # Most tokens pinned at once (cache.pin, pin_ttl=). None: half the pool (pins must leave room to
    # serve requests); 0 turns pinning off. Pins cost nothing until the first one.
    pin_budget_tokens: int | None = None
    host_slots: int = 0  # token slots of the host-memory tier; 0 turns it off
    host_write_policy: str = "write_through"  # or "write_back": copy to host at device eviction
    kv_events: bool = False  # record BlockStored/BlockRemoved for take_events(); off costs nothing
    event_block_size: int = 16  # tokens per KV-event block (vLLM's default block size), any page_size
    # How KV events name blocks (radixkv.events.hashing): "xxh3" (radixkv's chain, the cheapest), or
    # vLLM's own "sha256_cbor" / "xxhash_cbor", so routers that hash prompts like vLLM find our blocks.
    event_hash: str = "xxh3"
    # Secondary layer groups (GroupSpec): window KV and state snapshots in pools of their own; group g
    # is groups[g - 1] (group 0 is full KV, this config's num_slots). () : every layer keeps full KV.
    groups: tuple[GroupSpec, ...] = ()
    # Decoder layers that hold KV, ascending (None: all num_layers). A hybrid model's recurrent-only
    # layers (Jamba's Mamba, Qwen3-Next's gated delta net) hold none: the pool allocates no buffer for them.
    kv_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "num_slots", "page_size",
                     "max_requests", "max_context_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"CacheConfig.{name} must be a positive int, got {value!r}")
        for name in (("host_slots", "event_block_size")
                     + (("pin_budget_tokens",) if self.pin_budget_tokens is not None else ())):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (name == "event_block_size"):
                raise ConfigError(f"CacheConfig.{name} must be a non-negative int, got {value!r}")
        if self.pin_budget > self.num_slots:
            raise ConfigError(f"CacheConfig.pin_budget_tokens ({self.pin_budget_tokens}) cannot exceed "
                              f"num_slots ({self.num_slots})")
        if self.host_slots % self.page_size:
            raise ConfigError(f"CacheConfig.host_slots ({self.host_slots}) must be a multiple of page_size")
        if self.host_write_policy not in ("write_through", "write_back"):
            raise ConfigError(f"CacheConfig.host_write_policy must be 'write_through' or 'write_back', "
                              f"got {self.host_write_policy!r}")
        if self.num_slots % self.page_size:
            raise ConfigError(
                f"CacheConfig.num_slots ({self.num_slots}) must be a multiple of page_size "
                f"({self.page_size}); "
                f"try num_slots={self.num_slots // self.page_size * self.page_size or self.page_size}")
        if not isinstance(self.dtype, torch.dtype) or self.dtype not in _FLOAT_DTYPES:
            raise ConfigError(f"CacheConfig.dtype must be a float dtype, got {self.dtype!r}")
        if not isinstance(self.eviction, str) or self.eviction not in POLICIES:
            raise ConfigError(f"unknown eviction policy {self.eviction!r}; choose from {sorted(POLICIES)}")
        for name in ("kv_events",):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"CacheConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.event_hash not in EVENT_HASHES:
            raise ConfigError(f"CacheConfig.event_hash must be one of {EVENT_HASHES}, got {self.event_hash!r:.60}")
        _check_device(self.device)
        if self.kv_layers is not None:
            _check_kv_layers(self.kv_layers, self.num_layers)
        self._check_groups()

    def _check_groups(self) -> None:
        if not isinstance(self.groups, tuple) or not all(isinstance(g, GroupSpec) for g in self.groups):
            raise ConfigError(f"CacheConfig.groups must be a tuple of GroupSpec, got {self.groups!r:.80}")
        layers = [i for g in self.groups for i in g.layers]
        if len(set(layers)) != len(layers) or any(i >= self.num_layers for i in layers):
            raise ConfigError(f"CacheConfig.groups: layers must be distinct and below num_layers ({self.num_layers})")
        if self.kv_layers is not None and not set(layers) <= set(self.kv_layers):
            raise ConfigError(f"CacheConfig.groups: window layers {sorted(set(layers) - set(self.kv_layers))} "
                              "hold no KV (not in kv_layers)")
        for g in self.groups:
            if g.kind in KV_GROUP_KINDS and g.num_slots % self.page_size:
                raise ConfigError(f"GroupSpec.num_slots ({g.num_slots}) of a {g.kind} group must be a multiple of "
                                  f"page_size ({self.page_size})")
        if self.groups and self.host_slots:
            raise ConfigError("CacheConfig: a host tier (host_slots) with secondary groups is not supported yet")

    @property
    def pin_budget(self) -> int:
        """pin_budget_tokens, with None resolved to half the pool."""
        return self.num_slots // 2 if self.pin_budget_tokens is None else self.pin_budget_tokens

    @property
    def group_layer_slots(self) -> dict[int, int]:
        """Layers whose KV lives in a window or chunk group's pool -> that pool's slots."""
        return {layer: g.num_slots for g in self.groups if g.kind in KV_GROUP_KINDS for layer in g.layers}

    @property
    def num_pages(self) -> int:
        return self.num_slots // self.page_size


def _check_kv_layers(layers: object, num_layers: int) -> None:
    if not (isinstance(layers, tuple) and all(type(i) is int and 0 <= i < num_layers for i in layers)
            and list(layers) == sorted(set(layers))):
        raise ConfigError(f"CacheConfig.kv_layers must be a tuple of distinct ascending layer indices in "
                          f"[0, {num_layers}), got {layers!r:.80}")


def _check_device(device: object) -> None:
    """A device torch knows and this machine has (so a typo or a missing GPU fails here, not mid-step)."""
    try:
        dev = torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError) as e:
        raise ConfigError(f"CacheConfig.device {device!r} is not a torch device: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"CacheConfig.device is {device!r} but no CUDA device is available; use device='cpu'")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"CacheConfig.device {device!r}: radixkv runs on 'cpu' or 'cuda'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"CacheConfig.device {device!r}: only {torch.cuda.device_count()} CUDA devices")
