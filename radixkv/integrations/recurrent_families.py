"""Which model families with recurrent layers the Engine serves, and the cache they need: checked
before any model runs (integrations/recurrent.py serves them; model_cache.py sizes their cache)."""

from __future__ import annotations

from typing import Any

from radixkv.config import GroupSpec
from radixkv.errors import UnsupportedModelError
from radixkv.integrations.layer_groups import layer_groups
from radixkv.integrations.recurrent_scan import CONTINUED_SCANS

# "hybrid" layers (attention beside a recurrent mixer) are served for these families only: others that
# declare them add what the attention function does not compute (Inkling: a relative-position bias and
# other head shapes for sliding layers; Zamba: attention blocks shared across layers)
HYBRID_FAMILIES = frozenset({"falcon_h1"})
# Models with recurrent layers are served for these families only: each is checked token for token
# against model.generate, with prefix reuse, in tests/test_recurrent_engine.py. Another family's mixer
# may keep its state in a cache of its own (MiniMax) or the model may have no attention at all
# (Mamba 2): refused by name rather than risk a wrong answer.
RECURRENT_FAMILIES = frozenset({"jamba", "falcon_h1", "qwen3_next", "lfm2", "lfm3", "bamba", "granitemoehybrid"})
# model_type -> its recurrent mixers continue a cached state over several tokens in one forward
# (Jamba's through recurrent_scan.continued_scan)
RESUMES_CHUNKS = (frozenset({"falcon_h1", "qwen3_next", "lfm2", "lfm3", "bamba", "granitemoehybrid"})
                  | frozenset(CONTINUED_SCANS))
DEFAULT_SNAPSHOTS = 4  # default state group: this many snapshot slots per request row


def check_family(config: Any, model_name: str) -> None:
    """UnsupportedModelError unless a model with recurrent layers is of a family served exactly
    (RECURRENT_FAMILIES; 'hybrid' layers: HYBRID_FAMILIES). A model without recurrent layers passes."""
    config = config.get_text_config(decoder=True)
    groups = [g for g in layer_groups(config) if g.kind == "recurrent"]
    hybrid = [i for g in groups if g.mixer == "hybrid" for i in g.layers]
    model_type = str(getattr(config, "model_type", ""))
    if hybrid and model_type not in HYBRID_FAMILIES:
        raise UnsupportedModelError(f"{model_name}: 'hybrid' layers {hybrid} (attention beside a recurrent mixer) are "
                                    f"served exactly for {sorted(HYBRID_FAMILIES)} only; {model_type!r} is not one")
    if groups and model_type not in RECURRENT_FAMILIES:
        layers = sorted(i for g in groups for i in g.layers)
        raise UnsupportedModelError(f"{model_name}: recurrent layers {layers} ({sorted({g.mixer for g in groups})}) "
                                    f"are served exactly for {sorted(RECURRENT_FAMILIES)} only (each checked against "
                                    f"model.generate); {model_type!r} is not one")


def state_groups(config: Any, max_requests: int) -> tuple[GroupSpec, ...]:
    """The secondary group a model's cache needs for its recurrent-state snapshots (DEFAULT_SNAPSHOTS
    slots per request row), or () for a model without recurrent layers."""
    if not any(g.kind == "recurrent" for g in layer_groups(config)):
        return ()
    return (GroupSpec("state", DEFAULT_SNAPSHOTS * max_requests),)
