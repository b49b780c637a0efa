"""``recipes/hf/t5_encoder.yaml`` on T5 checkpoints saved by transformers: a ``T5EncoderModel`` (ReLU and gated-GELU
feed-forward) and a whole ``T5ForConditionalGeneration`` (its decoder ignored), loaded as saved; the
last_hidden_state against transformers' within 1e-4, on sequences long enough to reach the logarithmic buckets and
the max_distance clamp of the relative position bias computed in the recipe's forward."""
from pathlib import Path

import numpy as np
import pytest

import builder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "hf" / "t5_encoder.yaml"


def _saved_t5(folder, model_cls: str, **fields):
    """A seeded 2-layer T5 model of ``model_cls``, every parameter nudged off its init, saved; returns its encoder."""
    torch.manual_seed(7)
    cfg = transformers.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=4, **fields,
                                attn_implementation="eager")
    hf = getattr(transformers, model_cls)(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(str(folder))
    return hf.get_encoder() if model_cls == "T5ForConditionalGeneration" else hf


def _check(folder, hf, overrides, shapes):
    """The recipe built on ``folder``'s weights: last_hidden_state within 1e-4 of ``hf``'s on each shape of ids."""
    model = builder.build(RECIPE, ["vocab_size=64", "d_model=16", "d_kv=4", "d_ff=24", "num_layers=2",
                                   "num_heads=4", *overrides], weights=folder / "model.safetensors")
    rng = np.random.default_rng(1)
    for shape in shapes:
        ids = rng.integers(0, 64, shape, dtype=np.int64)
        with torch.no_grad():
            ref = hf(torch.from_numpy(ids)).last_hidden_state.numpy()
        np.testing.assert_allclose(model["forward"](ids), ref, atol=1e-4, rtol=0)
    return model


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
def test_t5_encoder_matches_transformers(tmp_path, ff):
    # 8 buckets, max_distance 20: exact below 2, logarithmic to 20, clamped past it within 27 tokens
    hf = _saved_t5(tmp_path, "T5EncoderModel", feed_forward_proj=ff, relative_attention_num_buckets=8,
                   relative_attention_max_distance=20)
    block = ["ff_block=T5DenseGatedActDense"] if ff == "gated-gelu" else []
    model = _check(tmp_path, hf, ["num_buckets=8", "max_distance=20", *block], [(1, 5), (2, 27)])
    table = hf.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.detach().numpy()
    np.testing.assert_array_equal(model.params["relative_attention_bias.weight"], table)


def test_t5_encoder_of_a_whole_t5_checkpoint(tmp_path):
    # T5's own 32 buckets up to 128 (bucket edges at distances 16, 32, 64 hit exactly), the decoder's tensors ignored
    hf = _saved_t5(tmp_path, "T5ForConditionalGeneration", feed_forward_proj="gated-gelu")
    _check(tmp_path, hf, ["ff_block=T5DenseGatedActDense"], [(1, 150)])
