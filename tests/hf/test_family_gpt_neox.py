"""``build DIR`` on a GPT-NeoX checkpoint saved by transformers (``GPTNeoXForCausalLM``, ``recipes/hf/gpt_neox.yaml``):
the per-head fused query_key_value reordered and split by weights.transforms, RoPE on a quarter of each head, the
parallel residual; compared with transformers (logits on two shapes, 16 greedy tokens over prefill + decode,
chunked prefill: tests/helpers/hf_checkpoints.py). The sequential residual (use_parallel_residual false) chooses
decoder_layer=GPTNeoXLayer through the family's value map, and a rotary fraction of 0.5 gives the recipe's rotary_dim
int(head_dim * 0.5); both compared with transformers. A fraction whose rotary_dim is not whole is refused."""
import json
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError
from helpers.hf_checkpoints import check_causal_lm, save_tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "hf" / "gpt_neox.yaml"
SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             pad_token_id=0, bos_token_id=0, eos_token_id=0,
             rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.25})


def test_gpt_neox_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "GPTNeoXConfig", "GPTNeoXForCausalLM", seed=5, **SMALL)
    m = check_causal_lm(tmp_path, hf, 128)
    # head 1's k rows are rows [1, 1, :] of the file's [heads, 3, head_dim] query_key_value
    qkv = hf.gpt_neox.layers[0].attention.query_key_value.weight.detach().numpy().reshape(4, 3, 16, 64)
    np.testing.assert_array_equal(m.params["gpt_neox.layers.0.attention.k_proj.weight"][16:32], qkv[1, 1])


def test_gpt_neox_sequential_residual_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "GPTNeoXConfig", "GPTNeoXForCausalLM", seed=16, use_parallel_residual=False, **SMALL)
    check_causal_lm(tmp_path, hf, 128)
    # the same layer from the recipe file, decoder_layer given by hand
    m = builder.build(RECIPE, ["vocab_size=128", "hidden_size=64", "intermediate_size=48", "num_layers=2",
                               "num_heads=4", "rope_theta=500.0", "decoder_layer=GPTNeoXLayer"],
                      weights=tmp_path / "model.safetensors")
    ids = np.random.default_rng(2).integers(0, 128, (2, 9), dtype=np.int64)
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(m["forward"](ids), ref, atol=1e-4, rtol=0)


def test_gpt_neox_rotary_fraction_half_matches_transformers(tmp_path):
    rope = {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}
    hf = save_tiny(tmp_path, "GPTNeoXConfig", "GPTNeoXForCausalLM", seed=7, **{**SMALL, "rope_parameters": rope})
    check_causal_lm(tmp_path, hf, 128)
    # not the quarter's model: a quarter's rotary_dim gives other logits
    ids = np.random.default_rng(4).integers(0, 128, (1, 9), dtype=np.int64)
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)).logits.numpy()
    quarter = builder.build(tmp_path, ["rotary_dim=4"])["forward"](ids)
    assert np.abs(quarter - ref).max() > 1e-3


def test_gpt_neox_rotary_fraction_not_whole_is_refused(tmp_path):
    rope = {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.3}   # 16 * 0.3 = 4.8
    save_tiny(tmp_path, "GPTNeoXConfig", "GPTNeoXForCausalLM", **{**SMALL, "rope_parameters": rope})
    with pytest.raises(Exception, match=r"int\(\.\.\.\) of 4\.8.*not an integer"):
        builder.build(tmp_path)


def test_gpt_neox_transformers_4_config(tmp_path):
    """A transformers 4.x config (rotary_pct and rotary_emb_base at the top, rope_scaling null) builds the same
    model: its logits equal transformers'."""
    hf = save_tiny(tmp_path, "GPTNeoXConfig", "GPTNeoXForCausalLM", seed=4, **SMALL)
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["rope_parameters"]
    cfg.update(rotary_pct=0.25, rotary_emb_base=500.0, rope_scaling=None)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ids = np.random.default_rng(3).integers(0, 128, (1, 7), dtype=np.int64)
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(builder.build(tmp_path)["forward"](ids), ref, atol=1e-4, rtol=0)
    cfg["use_parallel_residual"] = "yes"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFCheckpointError, match=r'use_parallel_residual = "yes" is not supported \(known values: '
                                                r'true, false\)'):
        builder.build(tmp_path)
