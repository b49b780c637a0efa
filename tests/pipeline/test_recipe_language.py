"""The recipe language for whole models: blocks, repeat, per-function inputs and forward texts, symbolic
dims as values; each checked against a float64 numpy reference, and its errors at file:line:column."""
import numpy as np
import pytest

import builder
from builder.build_model import export_recipe
from schemas import RecipeError, load_recipe_text
from core.limits import MAX_MODULES
from helpers.recipes import recipe_issue as _issue

BLOCKS = """\
name: blocks_demo
vars: {hidden: 8, inter: 16, n: 3}
blocks:
  MLP:
    inputs: [x]
    layers:
      up: {type: Linear, in_features: ${hidden}, out_features: ${inter}, bias: false}
      down: {type: Linear, in_features: ${inter}, out_features: ${hidden}, bias: false}
    forward: |
      return down(silu(up(x)))
  Layer:
    inputs: [x, scale=None]
    layers:
      norm: {type: RMSNorm, hidden_size: ${hidden}}
      mlp: {type: MLP}
    forward: |
      return x + mlp(norm(x))
model:
  layers:
    layers: {type: Layer, repeat: ${n}}
    head: {type: Linear, in_features: ${hidden}, out_features: 4}
functions:
  forward:
    inputs:
      x: {shape: [batch, seq, ${hidden}], dtype: float32}
    forward: |
      h = layers(x)
      y = reshape(h, [batch * seq, ${hidden}])
      return head(y)
  first:
    inputs:
      x: {shape: [batch, seq, ${hidden}], dtype: float32}
    forward: |
      return layers[0](x), layers[-1](x)
"""


def _rms(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _layer(h, P, i):
    u = _rms(h, P[f"layers.{i}.norm.weight"]) @ P[f"layers.{i}.mlp.up.weight"].T.astype(np.float64)
    return h + (u / (1 + np.exp(-u))) @ P[f"layers.{i}.mlp.down.weight"].T.astype(np.float64)


def _build(tmp_path, text, name="r.yaml", **kw):
    path = tmp_path / name
    path.write_text(text)
    return builder.build(path, **kw)


def test_blocks_repeat_and_functions_match_numpy(tmp_path):
    m = _build(tmp_path, BLOCKS)
    assert m.param_names[:3] == ["layers.0.norm.weight", "layers.0.mlp.up.weight", "layers.0.mlp.down.weight"]
    assert m.param_names[-2:] == ["head.weight", "head.bias"] and len(m.param_names) == 11
    P = {k: v.astype(np.float64) for k, v in m.params.items()}
    x = np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)
    h = x.astype(np.float64)
    for i in range(3):
        h = _layer(h, P, i)
    ref = h.reshape(6, 8) @ P["head.weight"].T + P["head.bias"]
    np.testing.assert_allclose(m["forward"](x), ref, rtol=1e-5, atol=1e-5)
    first, last = m["first"](x)
    np.testing.assert_allclose(first, _layer(x.astype(np.float64), P, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(last, _layer(x.astype(np.float64), P, 2), rtol=1e-5, atol=1e-5)


SYMBOLIC = """\
name: symbolic
model:
  layers:
    fc: {type: Linear, in_features: 4, out_features: 6, bias: false}
functions:
  heads:
    inputs:
      x: {shape: [batch, seq, 4], dtype: float32}
    forward: |
      y = reshape(fc(x), [batch, seq * 2, 3])
      return y
  masked:
    inputs:
      x: {shape: [batch, 4], dtype: float32}
    forward: |
      y = fc(x)
      return where(y > 0, y, y * 0.5)
  counted:
    inputs:
      x: {shape: [n], dtype: int64}
      total: {type: int}
    forward: |
      return arange(total - n, total, dtype="int64")
"""


def test_symbolic_dims_and_ints_are_values(tmp_path):
    m = _build(tmp_path, SYMBOLIC)
    w = m.params["fc.weight"].astype(np.float64)
    x = np.random.default_rng(2).standard_normal((2, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(m["heads"](x), (x @ w.T).reshape(2, 10, 3), rtol=1e-5, atol=1e-6)
    x2 = x[:, 0]
    y = x2 @ w.T
    np.testing.assert_allclose(m["masked"](x2), np.where(y > 0, y, y * 0.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m["counted"](np.zeros(3, np.int64), 7), np.arange(4, 7))


def test_a_one_forward_recipe_keeps_working_with_several_functions(tmp_path):
    text = BLOCKS.replace("functions:\n  forward:\n    inputs:\n      x: {shape: [batch, seq, ${hidden}], dtype: float32}\n"
                          "    forward: |\n      h = layers(x)\n      y = reshape(h, [batch * seq, ${hidden}])\n"
                          "      return head(y)\n", "functions:\n  forward:\n    x: {shape: [batch, seq, ${hidden}], "
                          "dtype: float32}\n")
    text = text.replace("model:\n  layers:\n", "model:\n  forward: |\n    return head(layers(x))\n  layers:\n")
    recipe = load_recipe_text(text)
    irmod, params, spec = export_recipe(recipe)
    assert set(spec) == {"forward", "first"} and "forward" in irmod.functions


def test_unknown_block_type_suggests_a_close_name():
    with pytest.raises(RecipeError) as info:
        load_recipe_text(BLOCKS.replace("mlp: {type: MLP}", "mlp: {type: MLPP}"), "r.yaml")
    [issue] = info.value.issues
    assert issue.path == "blocks.Layer.layers.mlp.type" and (issue.line, issue.column) == (15, 19)
    assert "unknown layer type 'MLPP'; did you mean 'MLP'?" in issue.message and "blocks: MLP, Layer" in issue.message


def test_a_block_containing_itself_is_an_error():
    issue = _issue(BLOCKS.replace("mlp: {type: MLP}", "mlp: {type: Layer}"))
    assert issue.path == "blocks.Layer.layers.mlp.type" and "block 'Layer' contains itself" in issue.message


def test_repeats_multiplying_past_the_layer_bound_are_refused_before_building():
    text = BLOCKS.replace("mlp: {type: MLP}", "mlp: {type: MLP, repeat: 4096}").replace("n: 3", "n: 4096")
    issue = _issue(text)
    assert f"more than {MAX_MODULES:,} layers" in issue.message


def test_errors_in_a_block_forward_point_into_the_block_text():
    issue = _issue(BLOCKS.replace("return down(silu(up(x)))", "return down(silu(up(x, x)))"))
    assert issue.path == "blocks.MLP.forward" and (issue.line, issue.column) == (10, 24)
    assert "up()" in issue.message


def test_a_missing_block_argument_is_reported_at_the_call():
    issue = _issue(BLOCKS.replace("h = layers(x)", "h = layers()"))
    assert issue.path == "functions.forward.forward" and "chain on its first argument" in issue.message
    issue = _issue(BLOCKS.replace("return x + mlp(norm(x))", "return x + mlp()"))
    assert issue.path == "blocks.Layer.forward" and "missing argument 'x'" in issue.message


def test_a_function_without_any_forward_is_an_error():
    issue = _issue(BLOCKS.replace("    forward: |\n      return layers[0](x), layers[-1](x)\n", ""))
    assert issue.path == "functions.first" and "has no forward" in issue.message


def test_indexing_a_copy_out_of_range_and_a_layer_that_is_not_repeated():
    issue = _issue(BLOCKS.replace("layers[-1](x)", "layers[3](x)"))
    assert "has 3 copies; there is no layers[3]" in issue.message
    issue = _issue(BLOCKS.replace("return head(y)", "return head[0](y)"))
    assert "'head' is not repeated" in issue.message


def test_symbolic_int_arithmetic_rules():
    issue = _issue(SYMBOLIC.replace("seq * 2", "seq / 2"))
    assert "use // to divide symbolic ints" in issue.message
    issue = _issue(SYMBOLIC.replace("where(y > 0", "where(0 > 1"))
    assert "a comparison needs a tensor" in issue.message
    issue = _issue(SYMBOLIC.replace("    forward: |\n      y = reshape(fc(x)",
                                    "    forward: |\n      y = reshape(fc(z)"))
    assert "unknown name 'z'" in issue.message


CONV = """\
name: conv_layers
model:
  layers:
    up: {type: ConvTranspose1D, in_channels: 4, out_channels: 6, kernel_size: 3, stride: 2, padding: 1, output_padding: 1}
    norm: {type: GroupNorm, num_groups: 3, num_channels: 6, eps: 1e-5}
functions:
  forward:
    inputs:
      x: {shape: [batch, 4, length], dtype: float32}
    forward: |
      y = norm(up(x))
      return y, length - y[:, :, 1:]
"""


def _conv_transpose1d(x, w, b, stride, pad, out_pad):
    batch, _, n = x.shape
    k = w.shape[2]
    full = np.zeros((batch, w.shape[1], (n - 1) * stride + k))
    for i in range(n):
        full[:, :, i * stride:i * stride + k] += np.einsum("bc,cok->bok", x[:, :, i], w)
    out_len = (n - 1) * stride - 2 * pad + k + out_pad
    full = np.pad(full, ((0, 0), (0, 0), (0, out_pad)))
    return full[:, :, pad:pad + out_len] + b[None, :, None]


def _group_norm(x, groups, w, b, eps=1e-5):
    g = x.reshape(x.shape[0], groups, -1)
    g = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    return g.reshape(x.shape) * w[None, :, None] + b[None, :, None]


@pytest.mark.parametrize("length", [5, 9])
def test_conv_transpose_and_group_norm_layers_with_a_symbolic_length(tmp_path, length):
    m = _build(tmp_path, CONV)
    P = {k: v.astype(np.float64) for k, v in m.params.items()}
    P["norm.weight"] = 1 + 10 * P["norm.weight"]
    m._params = {k: v.astype(np.float32) for k, v in P.items()}
    x = np.random.default_rng(length).standard_normal((2, 4, length)).astype(np.float32)
    y, rest = m["forward"](x)
    ref = _group_norm(_conv_transpose1d(x.astype(np.float64), P["up.weight"], P["up.bias"], 2, 1, 1), 3,
                      P["norm.weight"], P["norm.bias"])
    assert y.shape == (2, 6, 2 * length)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rest, length - ref[:, :, 1:], rtol=1e-4, atol=1e-5)


def test_blocks_nested_too_deep_are_refused_without_recursing_further():
    n = 3000   # deeper than Python's recursion limit: must be a recipe error, not a RecursionError
    lines = ["name: deep", "blocks:"]
    for i in range(n):
        inner = f"inner: {{type: B{i + 1}}}" if i < n - 1 else "inner: {type: Linear, in_features: 4, out_features: 4}"
        lines += [f"  B{i}:", "    inputs: [x]", f"    layers: {{{inner}}}", "    forward: return inner(x)"]
    lines += ["model:", "  layers: {b: {type: B0}}", "functions:", "  forward:",
              "    inputs: {x: {shape: [2, 4], dtype: float32}}", "    forward: return b(x)"]
    issue = _issue("\n".join(lines) + "\n")
    assert "blocks nest more than 32 deep" in issue.message and issue.path.startswith("blocks.B")


def test_a_built_in_layer_takes_its_tensor_by_keyword_too(tmp_path):
    m = _build(tmp_path, SYMBOLIC.replace("y = fc(x)\n      return where", "y = fc(x=x)\n      return where"))
    w = m.params["fc.weight"].astype(np.float64)
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    y = x @ w.T
    np.testing.assert_allclose(m["masked"](x), np.where(y > 0, y, y * 0.5), rtol=1e-5, atol=1e-6)
    issue = _issue(SYMBOLIC.replace("y = fc(x)\n      return where", "y = fc(x=3)\n      return where"))
    assert "fc() (Linear) takes tensors, got int" in issue.message
