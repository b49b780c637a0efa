"""Parameters in recipes (issue 42): the ``Parameter`` layer (a CLS token, a learned position table), a layer's
parameters read in ``forward:`` (``head.weight``, ``layers[1].fc.bias``), the ``Conv2D`` layer, and a tiny
ViT-style model built from them; each checked against a float64 numpy reference on two batch sizes of a
symbolic batch dim, and their errors at file:line:column."""
import numpy as np
import pytest

import builder
from runtime.weights import save_params
from schemas import RecipeError, load_recipe_text
from helpers.recipes import line_col as _at, recipe_issue as _issue

VIT = """\
name: tiny_vit
vars: {hidden: 8, patch: 2, channels: 3, image: 4, patches: "${(image // patch) * (image // patch)}",
       tokens: "${patches + 1}", labels: 5}
blocks:
  Embeddings:
    inputs: [pixels]
    layers:
      cls_token: {type: Parameter, shape: [1, 1, "${hidden}"]}
      position_embeddings: {type: Parameter, shape: [1, "${tokens}", "${hidden}"]}
      patch_embeddings: {type: Conv2D, in_channels: "${channels}", out_channels: "${hidden}", kernel_size: "${patch}",
                         stride: "${patch}"}
    forward: |
      p = patch_embeddings(pixels)
      p = permute_dims(reshape(p, [batch, ${hidden}, ${patches}]), [0, 2, 1])
      cls = broadcast_to(cls_token, [batch, 1, ${hidden}])
      return concat([cls, p], dim=1) + position_embeddings
model:
  layers:
    embeddings: {type: Embeddings}
    head: {type: Linear, in_features: "${hidden}", out_features: "${labels}"}
functions:
  forward:
    inputs:
      pixels: {shape: [batch, "${channels}", "${image}", "${image}"], dtype: float32}
    forward: |
      h = embeddings(pixels)
      pooled = h[:, 0, :] @ permute_dims(head.weight, [1, 0]) + head.bias
      return pooled, head(h)
"""


def conv2d_reference(x, w, b, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """``torch.nn.functional.conv2d`` in float64 numpy (NCHW data, OIHW weight), by kernel taps."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                tap = xp[:, g * cg:(g + 1) * cg,
                         i * dilation[0]:i * dilation[0] + stride[0] * (oh - 1) + 1:stride[0],
                         j * dilation[1]:j * dilation[1] + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", tap, w[g * og:(g + 1) * og, :, i, j])
    return out + (0 if b is None else b.astype(np.float64)[None, :, None, None])


def vit_reference(pixels, P):
    """The tiny ViT of ``VIT`` in float64: patch embedding, CLS token, position table, head."""
    P = {k: v.astype(np.float64) for k, v in P.items()}
    p = conv2d_reference(pixels, P["embeddings.patch_embeddings.weight"], P["embeddings.patch_embeddings.bias"],
                         stride=(2, 2))
    p = p.reshape(p.shape[0], p.shape[1], -1).transpose(0, 2, 1)
    cls = np.broadcast_to(P["embeddings.cls_token"], (p.shape[0], 1, p.shape[2]))
    h = np.concatenate([cls, p], axis=1) + P["embeddings.position_embeddings"]
    logits = h @ P["head.weight"].T + P["head.bias"]
    return logits[:, 0], logits


def _build(tmp_path, text, **kw):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return builder.build(path, **kw)


def test_a_tiny_vit_matches_numpy_on_two_batch_sizes(tmp_path):
    m = _build(tmp_path, VIT)
    assert m.param_names == ["embeddings.cls_token", "embeddings.position_embeddings",
                             "embeddings.patch_embeddings.weight", "embeddings.patch_embeddings.bias",
                             "head.weight", "head.bias"]
    assert m.params["embeddings.patch_embeddings.weight"].shape == (8, 3, 2, 2)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 4, 4)).astype(np.float32)
        pooled, tokens = m["forward"](x)
        ref_pooled, ref_tokens = vit_reference(x, m.params)
        np.testing.assert_allclose(pooled, ref_pooled, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tokens, ref_tokens, rtol=1e-5, atol=1e-6)


def test_parameter_layers_load_by_their_own_names_from_a_checkpoint(tmp_path):
    rng = np.random.default_rng(7)
    shapes = {"embeddings.cls_token": (1, 1, 8), "embeddings.position_embeddings": (1, 5, 8),
              "embeddings.patch_embeddings.weight": (8, 3, 2, 2), "embeddings.patch_embeddings.bias": (8,),
              "head.weight": (5, 8), "head.bias": (5,)}
    weights = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    save_params(tmp_path / "w.safetensors", weights)
    m = _build(tmp_path, VIT, weights=tmp_path / "w.safetensors")
    for name, value in weights.items():
        np.testing.assert_array_equal(m.params[name], value)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(m["forward"](x)[0], vit_reference(x, weights)[0], rtol=1e-5, atol=1e-5)


def test_init_sets_the_random_weights_of_a_parameter_layer(tmp_path):
    base = _build(tmp_path, VIT).params
    text = VIT.replace('shape: [1, 1, "${hidden}"]}', 'shape: [1, 1, "${hidden}"], init: ones}').replace(
        'shape: [1, "${tokens}", "${hidden}"]}', 'shape: [1, "${tokens}", "${hidden}"], std: 0.5}')
    params = _build(tmp_path, text).params
    np.testing.assert_array_equal(params["embeddings.cls_token"], np.ones((1, 1, 8), np.float32))
    np.testing.assert_allclose(params["embeddings.position_embeddings"],
                               base["embeddings.position_embeddings"].astype(np.float64) * 25, rtol=1e-6)
    for name in ("embeddings.patch_embeddings.weight", "head.weight"):   # the others' draws stay as they were
        np.testing.assert_array_equal(params[name], base[name])
    zeros = _build(tmp_path, VIT.replace('"${hidden}"]}', '"${hidden}"], init: zeros}', 1)).params
    np.testing.assert_array_equal(zeros["embeddings.cls_token"], np.zeros((1, 1, 8), np.float32))


CONV2D = """\
name: conv2d
model:
  layers:
    conv: {type: Conv2D, in_channels: 4, out_channels: 6, kernel_size: [3, 2], stride: [2, 1], padding: [1, 0],
           dilation: [1, 2], groups: 2}
    plain: {type: Conv2D, in_channels: 4, out_channels: 2, kernel_size: 1, bias: false}
functions:
  forward:
    inputs:
      x: {shape: [batch, 4, 5, 6], dtype: float32}
    forward: |
      return conv(x), plain(x)
"""


def test_conv2d_settings_match_numpy(tmp_path):
    m = _build(tmp_path, CONV2D)
    assert "plain.bias" not in m.params
    P = m.params
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 5, 6)).astype(np.float32)
        y, z = m["forward"](x)
        ref = conv2d_reference(x, P["conv.weight"], P["conv.bias"], (2, 1), (1, 0), (1, 2), groups=2)
        assert y.shape == ref.shape == (batch, 6, 3, 4)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(z, conv2d_reference(x, P["plain.weight"], None), rtol=1e-5, atol=1e-6)


REPEATED = """\
name: repeated
blocks:
  Layer:
    inputs: [x]
    layers:
      fc: {type: Linear, in_features: 4, out_features: 4}
    forward: |
      return x @ permute_dims(fc.weight, [1, 0]) + fc.bias * 2
model:
  layers:
    layers: {type: Layer, repeat: 2}
    scale: {type: Parameter, shape: [4], std: 1.0}
functions:
  forward:
    inputs:
      x: {shape: [batch, 4], dtype: float32}
    forward: |
      return layers(x) * scale, layers[1].fc.weight + 0
"""


def test_parameters_read_inside_blocks_and_repeats(tmp_path):
    m = _build(tmp_path, REPEATED)
    P = {k: v.astype(np.float64) for k, v in m.params.items()}
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    y, w1 = m["forward"](x)
    ref = x.astype(np.float64)
    for i in range(2):   # each copy reads its own fc
        ref = ref @ P[f"layers.{i}.fc.weight"].T + 2 * P[f"layers.{i}.fc.bias"]
    assert m.param_names[-1] == "scale"   # a Parameter layer of the model itself
    np.testing.assert_allclose(y, ref * P["scale"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(w1, m.params["layers.1.fc.weight"])


def test_a_parameter_the_layer_lacks_is_an_error_naming_those_it_has():
    text = VIT.replace("head.weight,", "head.weights,")
    issue = _issue(text)
    assert (issue.file, issue.path) == ("r.yaml", "functions.forward.forward")
    assert (issue.line, issue.column) == _at(text, "head.weights")
    assert issue.message == ("layer 'head' (Linear) has no parameter 'weights' (its parameters: weight, bias); "
                             "did you mean 'weight'?")
    text = REPEATED.replace("fc: {type: Linear, in_features: 4, out_features: 4}",
                            "fc: {type: Linear, in_features: 4, out_features: 4, bias: false}")
    issue = _issue(text)
    assert issue.path == "blocks.Layer.forward" and (issue.line, issue.column) == _at(text, "fc.bias")
    assert "layer 'fc' (Linear) has no parameter 'bias' (its parameters: weight)" in issue.message


def test_a_parameter_of_a_layer_that_has_none_and_other_attributes_are_errors():
    text = REPEATED.replace("      fc: {type", "      act: {type: SiLU}\n      fc: {type").replace(
        "fc.bias * 2", "act.weight")
    issue = _issue(text)
    assert (issue.line, issue.column) == _at(text, "act.weight")
    assert "layer 'act' (SiLU) has no parameters" in issue.message
    issue = _issue(REPEATED.replace("layers[1].fc.weight", "layers.fc.weight"))
    assert "'layers' is repeated (2 copies); read a copy's: layers[0].fc.weight" in issue.message
    issue = _issue(REPEATED.replace("layers[1].fc.weight", "layers[2].fc.weight"))
    assert "'layers' has 2 copies; there is no layers[2]" in issue.message
    text = REPEATED.replace("layers[1].fc.weight + 0", "x.shape")
    issue = _issue(text)
    assert (issue.line, issue.column) == _at(text, "x.shape")
    assert "attribute access reads a layer's parameter" in issue.message and "not 'x.shape'" in issue.message


def test_a_parameter_layer_is_a_value_never_called():
    text = VIT.replace("broadcast_to(cls_token,", "broadcast_to(cls_token(),")
    issue = _issue(text)
    assert (issue.line, issue.column) == _at(text, "cls_token(),")
    assert "'cls_token' is a Parameter layer, a tensor: use it as a value" in issue.message
    issue = _issue(VIT.replace("cls_token,", "cls_token.weight,"))
    assert "attribute access reads a layer's parameter" in issue.message
    with pytest.raises(RecipeError) as info:
        load_recipe_text(VIT.replace('shape: [1, 1, "${hidden}"]}', 'shape: [1, 1, "${hidden}"], repeat: 2}'),
                         "r.yaml")
    assert "cannot be repeated" in str(info.value)
    with pytest.raises(RecipeError) as info:
        load_recipe_text(CONV2D.replace("groups: 2}", "groups: 3}"), "r.yaml")
    assert "in_channels (4) must be a multiple of groups (3)" in str(info.value)


def test_attributes_are_looked_up_among_parameters_never_on_the_python_object():
    issue = _issue(VIT.replace("head.weight,", "head.__class__,"))
    assert "layer 'head' (Linear) has no parameter '__class__'" in issue.message
    issue = _issue(VIT.replace("head.weight,", "head.weight.data,"))
    assert "has no parameter 'weight.data'" in issue.message
    issue = _issue(VIT.replace("head.weight,", "head[0].weight,"))
    assert "'head' is not repeated; read its parameter as head.weight" in issue.message
    issue = _issue(VIT.replace("head.weight,", "embeddings.patch_embeddings.weights,"))
    assert ("layer 'embeddings' (Embeddings) has no parameter 'patch_embeddings.weights' (its parameters: "
            "cls_token, position_embeddings, patch_embeddings.weight, patch_embeddings.bias)") in issue.message


def test_the_module_tree_shows_parameter_layers():
    import io

    from rich.console import Console

    from builder.recipe import instantiate
    from builder.summary import module_tree

    module, _ = instantiate(load_recipe_text(VIT, "r.yaml"))
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(module_tree(module, "tiny_vit"))
    lines = [line.strip("│├└─ ") for line in out.getvalue().splitlines()]
    assert lines[:5] == ["tiny_vit", "embeddings: Embeddings", "cls_token: Parameter(shape=(1, 1, 8), dtype=float32)",
                         "position_embeddings: Parameter(shape=(1, 5, 8), dtype=float32)",
                         "patch_embeddings: Conv2D(in_channels=3, out_channels=8)"]
