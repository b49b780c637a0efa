"""``inf`` / ``-inf`` as literals of ``forward:`` and ``${...}`` arithmetic in a built model, each checked against
a float64 numpy reference."""
import numpy as np
import pytest

import builder
from schemas import RecipeError

MASKED = """\
name: masked_softmax
vars: {hidden: 8, heads: 2}
model:
  layers:
    fc: {type: Linear, in_features: ${hidden}, out_features: ${hidden * 3 // 2}}
functions:
  forward:
    inputs:
      x: {shape: [batch, ${hidden}], dtype: float32}
      mask: {shape: [batch, ${hidden * 3 // 2}], dtype: bool}
    forward: |
      y = fc(x)
      return softmax(where(mask, y, -inf), axis=-1)
  capped:
    inputs:
      x: {shape: [batch, ${hidden}], dtype: float32}
    forward: |
      y = reshape(fc(x), [batch, ${heads}, ${hidden * 3 // 2 // heads}])
      return maximum(minimum(y, inf), -inf) * ${1 / heads}
"""


def _build(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return builder.build(path)


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_minus_inf_masks_a_softmax_and_arithmetic_sizes_the_layers(tmp_path):
    m = _build(tmp_path, MASKED)
    w, b = (m.params[k].astype(np.float64) for k in ("fc.weight", "fc.bias"))
    assert w.shape == (12, 8)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    mask = rng.random((3, 12)) < 0.6
    mask[:, 0] = True   # every row keeps one value
    y = x.astype(np.float64) @ w.T + b
    got = m["forward"](x, mask)
    np.testing.assert_allclose(got, _softmax(np.where(mask, y, -np.inf)), rtol=1e-5, atol=1e-6)
    assert (got[~mask] == 0).all()
    np.testing.assert_allclose(m["capped"](x), y.reshape(3, 2, 6) * 0.5, rtol=1e-5, atol=1e-6)


def test_an_input_named_inf_shadows_the_literal(tmp_path):
    text = MASKED.replace("mask: {shape: [batch, ${hidden * 3 // 2}], dtype: bool}",
                          "inf: {shape: [batch, ${hidden * 3 // 2}], dtype: float32}")
    m = _build(tmp_path, text.replace("where(mask, y, -inf)", "y * inf"))
    x = np.ones((1, 8), np.float32)
    zeros = np.zeros((1, 12), np.float32)   # `inf` is the input here: softmax(y * 0) is uniform
    np.testing.assert_allclose(m["forward"](x, zeros), np.full((1, 12), 1 / 12), rtol=1e-6)


def test_nan_is_still_an_unknown_name(tmp_path):
    with pytest.raises(RecipeError) as info:
        _build(tmp_path, MASKED.replace("-inf), axis", "nan), axis"))
    issue = info.value.issues[0]
    assert "unknown name 'nan'" in issue.message and issue.path == "functions.forward.forward"


def test_float_of_a_string_points_to_the_literals(tmp_path):
    with pytest.raises(RecipeError) as info:
        _build(tmp_path, MASKED.replace("-inf), axis", "float('-inf')), axis"))
    assert "unknown layer or op 'float'; infinities are the literals inf and -inf" in info.value.issues[0].message
