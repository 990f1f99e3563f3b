"""Families the Engine used to accept and answer wrong, or crash on, are refused at construction with
UnsupportedModelError naming why (bench/family_sweep.py found each; bench/RESULTS.md, issue 21 sweep).
Before radixkv/integrations/model_checks.py: DiffLlama gave wrong tokens (its two attention calls per
layer overwrote each other's V in the pool); Doge (a learned additive bias per key, which the Engine
dropped: tokens matched only while the random A = 0 left the bias flat) was accepted; JetMoE, MiMo-V2-Flash,
Whisper's decoder and DeepSeek V3 (MLA)
crashed in the first forward (K/V of another shape than the pool's); Nemotron and StableLM crashed there too (their
layers drop the forward's keywords); Moshi raised mid-generate; GPT-2, OPT, BERT-style decoders and
Gemma 3's multimodal wrapper raised AttributeError; BLOOM, MPT and Falcon raised InvalidArgumentError.
Tiny random configs of each family's own config class (radixkv/testing/tiny_configs.py): CPU seconds."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from radixkv import UnsupportedModelError  # noqa: E402
from radixkv.integrations.model_checks import KNOWN_KEYWORDS, _judge  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402
from radixkv.testing.tiny_configs import tiny_model  # noqa: E402

REFUSED = {
    "diffllama": "call the attention function more than once",  # was WRONG: token 2 on
    "jetmoe": "the pool holds 2 KV heads",  # mixture of attention heads: K/V of 4 heads
    "mimo_v2_flash": "the pool holds 2 KV heads",  # sliding layers with their own head count
    "deepseek_v3": "Q/K/V heads 4/4/4 of sizes 16/16/16",  # MLA: K of nope + rope dims, head_dim says rope only
    "moshi": "passes sliding_window=None but its layer group says 8",
    "doge": "mask or bias of its own",  # a learned per-key bias; tokens matched only while random A = 0 made it flat
    "whisper": "heads 4/4/4 of sizes 16/16/16",  # config fields that do not give the decoder's KV layout
    "nemotron": "radixkv_batch never arrives",
    "stablelm": "radixkv_batch never arrives",
    "gpt2": "has no \\['num_key_value_heads'\\]",
    "opt": "has no \\['num_key_value_heads'\\]",
    "bert": "has no \\['num_key_value_heads'\\]",
    "gemma3": "serve its text model",  # Gemma3ForConditionalGeneration
    "bloom": "does not dispatch attention through",  # ALiBi
    "mpt": "does not dispatch attention through",  # ALiBi
    # Falcon dispatches through the attention interface from transformers 5.2x on, without the forward's keywords
    "falcon": "does not dispatch attention through|radixkv_batch never arrives",
}

# The rest of what the sweep refused for the same reasons, each of which the old tree accepted (MLA: then
# crashed in the first forward) or failed on with AttributeError / InvalidArgumentError.
for _t in ("bart bert-generation bigbird_pegasus biogpt blenderbot blenderbot-small camembert codegen ctrl "
           "data2vec-text electra ernie fuyu git gpt-sw3 gpt_neox gptj marian mbart modernbert-decoder "
           "moss_transcribe_diarize pegasus persimmon plbart roberta roberta-prelayernorm roc_bert xlm-roberta "
           "xlm-roberta-xl").split():
    REFUSED[_t] = "the Engine reads the KV layout from Llama-style config fields"
for _t in ("big_bird cpmant got_ocr2 gpt_neo gpt_neox_japanese megatron-bert mvp openai-gpt rembert roformer rwkv "
           "trocr xglm xlnet").split():
    REFUSED[_t] = "does not dispatch attention through"
for _t in "axk1 deepseek_v2 glm4_moe_lite longcat_flash minicpm3 sarvam_mla youtu".split():  # MLA
    REFUSED[_t] = "but the pool holds 4 KV heads of size 8"


@pytest.fixture(autouse=True)
def one_thread() -> object:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_family_is_refused_at_construction(model_type: str) -> None:
    model = tiny_model(model_type)
    with pytest.raises(UnsupportedModelError, match=REFUSED[model_type]):
        Engine(model, num_slots=64)
    if model._can_set_attn_implementation():
        assert model.config._attn_implementation != "radixkv_probe"  # the probe gave the model back as it was


@pytest.mark.parametrize("model_type", ["llama", "gemma2", "gpt_oss", "llama4_text", "jamba", "qwen3_next",
                                        "gemma3n_text"])
def test_served_families_pass_the_probe(model_type: str) -> None:
    """The probe refuses nothing the Engine serves exactly (tests/test_engine_families.py,
    tests/test_recurrent_engine.py check their tokens; bench/family_sweep.py every family's). Gemma 3n's
    KV-sharing layers pass: each receives the earlier layer's K/V of the step's tokens and stores a copy."""
    model = tiny_model(model_type)
    before = model.config._attn_implementation
    Engine(model, num_slots=64)
    assert model.config._attn_implementation == before


def _call(layer: int = 0, q=(1, 4, 3, 16), k=(1, 2, 3, 16), v=(1, 2, 3, 16), mask: bool = False, **kwargs):
    return dict(layer=layer, q=q, k=k, v=v, mask=mask, kwargs=kwargs)


LAYOUT = dict(num_layers=1, num_kv_heads=2, head_dim=16)


@pytest.mark.parametrize("call,why", [
    (_call(mask=True), "mask or bias of its own"),
    (_call(is_causal=False), "bidirectionally"),
    (_call(k=(1, 2, 5, 16), v=(1, 2, 5, 16)), "3 queries over 5 keys"),
    (_call(v=(1, 2, 3, 32)), "sizes 16/16/32"),
    (_call(sliding_window=4), "sliding_window=4"),
    (_call(position_bias=torch.zeros(1)), "\\['position_bias'\\]"),
    ({**_call(), "layer": None}, "without layer_idx"),
])
def test_probe_refuses_what_the_kernels_do_not_compute(call: dict, why: str) -> None:
    """Each check of the probe on its own (a recorded call that differs from what radixkv computes in one way)."""
    _judge("M", [_call(scaling=0.25, dropout=0.0)], [0], [(0, 0)], LAYOUT)  # the plain call passes
    with pytest.raises(UnsupportedModelError, match=why):
        _judge("M", [call], [0], [(0, 0)], LAYOUT)
    assert "position_bias" not in KNOWN_KEYWORDS
