"""Layer settings HF families need: RMSNorm's ``weight_offset`` (Gemma's ``(1 + weight)``) and GELU's tanh
form (``approximate: tanh``), built from a recipe and checked against float64 numpy references."""
import math

import numpy as np
import pytest

import builder
from schemas import RecipeError

RECIPE = """\
name: layer_options
vars: {hidden: 8}
model:
  layers:
    norm: {type: RMSNorm, hidden_size: ${hidden}, epsilon: 1.0e-6, weight_offset: 1.0}
    plain: {type: RMSNorm, hidden_size: ${hidden}}
    act: {type: GELU, approximate: tanh}
    exact: {type: GELU}
functions:
  forward:
    inputs:
      x: {shape: [batch, ${hidden}], dtype: float32}
    forward: |
      return norm(x), plain(x), act(x), exact(x)
"""


def _build(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return builder.build(path)


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def test_rmsnorm_offset_and_gelu_tanh_match_numpy(tmp_path):
    m = _build(tmp_path, RECIPE)
    x = (np.random.default_rng(7).standard_normal((3, 8)) * 2).astype(np.float32)
    x64 = x.astype(np.float64)
    w, w_plain = (m.params[k].astype(np.float64) for k in ("norm.weight", "plain.weight"))
    norm, plain, act, exact = m["forward"](x)
    np.testing.assert_allclose(norm, _rms(x64, 1.0 + w, 1e-6), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(plain, _rms(x64, w_plain, 1e-5), rtol=1e-5, atol=1e-6)
    tanh_ref = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    erf_ref = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    np.testing.assert_allclose(act, tanh_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exact, erf_ref, rtol=1e-5, atol=1e-6)
    assert np.abs(tanh_ref - erf_ref).max() > 1e-4   # the two forms differ: the setting is honoured


@pytest.mark.parametrize("old, new, field", [
    ("approximate: tanh", "approximate: sigmoid", "model.layers.act.approximate"),
    ("weight_offset: 1.0", "weight_offset: .inf", "model.layers.norm.weight_offset"),
])
def test_bad_settings_are_recipe_errors(tmp_path, old, new, field):
    with pytest.raises(RecipeError) as info:
        _build(tmp_path, RECIPE.replace(old, new))
    issue = info.value.issues[0]
    assert issue.path == field and issue.line is not None
