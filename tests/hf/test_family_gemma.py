"""``build DIR`` on a Gemma checkpoint saved by transformers (``GemmaForCausalLM``, ``recipes/hf/gemma.yaml``):
RMSNorm weights stored as offsets from 1, the embedding scaled by sqrt(hidden_size), head_dim 16 with hidden 32 /
4 heads, no lm_head.weight (tied); compared with transformers (logits on two shapes, 16 greedy tokens over
prefill + decode, chunked prefill: tests/helpers/hf_checkpoints.py); an untied one reads its lm_head.weight."""
import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError
from helpers.hf_checkpoints import check_causal_lm, save_tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=0, eos_token_id=0)


def test_gemma_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "GemmaConfig", "GemmaForCausalLM", seed=13, **SMALL,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    m = check_causal_lm(tmp_path, hf, 128)
    assert m.params["model.layers.0.self_attn.q_proj.weight"].shape == (64, 32)     # 4 heads x head_dim 16
    assert "lm_head.weight" in m.params


def test_gemma_rope_scaling_is_refused(tmp_path):
    save_tiny(tmp_path, "GemmaConfig", "GemmaForCausalLM", **SMALL,
              rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0})
    with pytest.raises(HFCheckpointError, match=r'rope_parameters.rope_type = "linear" is not supported'):
        builder.build(tmp_path)


def test_an_untied_gemma_reads_its_lm_head(tmp_path):
    """tie_word_embeddings false: the family's lm_head_weight=lm_head.weight, no tie entry merged over it."""
    hf = save_tiny(tmp_path, "GemmaConfig", "GemmaForCausalLM", seed=17, **SMALL, tie_word_embeddings=False,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    m = builder.build(tmp_path)
    np.testing.assert_array_equal(m.params["lm_head.weight"], hf.lm_head.weight.detach().numpy())
    ids = np.random.default_rng(3).integers(0, 128, (1, 6))
    with torch.no_grad():
        np.testing.assert_allclose(m["forward"](ids), hf(torch.from_numpy(ids)).logits.numpy(), rtol=0, atol=1e-4)
