"""Arithmetic in ``${...}`` (schemas.expressions through the loader): values and types, Python's floor
semantics, overrides feeding expressions, bounds, and errors at the file column of the offending token."""

import math

import pytest

from core.limits import MAX_VAR_EXPRESSION_CHARS, MAX_VAR_EXPRESSION_DEPTH
from schemas import RecipeError, load_recipe_text
from schemas.expressions import ExpressionError, evaluate, is_expression

RECIPE = """\
name: arith
vars: {hidden_size: 64, num_heads: 4, ratio: 2.5, eps: 1.0e-6}
model:
  layers:
    fc: {type: Linear, in_features: ${hidden_size}, out_features: ${3 * hidden_size}}
    down:
      type: Linear
      in_features: ${3 * hidden_size}
      out_features: ${hidden_size // num_heads}
  forward: return down(fc(x))
functions:
  forward:
    x: {shape: [batch, ${hidden_size}], dtype: float32}
"""


def _lookup(values):
    def lookup(name, offset):
        if name not in values:
            raise ExpressionError(f"unknown variable {name!r}", offset)
        return values[name]
    return lookup


def _load(text, overrides=()):
    return load_recipe_text(text, filename="r.yaml", overrides=overrides)


def _issue(text, overrides=()):
    with pytest.raises(RecipeError) as info:
        _load(text, overrides)
    assert len(info.value.issues) == 1, info.value.issues
    return info.value.issues[0]


# --- the evaluator ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("3 * h", 192), ("h // n", 16), ("(a + b) * 2", 14), ("-h", -64), ("- -h", 64), ("+h", 64),
    ("a % b", 3), ("h / n", 16.0), ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("10 - 4 - 3", 3), ("64 / 4 / 2", 8.0),
    ("-7 // 2", -4), ("-7 % 2", 1), ("7 % -2", -1), ("7.5 // 2", 3.0), ("-7.5 % 2", 0.5),
    ("0.5 * h", 32.0), (".5 + 1.", 1.5), ("1e-6 * 2", 2e-06), ("2.5E3", 2500.0), ("h*2", 128), ("  2  ", 2),
    ("h // n * n + h % n", 64), ("2 * -3", -6), ("f * 2", 5.0),
    ("h ** -0.5", 0.125), ("2 ** 3 ** 2", 512), ("-2 ** 2", -4), ("(-2) ** 3", -8), ("2 ** -1", 0.5),
    ("2 * n ** 2", 32), ("f ** 2", 6.25), ("(-8) ** 2.0", 64.0), ("2 ** 62", 2 ** 62),
])
def test_values_follow_python_semantics(text, expected):
    values = {"h": 64, "n": 4, "a": 3, "b": 4, "f": 2.5}
    got = evaluate(text, _lookup(values))
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("text, message, offset", [
    ("3 *", "expected an operand (a number, a variable or '(') after '*', got the end of the expression", 3),
    ("3 +", "after '+', got the end of the expression", 3), ("2 * -", "after '-', got the end", 5),
    ("3 * * 4", "expected an operand (a number, a variable or '(') after '*', got '*'", 4),
    ("(1 + 2", "'(' at character 1 is not closed", 6),
    ("1 + 2)", "unexpected ')' (no '(' is open)", 5),
    ("2 h", "expected an operator or the end of the expression, got 'h'", 2),
    ("h ** * 2", "after '**', got '*'", 5),
    ("(-8) ** 0.5", "a negative number to a fractional power", 5), ("0 ** -1", "zero to a negative power", 2),
    ("2 ** 63", "'**' gives an integer beyond int64", 2), ("10 ** 10 ** 10", "'**' gives an integer beyond", 3),
    ("10.0 ** 400", "'**' gives a float that is not finite", 5),
    ("h / 0", "division by zero", 2), ("h // (n - 4)", "division by zero", 2), ("h % 0", "modulo by zero", 2),
    ("h / 0.0", "division by zero", 2),
    ("x + 1", "unknown variable 'x'", 0),
    ("h & 1", "unexpected character '&'", 2),
    ("s * 2", "variable 's' is 'abc' (str), not a number", 0),
    ("t + 1", "variable 't' is True (bool), not a number", 0),
    ("9223372036854775807 + 1", "'+' gives an integer beyond int64", 20),
    ("-9223372036854775807 - 2", "'-' gives an integer beyond int64", 21),
    ("99999999999999999999", "'99999999999999999999' gives an integer beyond int64", 0),
    ("1e308 * 10", "'*' gives a float that is not finite (inf)", 6),
    ("1e999", "'1e999' gives a float that is not finite (inf)", 0),
    ("1" * 41, "a number literal has more than 40 characters", 0),
])
def test_errors_name_the_token(text, message, offset):
    with pytest.raises(ExpressionError) as info:
        evaluate(text, _lookup({"h": 64, "n": 4, "s": "abc", "t": True}))
    assert message in info.value.message and info.value.offset == offset


def test_bounds_of_length_and_depth():
    assert evaluate("(" * MAX_VAR_EXPRESSION_DEPTH + "1" + ")" * MAX_VAR_EXPRESSION_DEPTH, _lookup({})) == 1
    for deep in ("(" * (MAX_VAR_EXPRESSION_DEPTH + 1) + "1" + ")" * (MAX_VAR_EXPRESSION_DEPTH + 1),
                 "-" * (MAX_VAR_EXPRESSION_DEPTH + 1) + "1"):
        with pytest.raises(ExpressionError, match="nests more than"):
            evaluate(deep, _lookup({}))
    with pytest.raises(ExpressionError, match="characters long"):
        evaluate("1 +" * (MAX_VAR_EXPRESSION_CHARS // 3) + " 1", _lookup({}))
    # long but flat: no recursion per term (a chain of 200 additions)
    assert evaluate(" + ".join(["1"] * 200), _lookup({})) == 200


def test_plain_references_are_not_expressions():
    assert not is_expression("hidden_size") and not is_expression(" name ") and not is_expression("")
    assert is_expression("a-b") and is_expression("2") and is_expression("(x)") and is_expression(".5")


# --- through the loader ----------------------------------------------------------------------------

def test_whole_value_expressions_keep_their_type():
    recipe = _load(RECIPE)
    fc, down = recipe.model.layers["fc"], recipe.model.layers["down"]
    assert (fc.out_features, down.in_features, down.out_features) == (192, 192, 16)
    assert type(fc.out_features) is int


def test_expression_in_vars_and_inside_strings():
    text = RECIPE.replace("eps: 1.0e-6}", "eps: 1.0e-6, head_dim: '${hidden_size // num_heads}', "
                                          "half: '${ratio / 2}'}")
    text = text.replace("forward: return down(fc(x))", "forward: 'return reshape(down(fc(x)), [batch, ${num_heads}, "
                                                "${head_dim // num_heads}])'")
    recipe = _load(text)
    assert recipe.vars["head_dim"] == 16 and recipe.vars["half"] == 1.25
    assert recipe.model.forward == "return reshape(down(fc(x)), [batch, 4, 4])"


def test_expression_in_a_flow_mapping_with_spaces():
    recipe = _load(RECIPE.replace("x: {shape: [batch, ${hidden_size}], dtype: float32}",
                                  "x: {shape: [batch, ${hidden_size + 0}], dtype: float32}"))
    assert recipe.functions["forward"]["x"].shape == ["batch", 64]


def test_overrides_feed_expressions():
    recipe = _load(RECIPE, ["hidden_size=2048", "num_heads=32"])
    assert recipe.model.layers["fc"].out_features == 6144
    assert recipe.model.layers["down"].out_features == 64


def test_override_value_may_be_an_expression():
    recipe = _load(RECIPE, ["num_heads=${hidden_size // 16}"])
    assert recipe.vars["num_heads"] == 4


def test_unknown_variable_at_its_column():
    text = RECIPE.replace("${3 * hidden_size}}", "${3 * hiden_size}}")
    issue = _issue(text)
    line = text.splitlines().index(next(l for l in text.splitlines() if "hiden_size" in l)) + 1
    assert (issue.file, issue.line, issue.path) == ("r.yaml", line, "model.layers.fc.out_features")
    assert issue.column == text.splitlines()[line - 1].index("hiden_size") + 1
    assert "unknown variable 'hiden_size'; did you mean 'hidden_size'?" in issue.message
    assert issue.message.startswith("in ${3 * hiden_size}: ")


def test_missing_operand_in_a_block_value():
    text = RECIPE.replace("      in_features: ${3 * hidden_size}", "      in_features: ${3 *}")
    issue = _issue(text)
    lines = text.splitlines()
    line = next(i for i, l in enumerate(lines) if "${3 *}" in l) + 1
    assert (issue.line, issue.column) == (line, lines[line - 1].index("}") + 1)
    assert "expected an operand (a number, a variable or '(') after '*'" in issue.message


def test_error_inside_a_longer_string_points_into_it():
    text = RECIPE.replace("forward: return down(fc(x))", "forward: 'return reshape(x, [batch, ${num_heads % 0}])'")
    issue = _issue(text)
    lines = text.splitlines()
    line = next(i for i, l in enumerate(lines) if "% 0" in l) + 1
    assert (issue.line, issue.column, issue.path) == (line, lines[line - 1].index("%") + 1, "model.forward")
    assert "modulo by zero" in issue.message


def test_error_in_an_override_names_the_override():
    issue = _issue(RECIPE, ["num_heads=${hidden_size // 0}"])
    assert issue.line is None and "num_heads=" in issue.file and "division by zero" in issue.message


def test_problem_of_a_variable_used_is_reported_once_at_the_variable():
    text = RECIPE.replace("eps: 1.0e-6}", "eps: 1.0e-6, a: '${b + 1}', b: '${a * 2}'}")
    text = text.replace("${3 * hidden_size}}", "${a * 2}}")
    with pytest.raises(RecipeError) as info:
        _load(text)
    messages = [i.message for i in info.value.issues]
    assert sum("cycle" in m for m in messages) == 1 and not any("unknown" in m for m in messages)


def test_non_finite_and_int64_results_are_refused():
    issue = _issue(RECIPE.replace("ratio: 2.5", "ratio: 1.0e300").replace("${3 * hidden_size}}", "${ratio * ratio}}"))
    assert "not finite" in issue.message
    issue = _issue(RECIPE.replace("hidden_size: 64", "hidden_size: 4294967296")
                   .replace("${3 * hidden_size}}", "${hidden_size * hidden_size * 2}}"))
    assert "beyond int64" in issue.message


def test_float_result_where_an_int_is_expected_is_a_validation_error():
    issue = _issue(RECIPE.replace("${hidden_size // num_heads}", "${hidden_size / num_heads}"))
    assert issue.path == "model.layers.down.out_features" and "from ${hidden_size / num_heads}" in issue.message


def test_plain_reference_and_escape_unchanged():
    recipe = _load(RECIPE.replace("forward: return down(fc(x))",
                                  "forward: 'return down(fc(x))  # $${3 * 2} ${ hidden_size }'"))
    assert recipe.model.forward == "return down(fc(x))  # ${3 * 2} 64"
    assert math.isclose(recipe.vars["eps"], 1e-6)


def test_error_in_a_block_scalar_and_in_a_quoted_value_at_the_column():
    text = RECIPE.replace("forward: return down(fc(x))",
                          "forward: |\n    y = down(fc(x))\n    return reshape(y, [batch, ${num_heads +}])")
    issue = _issue(text)
    lines = text.splitlines()
    line = next(i for i, l in enumerate(lines) if "num_heads +}" in l) + 1
    assert (issue.line, issue.column) == (line, lines[line - 1].index("+}") + 2)
    assert "after '+', got the end of the expression" in issue.message
    text = RECIPE.replace("out_features: ${3 * hidden_size}}", "out_features: '${3 * (hidden_size}'}")
    issue = _issue(text)
    line = next(i for i, l in enumerate(text.splitlines()) if "(hidden_size}" in l) + 1
    assert (issue.line, issue.column) == (line, text.splitlines()[line - 1].index("}'") + 1)
    assert "'(' at character 5 is not closed" in issue.message


def test_a_validation_error_of_an_expression_names_the_overrides_it_read():
    issue = _issue(RECIPE.replace("${hidden_size // num_heads}", "${hidden_size - 100}"), ["hidden_size=64"])
    assert issue.path == "model.layers.down.out_features"
    assert issue.message.endswith("(from ${hidden_size - 100} set by override hidden_size=64)")


@pytest.mark.parametrize("text, expected", [
    ("int(h * 0.25)", 16), ("int(f * 2)", 5), ("int(h)", 64), ("int(0.3 * 80) + 1", 25), ("2 * int(h / n)", 32),
    ("int * 2", 6),   # int alone is a variable name
])
def test_int_of_a_whole_value(text, expected):
    got = evaluate(text, _lookup({"h": 64, "n": 4, "f": 2.5, "int": 3}))
    assert got == expected and type(got) is int


@pytest.mark.parametrize("text, message, offset", [
    ("int(f)", "int(...) of 2.5, which is not an integer", 0),
    ("1 + int(h * 0.3)", "int(...) of 19.2, which is not an integer", 4),
    ("int(h", "is not closed", 5),
])
def test_int_of_a_fraction_is_an_error_not_a_truncation(text, message, offset):
    with pytest.raises(ExpressionError) as info:
        evaluate(text, _lookup({"h": 64, "f": 2.5}))
    assert message in info.value.message and info.value.offset == offset


def test_int_in_a_recipe_var():
    text = RECIPE.replace("${hidden_size // num_heads}", "${int(hidden_size * 0.25)}")
    assert _load(text).model.layers["down"].out_features == 16
