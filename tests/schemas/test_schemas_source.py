"""SourceMap: file positions of recipe values, including positions inside string values."""

from schemas import Linear, Recipe, RecipeError, SourceMap, load_recipe_text

FORWARD_TEXT = """\
name: t
model:
  layers: {}
  forward: |
    a = relu(x)
    b = a + 1
    return silu(b)
functions: {f: {x: {shape: [2], dtype: float32}}}
weights: {prefix: "p.", path: w.bin}
"""


def test_text_position_in_literal_block_scalar():
    recipe = load_recipe_text(FORWARD_TEXT, filename="f.yaml")
    # "silu" is at line 3, column 7 of the forward text; in the file it is line 7, column 12.
    assert recipe.model.forward.splitlines()[2][7:11] == "silu"
    assert recipe.source.text_position("model.forward", 3, 7) == (7, 12)
    assert recipe.source.text_position(("model", "forward"), 1, 0) == (5, 5)


def test_text_position_in_strip_chomping_block_with_deeper_indentation():
    text = FORWARD_TEXT.replace("forward: |", "forward: |-").replace("\n    ", "\n        ")
    recipe = load_recipe_text(text)
    assert recipe.model.forward.endswith("silu(b)")
    assert recipe.source.text_position("model.forward", 2, 4) == (6, 13)


def test_text_position_in_plain_and_quoted_scalars():
    recipe = load_recipe_text(FORWARD_TEXT.replace("forward: |\n    a = relu(x)\n    b = a + 1\n    return silu(b)",
                                                   "forward: silu(x)"))
    assert recipe.source.text_position("model.forward", 1, 5) == (4, 17)
    assert recipe.source.text_position("weights.prefix", 1, 1) == (6, 21)  # after the opening quote


def test_position_of_values_and_nearest_ancestor():
    source = load_recipe_text(FORWARD_TEXT).source
    assert source.position("weights.path") == (9, 31)
    assert source.position(("functions", "f", "x", "shape", 0)) == source.position("functions.f.x.shape.0") == (8, 29)
    assert source.position("weights.map.something") == (9, 10)  # not in the file: nearest recorded ancestor
    assert source.key_position("weights.path") == (9, 25)
    assert source.position(()) == (1, 1)


def test_error_helper_builds_a_located_recipe_error():
    source = load_recipe_text(FORWARD_TEXT, filename="f.yaml").source
    error = source.error("model.forward", "undefined name 'relu'")
    assert isinstance(error, RecipeError)
    assert str(error) == "f.yaml:4:12: model.forward: undefined name 'relu'"


def test_values_set_by_overrides_have_no_file_position_and_errors_cite_the_override():
    recipe = load_recipe_text(FORWARD_TEXT, filename="f.yaml", overrides=["model.forward=relu(x)"])
    source = recipe.source
    assert source.position("model.forward") is None
    assert source.text_position("model.forward", 1, 0) is None
    assert source.override("model.forward") == "model.forward=relu(x)"
    assert str(source.error("model.forward", "bad")) == "<override model.forward=relu(x)>: model.forward: bad"
    assert source.position("model.layers") == (3, 11)


def test_recipe_built_in_code_has_an_empty_source_map():
    recipe = Recipe(name="n", model={"layers": {"fc": Linear(in_features=1, out_features=1)}, "forward": "fc(x)"},
                    functions={"f": {"x": {"shape": [1], "dtype": "float32"}}})
    assert isinstance(recipe.source, SourceMap)
    assert recipe.source.position("model.forward") is None
    assert str(recipe.source.error("model", "boom")) == "<recipe>: model: boom"
