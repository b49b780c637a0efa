"""``include:`` (:mod:`schemas.includes`): vars and blocks read from other files, the model checked against
float64 numpy; merging rules; errors at the included file's own line and column; refused paths, cycles and
the depth bound."""
import numpy as np
import pytest

import builder
import schemas.includes
from builder.build_model import export_recipe
from schemas import RecipeError, load_recipe
from helpers.recipes import line_col as _at

LIB = """\
vars: {hidden: 8, inter: 16}
include: [deeper/norm.yaml]
blocks:
  MLP:
    inputs: [x]
    layers:
      up: {type: Linear, in_features: "${hidden}", out_features: "${inter}", bias: false}
    forward: |
      return silu(up(x))
"""

NORM = """\
vars: {inter: 99, eps: 0.001}
blocks:
  Norm:
    inputs: [x]
    layers:
      norm: {type: RMSNorm, hidden_size: "${inter}", epsilon: "${eps}"}
    forward: |
      return norm(x)
"""

RECIPE = """\
name: inc
include: [lib/blocks.yaml, lib/deeper/norm.yaml]
vars: {inter: 12}
model:
  layers:
    mlp: {type: MLP}
    post: {type: Norm}
  forward: |
    return post(mlp(x))
functions:
  forward: {x: {shape: [3, "${hidden}"], dtype: float32}}
"""


def _tree(tmp_path, recipe=RECIPE, lib=LIB, norm=NORM):
    (tmp_path / "lib" / "deeper").mkdir(parents=True)
    (tmp_path / "lib" / "blocks.yaml").write_text(lib)
    (tmp_path / "lib" / "deeper" / "norm.yaml").write_text(norm)
    (tmp_path / "r.yaml").write_text(recipe)
    return tmp_path / "r.yaml"


def test_included_vars_and_blocks_build_the_model(tmp_path):
    path = _tree(tmp_path)
    recipe = load_recipe(path)
    # the recipe's inter wins over both files'; lib/deeper/norm.yaml is read once (a diamond), gives eps
    assert recipe.vars == {"inter": 12, "hidden": 8, "eps": 0.001}
    m = builder.build(path)
    w = m.params["mlp.up.weight"].astype(np.float64)
    g = m.params["post.norm.weight"].astype(np.float64)
    assert w.shape == (12, 8) and g.shape == (12,)
    x = np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32)
    u = x.astype(np.float64) @ w.T
    h = u / (1 + np.exp(-u))
    ref = h / np.sqrt((h * h).mean(-1, keepdims=True) + 0.001) * g
    np.testing.assert_allclose(m["forward"](x), ref, rtol=1e-5, atol=1e-5)


def _issues(path):
    with pytest.raises(RecipeError) as info:
        export_recipe(load_recipe(path))
    return info.value.issues


def test_errors_in_an_included_file_are_at_its_own_line_and_column(tmp_path):
    lib = LIB.replace("silu(up(x))", "silu(up(y))")
    [issue] = _issues(_tree(tmp_path, lib=lib))
    assert issue.file.endswith("lib/blocks.yaml") and issue.path == "blocks.MLP.forward"
    assert (issue.line, issue.column) == _at(lib, "y))") and "unknown name 'y'" in issue.message


def test_validation_and_interpolation_errors_in_an_included_file(tmp_path):
    norm = NORM.replace('"${eps}"', '"${epsi}"')
    [issue] = _issues(_tree(tmp_path, norm=norm))
    assert issue.file == str(tmp_path / "lib" / "deeper" / "norm.yaml")
    assert (issue.line, issue.column) == _at(norm, '"${epsi}"') and "unknown variable 'epsi'" in issue.message
    lib = LIB.replace("bias: false", "bias: maybe")
    [issue] = _issues(_tree(tmp_path / "b", lib=lib))
    assert issue.file.endswith("blocks.yaml") and (issue.line, issue.column) == _at(lib, "maybe")


def test_a_block_defined_twice_and_fields_an_include_may_not_give_are_errors(tmp_path):
    norm = NORM.replace("Norm:", "MLP:").replace("vars:", "model: {}\nvars:")
    issues = _issues(_tree(tmp_path, recipe=RECIPE.replace("post: {type: Norm}", "post: {type: MLP}"), norm=norm))
    assert {(i.path, i.line, i.column) for i in issues} == {("model", 1, 1), ("blocks.MLP", *_at(norm, "MLP:"))}
    assert any("block 'MLP' is already defined in" in i.message for i in issues)
    assert all(i.file.endswith("norm.yaml") for i in issues)


@pytest.mark.parametrize("entry, message", [
    ("/etc/passwd", "absolute"), ("lib/../r.yaml", "'..' segment"), ("r.yaml", "include cycle"),
    ("missing.yaml", "cannot read included file"), ("3", "relative file path"),
])
def test_refused_include_paths_are_errors_at_the_item(tmp_path, entry, message):
    recipe = RECIPE.replace("include: [lib/blocks.yaml, lib/deeper/norm.yaml]", f"include: [{entry}]")
    issues = _issues(_tree(tmp_path, recipe=recipe))
    assert issues[0].path == "include.0" and message in issues[0].message
    assert (issues[0].line, issues[0].column) == _at(recipe, entry + "]")


def test_a_symlink_out_of_the_recipe_directory_is_refused(tmp_path):
    outside = tmp_path / "outside.yaml"
    outside.write_text(NORM)
    path = _tree(tmp_path / "r", recipe=RECIPE.replace("lib/deeper/norm.yaml]", "link.yaml]"))
    (tmp_path / "r" / "link.yaml").symlink_to(outside)
    assert any("leads outside" in i.message and i.path == "include.1" for i in _issues(path))


def test_include_depth_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(schemas.includes, "MAX_INCLUDE_DEPTH", 1)   # r.yaml -> lib -> deeper is 2 deep
    issues = _issues(_tree(tmp_path, recipe=RECIPE.replace(", lib/deeper/norm.yaml]", "]")))
    assert any(i.file.endswith("blocks.yaml") and i.path == "include.0" and "nest more than 1" in i.message
               for i in issues)
