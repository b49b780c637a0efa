"""``build DIR`` on ``ViTModel`` checkpoints saved by transformers (``recipes/hf/vit.yaml``), with qkv biases and
without: ``forward`` (``last_hidden_state``) and ``pooled`` (``pooler_output``) against transformers on two batch
sizes; and the recipe without its pooler (``pooler_type=ViTNoPooler``, the file's pooler ignored: ``pooled`` is
the CLS token's last hidden state); a ViTModel saved with add_pooling_layer=False chooses that pooler itself
(if_tensor: pooler.dense.weight, read from the safetensors header)."""
import numpy as np
import pytest

import builder
from helpers.hf_checkpoints import save_tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_vit_matches_transformers(tmp_path, qkv_bias):
    hf = save_tiny(tmp_path, "ViTConfig", "ViTModel", seed=15, image_size=8, patch_size=4, num_channels=3,
                   hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                   qkv_bias=qkv_bias)
    m = builder.build(tmp_path)
    bare = builder.build(tmp_path, ["pooler_type=ViTNoPooler", "weights.ignore=[pooler.*]"])
    assert ("encoder.layer.0.attention.q_proj.bias" in m.params) == qkv_bias
    assert "pooler.dense.weight" in m.params and "pooler.dense.weight" not in bare.params
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        with torch.no_grad():
            ref = hf(pixel_values=torch.from_numpy(x))
        hidden, pooled = m["forward"](x), m["pooled"](x)
        assert hidden.shape == (batch, 5, 32) and pooled.shape == (batch, 32)
        np.testing.assert_allclose(hidden, ref.last_hidden_state.numpy(), rtol=0, atol=1e-4)
        np.testing.assert_allclose(pooled, ref.pooler_output.numpy(), rtol=0, atol=1e-4)
        np.testing.assert_allclose(bare["forward"](x), ref.last_hidden_state.numpy(), rtol=0, atol=1e-4)
        np.testing.assert_allclose(bare["pooled"](x), ref.last_hidden_state[:, 0].numpy(), rtol=0, atol=1e-4)


def test_vit_saved_without_its_pooler(tmp_path):
    hf = save_tiny(tmp_path, "ViTConfig", "ViTModel", seed=16, model_kwargs={"add_pooling_layer": False},
                   image_size=8, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=48)
    assert "pooler_type=\"ViTNoPooler\"" in builder.checkpoint.resolve_checkpoint(tmp_path).overrides
    m = builder.build(tmp_path)
    assert not any(k.startswith("pooler.") for k in m.params)
    x = np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        ref = hf(pixel_values=torch.from_numpy(x))
    assert ref.pooler_output is None
    np.testing.assert_allclose(m["forward"](x), ref.last_hidden_state.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(m["pooled"](x), ref.last_hidden_state[:, 0].numpy(), rtol=0, atol=1e-4)
