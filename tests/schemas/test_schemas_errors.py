"""Problems in recipes: every one reported at once, at file:line:column with the dotted field path."""

import pytest

from schemas import LAYER_TYPES, RecipeError, RecipeIssue, load_recipe, load_recipe_text

#: The registered layer types as messages list them (case-insensitive order): read from the registry, so a
#: new layer type needs no edit here.
VALID_TYPES = ", ".join(sorted(LAYER_TYPES, key=str.lower))


def issues_of(text, overrides=(), filename="r.yaml"):
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, filename=filename, overrides=overrides)
    assert str(info.value) == "\n".join(str(issue) for issue in info.value.issues)
    return info.value.issues


def test_recipe_error_is_a_value_error_with_one_line_per_issue():
    error = RecipeError([RecipeIssue("a.yaml", 3, 5, "model.forward", "bad"),
                         RecipeIssue("a.yaml", None, None, "", "x")])
    assert isinstance(error, ValueError)
    assert str(error) == "a.yaml:3:5: model.forward: bad\na.yaml: x"


CONV = """name: c
model:
  layers:
    conv: {type: Conv1D, in_channels: 4, out_channels: 6, kernel_size: 3, SETTINGS}
    norm: {type: RMSNorm, hidden_size: 6, epsilon: EPS}
  forward: |
    return norm(conv(x))
functions:
  forward:
    x: {shape: [1, 4, 9], dtype: float32}
"""


@pytest.mark.parametrize("settings, eps, path, message", [
    ("stride: 0", "1.0e-5", "model.layers.conv.stride", "greater than or equal to 1, got 0"),
    ("dilation: 0", "1.0e-5", "model.layers.conv.dilation", "greater than or equal to 1, got 0"),
    ("padding: -1", "1.0e-5", "model.layers.conv.padding", "greater than or equal to 0, got -1"),
    ("groups: 0", "1.0e-5", "model.layers.conv.groups", "greater than or equal to 1, got 0"),
    ("groups: 4", "1.0e-5", "model.layers.conv", "out_channels (6) must be a multiple of groups (4)"),
    ("groups: 2", "-1.0", "model.layers.norm.epsilon", "greater than or equal to 0, got -1.0"),
    ("groups: 2", ".nan", "model.layers.norm.epsilon", "a finite number, got nan"),
])
def test_layer_settings_out_of_range_are_recipe_errors(settings, eps, path, message):
    """Conv1D settings (a zero stride used to divide by zero) and norm epsilons are checked
    by the schema, at the field."""
    text = CONV.replace("SETTINGS", settings).replace("EPS", eps)
    [issue] = issues_of(text)
    assert issue.path == path and message in issue.message and issue.line is not None
    load_recipe_text(CONV.replace("SETTINGS", "groups: 2").replace("EPS", "1.0e-5"))


def test_model_dtype_must_be_a_float_dtype():
    """The top-level dtype casts the floating-point parameters: an integer dtype is an error at
    the field (it used to fail later, at the forward line)."""
    text = CONV.replace("SETTINGS", "groups: 2").replace("EPS", "1.0e-5") + "dtype: int8\n"
    [issue] = issues_of(text)
    assert issue.path == "dtype" and issue.line == text.count("\n") and "'float16', 'bfloat16'" in issue.message


def test_misspelled_key_gives_one_issue_at_the_key_with_a_suggestion(minimal_text):
    text = minimal_text.replace("      out_features: 2\n", "      out_features: 2\n      bais: false\n")
    [issue] = issues_of(text)
    assert str(issue) == "r.yaml:8:7: model.layers.fc.bais: unknown field 'bais'; did you mean 'bias'?"


def test_unknown_top_level_key_lists_valid_fields(minimal_text):
    [issue] = issues_of(minimal_text + "colour: red\n")
    assert (issue.line, issue.column, issue.path) == (14, 1, "colour")
    assert "valid fields: name, description, vars, blocks, model, functions" in issue.message


@pytest.mark.parametrize("line, expected", [
    ('      bias: "yes"', "r.yaml:8:13: model.layers.fc.bias: Input should be a valid boolean, got 'yes'"),
    ("      stride: 1", "r.yaml:8:7: model.layers.fc.stride: unknown field 'stride'; valid fields:"),
])
def test_wrong_value_type_is_located_at_the_value(minimal_text, line, expected):
    text = minimal_text.replace("      out_features: 2\n", f"      out_features: 2\n{line}\n")
    [issue] = issues_of(text)
    assert str(issue).startswith(expected)


def test_float_for_an_int_field_is_located_at_the_value(minimal_text):
    [issue] = issues_of(minimal_text.replace("in_features: 4", "in_features: 1.5"))
    assert (issue.file, issue.line, issue.column, issue.path) == ("r.yaml", 6, 20, "model.layers.fc.in_features")
    assert "1.5" in issue.message


def test_unknown_layer_type_gives_one_issue_naming_valid_types(minimal_text):
    [issue] = issues_of(minimal_text.replace("type: Linear", "type: Linaer"))
    assert str(issue) == f"r.yaml:5:13: model.layers.fc.type: unknown layer type 'Linaer'; did you mean 'Linear'?; valid types: {VALID_TYPES}"


def test_missing_layer_type_gives_one_issue(minimal_text):
    [issue] = issues_of(minimal_text.replace("      type: Linear\n", ""))
    assert (issue.line, issue.column, issue.path) == (5, 7, "model.layers.fc")
    assert issue.message == f"missing required field 'type'; valid types: {VALID_TYPES}"


def test_missing_field_is_located_at_the_parent_mapping(minimal_text):
    [issue] = issues_of(minimal_text.replace("      out_features: 2\n", ""))
    assert str(issue) == "r.yaml:5:7: model.layers.fc: missing required field 'out_features'"


def test_invalid_names_are_located_at_the_key(minimal_text):
    [issue] = issues_of(minimal_text.replace("    fc:\n", "    2fc:\n"))
    assert (issue.line, issue.column, issue.path) == (4, 5, "model.layers.2fc")
    assert "not a valid name" in issue.message


def test_unclosed_bracket_is_invalid_yaml_at_its_position():
    [issue] = issues_of("name: x\nmodel: {forward: f(x)\nfunctions: {}\n")
    assert (issue.line, issue.column, issue.path) == (3, 10, "")
    assert issue.message.startswith("invalid YAML: ")
    assert str(issue).startswith("r.yaml:3:10: invalid YAML: ")


def test_duplicate_key_is_an_error_at_the_second_key(minimal_text):
    text = minimal_text.replace("      out_features: 2\n", "      out_features: 2\n      in_features: 8\n")
    [issue] = issues_of(text)
    assert str(issue) == ("r.yaml:8:7: model.layers.fc.in_features: "
                          "duplicate key 'in_features' (first defined at line 6, column 7)")


def test_top_level_must_be_a_mapping():
    [issue] = issues_of("- name: x\n")
    assert str(issue) == "r.yaml:1:1: a recipe must be a mapping of fields"
    for empty in ("", "# only a comment\n"):
        [issue] = issues_of(empty)
        assert str(issue) == "r.yaml:1:1: the recipe is empty: a recipe must be a mapping of fields"


def test_python_tags_are_rejected(minimal_text):
    [issue] = issues_of(minimal_text.replace("name: tiny", "name: !!python/object/apply:os.system [ls]"))
    assert (issue.line, issue.path) == (1, "name")


def test_unknown_variable_is_located_at_the_string_with_a_close_match(minimal_text):
    text = minimal_text.replace("in_features: 4", "in_features: ${hidden_sise}") + "vars: {hidden_size: 4}\n"
    [issue] = issues_of(text)
    assert str(issue) == ("r.yaml:6:20: model.layers.fc.in_features: unknown variable 'hidden_sise';"
                          " did you mean 'hidden_size'?")


def test_cycle_in_variables_is_reported_once(minimal_text):
    text = minimal_text.replace("in_features: 4", "in_features: ${a}") + "vars: {a: '${b}', b: '${c}', c: '${a}'}\n"
    [issue] = issues_of(text)
    assert issue.path.startswith("vars.")
    assert "cycle" in issue.message and "a -> b -> c -> a" in issue.message


def test_several_errors_are_reported_at_once_in_file_order(minimal_text):
    text = (minimal_text.replace("type: Linear", "type: Linear\n      bais: true")
            .replace("dtype: float32", "dtype: float33")
            .replace("shape: [batch_size, 4]", "shape: [batch size, 4]")
            + "quantization: q4\n")
    issues = issues_of(text)
    assert [(i.line, i.path) for i in issues] == [
        (6, "model.layers.fc.bais"),
        (13, "functions.forward.x.shape.0"),
        (14, "functions.forward.x.dtype"),
        (15, "quantization"),
    ]
    assert "valid presets: none" in issues[3].message
    assert "'float32'" in issues[2].message


def test_bare_override_matching_nothing_suggests_close_names(llama_mlp_text):
    [issue] = issues_of(llama_mlp_text, overrides=["hiden_size=512"])
    assert str(issue) == ("<override hiden_size=512>: hiden_size: no variable or recipe field named 'hiden_size';"
                          " did you mean 'hidden_size'?")


def test_override_errors(llama_mlp_text):
    issues = issues_of(llama_mlp_text, overrides=["hidden_size", "model.layrs.gate_proj.bias=true",
                                                  "functions.forward.x.shape.7=1", "hidden_size=[1"])
    assert [issue.file for issue in issues] == [
        "<override hidden_size>", "<override model.layrs.gate_proj.bias=true>",
        "<override functions.forward.x.shape.7=1>", "<override hidden_size=[1>"]
    assert issues[0].message == "expected KEY=VALUE"
    assert issues[1].message == "model has no 'layrs'; did you mean 'layers'?"
    assert "not an index" in issues[2].message
    assert issues[3].message.startswith("invalid value")


def test_invalid_value_set_by_override_cites_the_override(llama_mlp_text):
    issues = issues_of(llama_mlp_text, overrides=["model.layers.gate_proj.bias=maybe", "quantization=int4",
                                                  "model.layers.up_proj.bais=true"])
    assert sorted(str(issue) for issue in issues) == [
        "<override model.layers.gate_proj.bias=maybe>: model.layers.gate_proj.bias: "
        "Input should be a valid boolean, got 'maybe'",
        "<override model.layers.up_proj.bais=true>: model.layers.up_proj.bais: unknown field 'bais';"
        " did you mean 'bias'?",
        "<override quantization=int4>: quantization: unknown quantization preset 'int4'; valid presets: none, "
        "q0f32, q0f16, q0bf16, q4f16_1, q4f32_1, q4bf16_1, q8f16_1, q8f32_1, q8f16_pc, q8f32_pc",
    ]


def test_invalid_variable_set_by_override_names_it_at_each_use(llama_mlp_text):
    issues = issues_of(llama_mlp_text, overrides=["intermediate_size=1.5"])
    assert [(i.line, i.path) for i in issues] == [
        (6, "model.layers.gate_proj.out_features"), (7, "model.layers.up_proj.out_features"),
        (8, "model.layers.down_proj.in_features")]
    assert all("(from ${intermediate_size} set by override intermediate_size=1.5)" in i.message for i in issues)


def test_unreadable_file_is_a_recipe_error(tmp_path):
    with pytest.raises(RecipeError, match="cannot read recipe"):
        load_recipe(tmp_path / "missing.yaml")


def test_a_block_named_like_a_layer_type_is_refused_at_its_name(minimal_text):
    # `type: Conv1D` always builds the layer: a block of that name could never be used, so it is an error
    # (it used to be accepted and silently ignored)
    text = minimal_text + "blocks:\n  Conv1D:\n    inputs: [x]\n    forward: x\n  Mine:\n    forward: x\n"
    [issue] = issues_of(text)
    assert str(issue) == ("r.yaml:15:3: blocks.Conv1D: block name 'Conv1D' is the name of a layer type: a layer "
                          "entry `type: Conv1D` builds that layer, never this block; rename the block")
