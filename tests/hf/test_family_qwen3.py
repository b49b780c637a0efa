"""``build DIR`` on a Qwen3 checkpoint saved by transformers (``Qwen3ForCausalLM``, ``recipes/hf/qwen3.yaml``): q_norm /
k_norm over each head, head_dim from the config (not hidden_size // heads), tied or untied lm_head; compared with
transformers (logits on two shapes, 16 greedy tokens over prefill + decode, chunked prefill:
tests/helpers/hf_checkpoints.py). A sliding window is refused naming the field."""
import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError
from helpers.hf_checkpoints import check_causal_lm, save_tiny

pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=0, eos_token_id=0,
             rope_parameters={"rope_type": "default", "rope_theta": 500.0})


@pytest.mark.parametrize("tied", [False, True])
def test_qwen3_matches_transformers(tmp_path, tied):
    hf = save_tiny(tmp_path, "Qwen3Config", "Qwen3ForCausalLM", seed=3, tie_word_embeddings=tied, **SMALL)
    m = check_causal_lm(tmp_path, hf, 128)
    q_norm = hf.model.layers[1].self_attn.q_norm.weight.detach().numpy()
    np.testing.assert_array_equal(m.params["model.layers.1.self_attn.q_norm.weight"], q_norm)
    assert m.params["model.layers.0.self_attn.k_proj.weight"].shape == (32, 32)   # 2 KV heads of head_dim 16


def test_qwen3_sliding_window_is_refused_naming_the_field(tmp_path):
    save_tiny(tmp_path, "Qwen3Config", "Qwen3ForCausalLM", **SMALL, use_sliding_window=True, sliding_window=4)
    with pytest.raises(HFCheckpointError, match=r"use_sliding_window = true"):
        builder.build(tmp_path)
