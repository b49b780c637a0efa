"""Block arguments (``args:`` of a block, values at each use; :mod:`schemas.block_args`): per-use
interpolation of layers and forward text checked against float64 numpy, the errors at file:line:column,
the instance bound, and ``--print-recipe``'s expanded recipe building the same model."""
import numpy as np
import pytest

import builder
import schemas.block_args
from builder.recipe import instantiate
from schemas import RecipeError, dump_recipe, load_recipe_text
from helpers.recipes import line_col as _at, recipe_issue as _issue

# Heads splits a projection into `heads` heads of `dim` (its forward interpolated per use); `dim` is also a
# var (8), shadowed inside the block by the argument; Pair nests Heads, passing its own argument on.
ARGS = """\
name: block_args
vars: {hidden: 8, dim: 8}
blocks:
  Heads:
    args: [heads, {dim: 2}]
    inputs: [x]
    layers:
      proj: {type: Linear, in_features: ${hidden}, out_features: ${heads * dim}, bias: false}
    forward: |
      h = reshape(proj(x), [batch, ${heads}, ${dim}])
      return sum(h, axis=1)
  Pair:
    args: {width: 3}
    inputs: [x]
    layers:
      inner: {type: Heads, heads: 2, dim: ${width}}
    forward: |
      return inner(x)
model:
  layers:
    a: {type: Heads, heads: 4}
    b: {type: Heads, heads: ${hidden // 4}, dim: 3}
    c: {type: Heads, heads: 4}
    d: {type: Pair}
functions:
  forward:
    inputs:
      x: {shape: [batch, ${hidden}], dtype: float32}
    forward: |
      return a(x), b(x), c(x), d(x)
"""


def _heads(x, w, heads, dim):
    return (x @ w.T).reshape(len(x), heads, dim).sum(axis=1)


def test_each_use_interpolates_its_arguments_into_layers_and_forward(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(ARGS)
    m = builder.build(path)
    P = {k: v.astype(np.float64) for k, v in m.params.items()}
    assert {k: v.shape for k, v in m.params.items()} == {
        "a.proj.weight": (8, 8), "b.proj.weight": (6, 8), "c.proj.weight": (8, 8), "d.inner.proj.weight": (6, 8)}
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    x64 = x.astype(np.float64)
    a, b, c, d = m["forward"](x)
    np.testing.assert_allclose(a, _heads(x64, P["a.proj.weight"], 4, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b, _heads(x64, P["b.proj.weight"], 2, 3), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, _heads(x64, P["c.proj.weight"], 4, 2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, _heads(x64, P["d.inner.proj.weight"], 2, 3), rtol=1e-5, atol=1e-5)


def test_uses_with_the_same_values_share_one_instance_and_the_printed_recipe_builds_the_same_model():
    recipe = load_recipe_text(ARGS, "r.yaml")
    assert {k: v.type for k, v in recipe.model.layers.items()} == {"a": "Heads", "b": "Heads_1", "c": "Heads",
                                                                   "d": "Pair"}
    assert recipe.blocks["Heads_1"].forward.startswith("h = reshape(proj(x), [batch, 2, 3])")
    printed = load_recipe_text(dump_recipe(recipe), "printed.yaml")
    assert printed.blocks == recipe.blocks and printed.model == recipe.model
    def shapes(r):
        return [(name, list(p.shape)) for name, p in instantiate(r)[0].named_parameters()]
    assert shapes(printed) == shapes(recipe) and len(shapes(recipe)) == 4


def test_an_unknown_argument_is_an_error_at_its_key_naming_the_block():
    text = ARGS.replace("c: {type: Heads, heads: 4}", "c: {type: Heads, heads: 4, width: 1}")
    issue = _issue(text)
    assert (issue.file, issue.line, issue.column) == ("r.yaml", *_at(text, "width: 1"))
    assert "block 'Heads' has no argument 'width'" in issue.message and "heads, dim" in issue.message


def test_a_missing_required_argument_is_an_error_at_the_use():
    text = ARGS.replace("c: {type: Heads, heads: 4}", "c: {type: Heads}")
    issue = _issue(text)
    assert (issue.line, issue.column) == _at(text, "Heads}")
    assert "block 'Heads' needs argument 'heads' (no default)" in issue.message


def test_a_problem_in_one_instance_is_reported_in_the_blocks_own_text():
    # sums over axis `dim`: 2 is an axis of a's (batch, 4, 2), 3 none of b's (batch, 2, 3)
    text = ARGS.replace("return sum(h, axis=1)", "return sum(h, axis=${dim})")
    issue = _issue(text)
    assert issue.path == "blocks.Heads_1.forward" and "axis" in issue.message
    assert (issue.line, issue.column) == _at(text, "sum(h")


def test_bad_declarations_and_unknown_names_in_a_block_are_errors():
    issue = _issue(ARGS.replace("args: {width: 3}", "args: 3"))
    assert issue.path == "blocks.Pair.args" and "mapping" in issue.message
    text = ARGS.replace("${heads * dim}", "${heads * depth}")
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "r.yaml")
    assert all("unknown variable 'depth'" in i.message for i in info.value.issues)
    assert (info.value.issues[0].line, info.value.issues[0].column) == _at(text, "depth")


def test_instances_are_bounded(monkeypatch):
    monkeypatch.setattr(schemas.block_args, "MAX_BLOCK_INSTANCES", 2)
    issue = _issue(ARGS)   # Heads, Heads_1, then Pair is the third
    assert issue.path == "model.layers.d" and "more than 2 instances" in issue.message


# Gemma 2 style: a repeat whose copies alternate a per-layer argument (here a scale, cycled [1, 2]) and
# take one from an exact-length list (shift)
PER_LAYER = """\
name: per_layer
vars: {hidden: 4, n: 4}
blocks:
  Layer:
    args: {scale: 1, shift: 0}
    inputs: [x]
    layers:
      fc: {type: Linear, in_features: ${hidden}, out_features: ${hidden}, bias: false}
    forward: |
      return fc(x) * ${scale} + ${shift}
model:
  layers:
    layers: {type: Layer, repeat: ${n}, per_layer: {scale: [1, 2], shift: [0, 0, 0, 3]}}
  forward: |
    return layers(x)
functions:
  forward: {x: {shape: [2, ${hidden}], dtype: float32}}
"""


def test_per_layer_arguments_differ_per_copy_of_a_repeat(tmp_path):
    recipe = load_recipe_text(PER_LAYER, "r.yaml")
    entry = recipe.model.layers["layers"]
    assert entry.types == ["Layer", "Layer_1", "Layer", "Layer_2"]
    path = tmp_path / "r.yaml"
    path.write_text(PER_LAYER)
    m = builder.build(path)
    assert sorted(m.params) == [f"layers.{i}.fc.weight" for i in range(4)]
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    h = x.astype(np.float64)
    for i, (scale, shift) in enumerate([(1, 0), (2, 0), (1, 0), (2, 3)]):
        h = (h @ m.params[f"layers.{i}.fc.weight"].astype(np.float64).T) * scale + shift
    np.testing.assert_allclose(m["forward"](x), h, rtol=1e-5, atol=1e-5)
    printed = load_recipe_text(dump_recipe(recipe), "printed.yaml")
    assert printed.model == recipe.model and printed.blocks == recipe.blocks


@pytest.mark.parametrize("old, new, path, message, at", [
    ("scale: [1, 2]", "scale: [1, 2, 3]", "model.layers.layers.per_layer.scale", "length divides repeat (4)",
     "[1, 2, 3]"),
    ("repeat: ${n}, ", "", "model.layers.layers.per_layer", "per_layer needs repeat", "{scale: [1, 2]"),
    ("shift: [0, 0, 0, 3]", "bias: [true]", "model.layers.layers.per_layer.bias",
     "block 'Layer' has no argument 'bias'", "bias: [true]"),
])
def test_per_layer_errors_are_at_the_field(old, new, path, message, at):
    text = PER_LAYER.replace(old, new)
    issue = _issue(text)
    assert issue.path == path and message in issue.message
    assert (issue.line, issue.column) == _at(text, at)
