"""``recipes/hf/vit.yaml`` on tiny random transformers ``ViTModel`` checkpoints as ``save_pretrained`` writes them,
with and without the pooler (``add_pooling_layer``), without qkv biases: ``last_hidden_state`` and
``pooler_output`` against transformers on two batch sizes. Needs torch and transformers (skipped without)."""
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF family tests need torch")
T = pytest.importorskip("transformers", reason="the HF family tests need transformers")

import builder  # noqa: E402
from helpers.hf_causal import nudge_and_save  # noqa: E402

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _vit(path, pooler: bool, qkv_bias: bool):
    torch.manual_seed(1)
    config = T.ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=48, layer_norm_eps=1e-12, qkv_bias=qkv_bias)
    hf = nudge_and_save(torch, T.ViTModel(config, add_pooling_layer=pooler), path)
    m = builder.build(RECIPES / "hf" / "vit.yaml", weights=path / "model.safetensors",
                      overrides=("hidden_size=32", "num_heads=4", "intermediate_size=48", "num_layers=2",
                                 "image_size=8", "patch_size=4", f"qkv_bias={str(qkv_bias).lower()}",
                                 f"pooler_type={'ViTPooler' if pooler else 'ViTNoPooler'}"))
    return m, hf


@pytest.mark.parametrize("pooler, qkv_bias", [(True, True), (False, False)])
def test_vit_matches_transformers_with_and_without_its_pooler(tmp_path, pooler, qkv_bias):
    m, hf = _vit(tmp_path / "vit", pooler, qkv_bias)
    assert ("pooler.dense.weight" in m.params) == pooler
    assert ("encoder.layer.0.attention.q_proj.bias" in m.params) == qkv_bias
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        with torch.no_grad():
            ref = hf(pixel_values=torch.from_numpy(x))
        out = m["forward"](x)
        hidden = out[0] if pooler else out
        assert hidden.shape == (batch, 5, 32)
        np.testing.assert_allclose(hidden, ref.last_hidden_state.double().numpy(), rtol=0, atol=1e-4)
        if pooler:
            np.testing.assert_allclose(out[1], ref.pooler_output.double().numpy(), rtol=0, atol=1e-4)
