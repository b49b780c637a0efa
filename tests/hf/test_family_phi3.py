"""``build DIR`` on a Phi-3 checkpoint saved by transformers (``Phi3ForCausalLM``, ``recipes/hf/phi3.yaml``): q, k
and v fused in one qkv_proj, gate and up in one gate_up_proj, split by the recipe's weights.transforms; compared
with transformers (logits on two shapes, 16 greedy tokens over prefill + decode, chunked prefill:
tests/helpers/hf_checkpoints.py), also with a sliding window that slides. The longrope scaling of the 128k models is
refused naming the field."""
import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError, resolve_checkpoint, weight_names
from helpers.hf_checkpoints import check_causal_lm, save_tiny

pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-5, pad_token_id=0, bos_token_id=0, eos_token_id=0)


def test_phi3_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "Phi3Config", "Phi3ForCausalLM", seed=14, **SMALL,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    m = check_causal_lm(tmp_path, hf, 128)
    qkv = hf.model.layers[0].self_attn.qkv_proj.weight.detach().numpy()
    np.testing.assert_array_equal(m.params["model.layers.0.self_attn.k_proj.weight"], qkv[32:48])   # 2 KV heads of 8
    up = hf.model.layers[1].mlp.gate_up_proj.weight.detach().numpy()[48:]
    np.testing.assert_array_equal(m.params["model.layers.1.mlp.up_proj.weight"], up)       # the second half


def test_phi3_longrope_is_refused_naming_the_field(tmp_path):
    rope = {"rope_type": "longrope", "rope_theta": 500.0, "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
            "original_max_position_embeddings": 32}
    save_tiny(tmp_path, "Phi3Config", "Phi3ForCausalLM", **SMALL, max_position_embeddings=128,
              original_max_position_embeddings=32, rope_parameters=rope)
    with pytest.raises(HFCheckpointError, match=r'rope_parameters.rope_type = "longrope" is not supported'):
        builder.build(tmp_path)


def test_phi3_sliding_window_matches_transformers(tmp_path):
    """Phi-3-mini-4k's sliding_window (2047 of 4096) as a small window of 3 that slides in forward, in decoding
    (against HF's uncached forward: tests/helpers/hf_checkpoints.py) and across a chunked prefill."""
    hf = save_tiny(tmp_path, "Phi3Config", "Phi3ForCausalLM", seed=15, **SMALL, sliding_window=3,
                   max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    m = check_causal_lm(tmp_path, hf, 128, shapes=((1, 7), (2, 11)), uncached=True)
    ids = np.arange(11, dtype=np.int64)[None]
    full = builder.build(tmp_path, ["sliding_window=null"])["forward"](ids)
    assert np.abs(m["forward"](ids) - full).max() > 1e-3   # the window is used


def test_a_tied_phi3_reads_its_embedding(tmp_path):
    """tie_word_embeddings true (no lm_head.weight saved): the shared tie rule's entry merged over the recipe's
    map, the fused-weight transforms kept."""
    hf = save_tiny(tmp_path, "Phi3Config", "Phi3ForCausalLM", seed=18, **SMALL, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    assert "lm_head.weight" not in weight_names(tmp_path / "model.safetensors")
    assert 'weights.map={"lm_head.weight": "model.embed_tokens.weight"}' in resolve_checkpoint(tmp_path).overrides
    m = builder.build(tmp_path)
    ids = np.random.default_rng(4).integers(0, 128, (1, 6))
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        np.testing.assert_allclose(m["forward"](ids), hf(torch.from_numpy(ids)).logits.numpy(), rtol=0, atol=1e-4)
