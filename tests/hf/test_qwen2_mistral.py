"""``build DIR`` on Qwen2 (q / k / v biases, o_proj without; tied embeddings as Qwen2.5's small models) and
Mistral checkpoints (a sliding window that never slides) saved by transformers, against transformers' own models
(tests/helpers/hf_checkpoints.py: logits on two shapes, 16 greedy tokens, chunked prefill)."""
import pytest

from helpers.hf_checkpoints import check_causal_lm, save_tiny

pytest.importorskip("transformers")

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
