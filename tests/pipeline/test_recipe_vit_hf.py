"""A ViT (Dosovitskiy et al. 2021) written in the recipe language, built on a tiny random-initialised Hugging Face
``ViTModel`` checkpoint as ``save_pretrained`` writes it (Conv2D patch embedding, the CLS token and the position
table as ``Parameter`` layers, every tensor loaded by its own name or a ``weights.map`` rename), and compared with
transformers' own ``last_hidden_state`` on two batch sizes. Needs torch and transformers (skipped without)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF ViT test needs torch")
T = pytest.importorskip("transformers", reason="the HF ViT test needs transformers")

import builder  # noqa: E402

VIT = """\
name: vit_tiny
vars: {hidden: 16, heads: 2, inter: 32, num_layers: 2, channels: 3, image: 8, patch: 4, eps: 1e-12,
       patches: "${(image // patch) * (image // patch)}", tokens: "${patches + 1}"}
blocks:
  ViTPatchEmbeddings:
    inputs: [pixel_values]
    layers:
      projection: {type: Conv2D, in_channels: ${channels}, out_channels: ${hidden}, kernel_size: ${patch},
                   stride: ${patch}}
    forward: |
      p = projection(pixel_values)
      return permute_dims(reshape(p, [batch, ${hidden}, ${patches}]), [0, 2, 1])
  ViTEmbeddings:
    inputs: [pixel_values]
    layers:
      cls_token: {type: Parameter, shape: [1, 1, ${hidden}]}
      position_embeddings: {type: Parameter, shape: [1, ${tokens}, ${hidden}]}
      patch_embeddings: {type: ViTPatchEmbeddings}
    forward: |
      cls = broadcast_to(cls_token, [batch, 1, ${hidden}])
      return concat([cls, patch_embeddings(pixel_values)], dim=1) + position_embeddings
  ViTLayer:
    inputs: [x]
    layers:
      layernorm_before: {type: LayerNorm, normalized_shape: ${hidden}, eps: ${eps}}
      attention: {type: Attention, hidden_size: ${hidden}, num_heads: ${heads}, bias: true}
      layernorm_after: {type: LayerNorm, normalized_shape: ${hidden}, eps: ${eps}}
      intermediate: {type: Linear, in_features: ${hidden}, out_features: ${inter}}
      output: {type: Linear, in_features: ${inter}, out_features: ${hidden}}
    forward: |
      h = x + attention(layernorm_before(x))
      return h + output(gelu(intermediate(layernorm_after(h))))
  ViTEncoder:
    inputs: [x]
    layers:
      layer: {type: ViTLayer, repeat: ${num_layers}}
    forward: |
      return layer(x)
model:
  layers:
    embeddings: {type: ViTEmbeddings}
    encoder: {type: ViTEncoder}
    layernorm: {type: LayerNorm, normalized_shape: ${hidden}, eps: ${eps}}
functions:
  forward:
    inputs:
      pixel_values: {shape: [batch, "${channels}", "${image}", "${image}"], dtype: float32}
    forward: |
      return layernorm(encoder(embeddings(pixel_values)))
weights:
  map:
    "encoder.layer.{i}.attention.q_proj.": "encoder.layer.{i}.attention.attention.query."
    "encoder.layer.{i}.attention.k_proj.": "encoder.layer.{i}.attention.attention.key."
    "encoder.layer.{i}.attention.v_proj.": "encoder.layer.{i}.attention.attention.value."
    "encoder.layer.{i}.attention.o_proj.": "encoder.layer.{i}.attention.output.dense."
    "encoder.layer.{i}.intermediate.": "encoder.layer.{i}.intermediate.dense."
    "encoder.layer.{i}.output.": "encoder.layer.{i}.output.dense."
"""


def test_a_vit_recipe_loads_the_hf_checkpoint_as_saved_and_matches_transformers(tmp_path):
    torch.manual_seed(0)
    config = T.ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=32, hidden_act="gelu", layer_norm_eps=1e-12)
    hf = T.ViTModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in hf.parameters():   # off their init (zero biases, unit norms, zero CLS token)
            p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(tmp_path / "vit", safe_serialization=True)
    (tmp_path / "vit.yaml").write_text(VIT)
    m = builder.build(tmp_path / "vit.yaml", weights=tmp_path / "vit" / "model.safetensors")
    assert m.params["embeddings.patch_embeddings.projection.weight"].shape == (16, 3, 4, 4)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        with torch.no_grad():
            ref = hf(pixel_values=torch.from_numpy(x)).last_hidden_state.double().numpy()
        np.testing.assert_allclose(m["forward"](x), ref, rtol=1e-4, atol=1e-4)
