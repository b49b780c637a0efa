"""``build DIR`` on Qwen2 (q / k / v biases, o_proj without; tied embeddings as Qwen2.5's small models) and
Mistral checkpoints (a sliding window that never slides, and ones that slide; Qwen2's per-layer windows refused) saved by transformers, against transformers' own models
(tests/helpers/hf_checkpoints.py: logits on two shapes, 16 greedy tokens, chunked prefill)."""
import json

import numpy as np
import pytest

import builder
import builder.checkpoint
from builder.checkpoint import HFCheckpointError
from helpers.hf_checkpoints import check_causal_lm, save_tiny

pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=150, hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)


def test_qwen2_tied_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "Qwen2Config", "Qwen2ForCausalLM", seed=7, **SMALL, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    assert hf.model.layers[0].self_attn.q_proj.bias is not None and hf.model.layers[0].self_attn.o_proj.bias is None
    check_causal_lm(tmp_path, hf, 150)


def test_mistral_matches_transformers(tmp_path):
    """A sliding window as long as max_position_embeddings never slides: accepted, and the model is plain
    causal attention."""
    hf = save_tiny(tmp_path, "MistralConfig", "MistralForCausalLM", seed=8, **SMALL, sliding_window=64,
                   max_position_embeddings=64)
    check_causal_lm(tmp_path, hf, 150)


@pytest.mark.parametrize("window", [3, 4])
def test_mistral_sliding_window_matches_transformers(tmp_path, window):
    """A window that slides (W keys, the query's own included: HF masking_utils) in forward on 7 and 11 tokens,
    in 16 greedy tokens decoded past it (against HF's uncached forward: see check_causal_lm), and across a
    chunked prefill."""
    hf = save_tiny(tmp_path, "MistralConfig", "MistralForCausalLM", seed=9, **SMALL, sliding_window=window,
                   max_position_embeddings=64)
    m = check_causal_lm(tmp_path, hf, 150, shapes=((1, 7), (2, 11)), uncached=True)
    assert "sliding_window=" + str(window) in builder.checkpoint.resolve_checkpoint(tmp_path).overrides
    # the window is used: as plain causal attention (a window of 64) the logits differ
    ids = np.arange(11, dtype=np.int64)[None] % 150
    full = builder.build(tmp_path, ["sliding_window=64"])["forward"](ids)
    assert np.abs(m["forward"](ids) - full).max() > 1e-3


def test_qwen2_sliding_window_layers_are_refused_naming_the_field(tmp_path):
    """use_sliding_window windows only the layers from max_window_layers on (layer_types mixes them)."""
    save_tiny(tmp_path, "Qwen2Config", "Qwen2ForCausalLM", **SMALL, use_sliding_window=True, sliding_window=4,
              max_window_layers=1)
    with pytest.raises(HFCheckpointError, match=r"use_sliding_window = true: it windows only the layers"):
        builder.build(tmp_path)


def test_qwen2_mixed_layer_types_are_refused_naming_the_field(tmp_path):
    save_tiny(tmp_path, "Qwen2Config", "Qwen2ForCausalLM", **SMALL)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["layer_types"] == ["full_attention"] * 2   # transformers 5 saves it: all full is accepted
    builder.checkpoint.resolve_checkpoint(tmp_path)
    cfg["layer_types"] = ["full_attention", "sliding_attention"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFCheckpointError, match=r'layer_types = \["full_attention", "sliding_attention"\]: every '
                                                r"layer of the recipe attends to all positions"):
        builder.build(tmp_path)
