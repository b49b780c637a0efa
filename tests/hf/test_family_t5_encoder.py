"""``build DIR`` on T5 checkpoints saved by transformers (``recipes/hf/t5_encoder.yaml``): a ``T5EncoderModel`` and a
whole ``T5ForConditionalGeneration`` (its decoder ignored), the last_hidden_state against transformers' within
1e-4 on sequences long enough to reach the logarithmic buckets and the max_distance clamp of the relative position
bias the recipe computes in forward (T5's own 32 buckets up to 128 hit the bucket edges at distances 16, 32 and 64
exactly). Gated-GELU (Flan-T5) is refused by the family and built from the recipe file with
ff_block=T5DenseGatedActDense."""
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError
from helpers.hf_checkpoints import save_tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "hf" / "t5_encoder.yaml"
SMALL = dict(vocab_size=64, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=4)


def _check(model, hf, shapes):
    """``model``'s forward within 1e-4 of ``hf``'s last_hidden_state on random ids of each shape."""
    rng = np.random.default_rng(1)
    for shape in shapes:
        ids = rng.integers(0, 64, shape, dtype=np.int64)
        with torch.no_grad():
            ref = hf(torch.from_numpy(ids)).last_hidden_state.numpy()
        np.testing.assert_allclose(model["forward"](ids), ref, atol=1e-4, rtol=0)


def test_t5_encoder_model_matches_transformers(tmp_path):
    # 8 buckets, max_distance 20: exact below 2, logarithmic up to 20, clamped past it within 27 tokens
    hf = save_tiny(tmp_path, "T5Config", "T5EncoderModel", seed=7, **SMALL, relative_attention_num_buckets=8,
                   relative_attention_max_distance=20)
    m = builder.build(tmp_path)
    _check(m, hf, [(1, 5), (2, 27)])
    table = hf.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.detach().numpy()
    np.testing.assert_array_equal(m.params["relative_attention_bias.weight"], table)


def test_t5_encoder_of_a_whole_t5_checkpoint(tmp_path):
    hf = save_tiny(tmp_path, "T5Config", "T5ForConditionalGeneration", seed=8, **SMALL)
    _check(builder.build(tmp_path), hf.get_encoder(), [(1, 150)])


def test_t5_gated_gelu_from_the_recipe_file(tmp_path):
    hf = save_tiny(tmp_path, "T5Config", "T5ForConditionalGeneration", seed=9, **SMALL,
                   feed_forward_proj="gated-gelu")
    with pytest.raises(HFCheckpointError, match=r"feed_forward_proj = \"gated-gelu\""):
        builder.build(tmp_path)
    m = builder.build(RECIPE, [f"{k}={v}" for k, v in SMALL.items()] + ["ff_block=T5DenseGatedActDense"],
                      weights=tmp_path / "model.safetensors")
    _check(m, hf.get_encoder(), [(2, 150)])
