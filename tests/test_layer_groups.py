"""layer_groups: every layer kind transformers defines is either served exactly or refused by name.

The layer kinds come from the installed transformers itself: its ALLOWED_ATTN_LAYER_TYPES, its legacy
remap, and every string literal on a `layer_types` line of its configuration files, so a kind added by
a transformers upgrade is tested (and refused unless served) without editing this file."""

from __future__ import annotations

import pathlib
import re
import types

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import configuration_utils  # noqa: E402

from radixkv import UnsupportedModelError  # noqa: E402
from radixkv.integrations.layer_groups import LayerGroup, check_served, layer_groups  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402

# What the Engine serves exactly, written out here rather than read from the module under test.
SERVED = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
          "linear_attention": "recurrent", "mamba": "recurrent", "hybrid": "full + recurrent", "conv": "recurrent"}


def _transformers_layer_kinds() -> list[str]:
    root = pathlib.Path(transformers.__file__).parent / "models"
    found = set(configuration_utils.ALLOWED_ATTN_LAYER_TYPES) | set(configuration_utils._LEGACY_LAYER_TYPE_REMAP)
    for path in root.glob("*/configuration_*.py"):
        for line in path.read_text().splitlines():
            if "layer_types" in line:
                found |= set(re.findall(r'"([a-z_]+)"', line)) - {"layer_types"}
    return sorted(found)


KINDS = _transformers_layer_kinds()


def _config(kinds: list[str], **fields: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(model_type="test", num_hidden_layers=len(kinds), layer_types=kinds,
                                 sliding_window=8, attention_chunk_size=16, **fields)


def test_the_grep_found_the_kinds_we_know() -> None:
    assert {"full_attention", "sliding_attention", "chunked_attention", "linear_attention", "hybrid", "conv",
            "mamba", "indexed_attention"} <= set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_every_transformers_layer_kind_is_served_or_refused_by_name(kind: str) -> None:
    config = _config(["full_attention", kind, kind, "full_attention"])
    if kind in SERVED:
        groups = layer_groups(config)
        check_served(groups)
        assert sorted({i for g in groups for i in g.layers}) == [0, 1, 2, 3]
        return
    with pytest.raises(UnsupportedModelError) as err:
        check_served(layer_groups(config))
    message = str(err.value)
    assert "[1, 2]" in message, message  # names the layers
    named = {kind, configuration_utils._LEGACY_LAYER_TYPE_REMAP.get(kind, kind), kind.split("_")[0]}
    assert any(repr(n) in message or f"{n} attention" in message for n in named), message  # and the kind


def _groups(config: object) -> dict[tuple[str, int, int, str], tuple[int, ...]]:
    return {(g.kind, g.window, g.chunk, g.mixer): g.layers for g in layer_groups(config)}


def test_real_configs_with_layer_types() -> None:
    gemma2 = transformers.Gemma2Config(num_hidden_layers=4, sliding_window=32)
    assert _groups(gemma2) == {("sliding", 32, 0, ""): (0, 2), ("full", 0, 0, ""): (1, 3)}
    gemma3 = transformers.Gemma3TextConfig(num_hidden_layers=7, sliding_window=32)
    assert _groups(gemma3) == {("sliding", 32, 0, ""): (0, 1, 2, 3, 4, 6), ("full", 0, 0, ""): (5,)}
    llama4 = transformers.Llama4TextConfig(num_hidden_layers=4, attention_chunk_size=16)
    chunked = tuple(i for i, r in enumerate(llama4.no_rope_layers) if r)  # Llama 4: RoPE layers are chunked
    assert _groups(llama4) == {("chunked", 0, 16, ""): chunked, ("full", 0, 0, ""): (3,)}
    jamba = transformers.JambaConfig(num_hidden_layers=8, attn_layer_period=4, attn_layer_offset=1)
    attn = tuple(i for i in range(8) if i % 4 == 1)
    assert _groups(jamba) == {("full", 0, 0, ""): attn,
                              ("recurrent", 0, 0, "linear_attention"): tuple(i for i in range(8) if i not in attn)}
    falcon_h1 = transformers.FalconH1Config(num_hidden_layers=3)  # mamba and attention side by side in each layer
    assert _groups(falcon_h1) == {("full", 0, 0, ""): (0, 1, 2), ("recurrent", 0, 0, "hybrid"): (0, 1, 2)}


def test_configs_without_layer_types() -> None:
    mistral = transformers.MistralConfig(num_hidden_layers=3, sliding_window=24)
    assert _groups(mistral) == {("sliding", 24, 0, ""): (0, 1, 2)}
    assert (_groups(transformers.MistralConfig(num_hidden_layers=3, sliding_window=None))
            == {("full", 0, 0, ""): (0, 1, 2)})
    qwen2 = transformers.Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=8,
                                     max_window_layers=2)
    assert _groups(qwen2) == {("full", 0, 0, ""): (0, 1), ("sliding", 8, 0, ""): (2, 3)}
    off = transformers.Qwen2Config(num_hidden_layers=4, use_sliding_window=False, sliding_window=8)
    assert _groups(off) == {("full", 0, 0, ""): (0, 1, 2, 3)}
    bare = types.SimpleNamespace  # configs as older checkpoints or other libraries write them
    llama4 = bare(num_hidden_layers=4, attention_chunk_size=16, no_rope_layers=[1, 1, 0, 1])
    assert _groups(llama4) == {("chunked", 0, 16, ""): (0, 1, 3), ("full", 0, 0, ""): (2,)}
    jamba = bare(num_hidden_layers=6, attn_layer_period=3, attn_layer_offset=2)
    assert _groups(jamba) == {("recurrent", 0, 0, "linear_attention"): (0, 1, 3, 4), ("full", 0, 0, ""): (2, 5)}
    blocks = bare(num_hidden_layers=3, layers_block_type=["mamba", "attention", "mamba"])
    assert _groups(blocks) == {("recurrent", 0, 0, "linear_attention"): (0, 2), ("full", 0, 0, ""): (1,)}
    lfm2 = bare(num_hidden_layers=3, full_attn_idxs=[1])
    assert _groups(lfm2) == {("recurrent", 0, 0, "conv"): (0, 2), ("full", 0, 0, ""): (1,)}
    mamba = bare(num_hidden_layers=2, state_size=16)  # pure SSM: no layer split, every layer recurrent
    assert _groups(mamba) == {("recurrent", 0, 0, "linear_attention"): (0, 1)}
    assert _groups(bare(num_hidden_layers=2)) == {("full", 0, 0, ""): (0, 1)}


@pytest.mark.parametrize("config", [
    types.SimpleNamespace(model_type="t", num_hidden_layers=2, layer_types=["sliding_attention"] * 2, sliding_window=0),
    types.SimpleNamespace(model_type="t", num_hidden_layers=3, layer_types=["full_attention"] * 2),
    types.SimpleNamespace(model_type="t", num_hidden_layers=2, use_bidirectional_attention=True),
])
def test_inconsistent_or_non_causal_configs_are_refused(config: object) -> None:
    with pytest.raises(UnsupportedModelError):
        layer_groups(config)


def test_check_served_names_the_first_unserved_group() -> None:
    check_served([LayerGroup("full", (0, 1))])
    with pytest.raises(UnsupportedModelError, match=r"recurrent mixer 'hybrid_sliding' in layers \[1\]"):
        check_served([LayerGroup("full", (0,)), LayerGroup("recurrent", (1,), mixer="hybrid_sliding")], "Inkling")


def test_engine_refuses_an_unserved_recurrent_mixer_before_touching_a_cache() -> None:
    torch.manual_seed(0)
    config = transformers.InklingTextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                            swa_num_attention_heads=2, swa_num_key_value_heads=1, swa_head_dim=16,
                                            moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
                                            n_shared_experts=1, local_layer_ids=[0])
    model = transformers.AutoModelForCausalLM.from_config(config)  # "hybrid_sliding": not served
    with pytest.raises(UnsupportedModelError, match=r"'hybrid_sliding' in layers \[0\]"):
        Engine(model, num_slots=64)
