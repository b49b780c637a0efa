"""``build DIR`` on Llama checkpoints saved by transformers (``LlamaForCausalLM``): plain, GQA with tied
embeddings, Llama 3.1's rope scaling, sharded; compared with transformers' own model (tests/hf/conftest.py)."""
import numpy as np
import pytest

import builder

from helpers.hf_checkpoints import check_causal_lm, save_tiny

pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=160, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)


def test_llama_untied_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "LlamaConfig", "LlamaForCausalLM", seed=3, **SMALL, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    check_causal_lm(tmp_path, hf, 160)


def test_llama_tied_biases_and_llama3_rope_scaling(tmp_path):
    """Tied embeddings (no lm_head.weight saved: the family's map), attention and MLP biases, head_dim 16
    (not hidden / heads), and rope_parameters of Llama 3.1: each changes the logits, so a mapping that lost
    one fails."""
    rope = {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
    hf = save_tiny(tmp_path, "LlamaConfig", "LlamaForCausalLM", seed=4, **SMALL, head_dim=16,
                   tie_word_embeddings=True, attention_bias=True, mlp_bias=True, rope_parameters=rope)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "np") as f:
        assert "lm_head.weight" not in f.keys()
    check_causal_lm(tmp_path, hf, 160)


def test_llama_sharded_checkpoint(tmp_path):
    """``save_pretrained(max_shard_size=...)``: model.safetensors.index.json and several shards."""
    hf = save_tiny(tmp_path, "LlamaConfig", "LlamaForCausalLM", seed=5, max_shard_size="20KB", **SMALL)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    check_causal_lm(tmp_path, hf, 160)


def test_llama_quantized_and_dtype_overrides(tmp_path):
    """``build DIR quantization=q4f16_1`` and ``dtype=...`` act as on a recipe: the weights are quantized while
    loaded, and the logits stay near the float model's."""
    import torch

    hf = save_tiny(tmp_path, "LlamaConfig", "LlamaForCausalLM", seed=6, **SMALL)
    m = builder.build(tmp_path, ["quantization=q4f16_1"])
    assert m.params["model.layers.1.self_attn.q_proj.q_weight"].dtype == np.uint32
    ids = np.arange(7, dtype=np.int64)[None] * 11 % 160
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)).logits.numpy()
    got = m["forward"](ids)
    err, ref = (got - ref).ravel(), ref.ravel()
    assert 0 < np.linalg.norm(err) < 0.3 * np.linalg.norm(ref)     # 4-bit weights of a tiny random model
    f16 = builder.build(tmp_path, ["dtype=float16"])
    assert f16.params["lm_head.weight"].dtype == np.float16
