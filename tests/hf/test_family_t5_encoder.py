"""``build DIR`` on T5 checkpoints saved by transformers (``recipes/hf/t5_encoder.yaml``): a ``T5EncoderModel`` and a
whole ``T5ForConditionalGeneration`` (its decoder ignored), the last_hidden_state against transformers' within
1e-4 on sequences long enough to reach the logarithmic buckets and the max_distance clamp of the relative position
bias the recipe computes in forward (T5's own 32 buckets up to 128 hit the bucket edges at distances 16, 32 and 64
exactly). Gated-GELU (T5 v1.1 / Flan-T5: feed_forward_proj gated-gelu) chooses ff_block=T5DenseGatedActDense through
the family's value map, matched against transformers too; a feed_forward_proj the map lacks is refused by name."""
import json
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError
from helpers.hf_checkpoints import save_tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

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


def test_t5_gated_gelu_checkpoint_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "T5Config", "T5ForConditionalGeneration", seed=9, **SMALL,
                   feed_forward_proj="gated-gelu")
    m = builder.build(tmp_path)
    assert "block.0.mlp.wi_1.weight" in m.params   # the gated block, its two input projections read as saved
    _check(m, hf.get_encoder(), [(2, 150)])
    # the same from the recipe file, ff_block given by hand
    m = builder.build(RECIPE, [f"{k}={v}" for k, v in SMALL.items()] + ["ff_block=T5DenseGatedActDense"],
                      weights=tmp_path / "model.safetensors")
    _check(m, hf.get_encoder(), [(1, 20)])


def test_t5_feed_forward_proj_outside_the_value_map_is_refused(tmp_path):
    save_tiny(tmp_path, "T5Config", "T5EncoderModel", **SMALL)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["feed_forward_proj"] = "gated-silu"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFCheckpointError, match=r'feed_forward_proj = "gated-silu" is not supported \(known values: '
                                                r'"relu", "gated-gelu"\)'):
        builder.build(tmp_path)
    # a saved is_gated_act wins over feed_forward_proj in transformers: one that disagrees is refused
    cfg.update(feed_forward_proj="relu", is_gated_act=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFCheckpointError, match=r"is_gated_act = true: .* accepts false with feed_forward_proj = "
                                                r'"relu"'):
        builder.build(tmp_path)
