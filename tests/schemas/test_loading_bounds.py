"""Recipe loading is bounded however the YAML, the ``${var}`` values and the overrides are combined
(issue 12, items 4, 6 and 10): every excess is a RecipeError at its position, never a RecursionError,
a memory blow-up or a hang, and messages quote user values cut short."""
from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schemas import RecipeError, load_recipe_text, source
from schemas.errors import override_label, printable, shorten
from core.limits import MAX_DEPTH, MAX_FUNCTIONS, MAX_NDIM, MAX_RECIPE_BYTES, MAX_VALUES

ROOT = Path(__file__).resolve().parents[2]

BASE = """\
name: base
model:
  layers:
    fc: {type: Linear, in_features: 16, out_features: 8}
  forward: return fc(x)
functions:
  forward:
    x: {shape: [batch, 16], dtype: float32}
"""


def _issues(text, overrides=()):
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, filename="r.yaml", overrides=overrides)
    return info.value.issues


def _one(issues, path, message):
    found = [i for i in issues if i.path == path and message in i.message]
    assert found, "\n".join(map(str, issues))
    return found[0]


def test_a_chain_of_merge_keys_is_bounded():
    """``<<: *previous`` builds the merged mapping at the same path: 600 of them nested the builder's
    recursion 600 deep (a RecursionError)."""
    rows = ["a0: &a0 {k: 1}"] + [f"a{i}: &a{i} {{<<: *a{i - 1}}}" for i in range(1, 600)]
    text = BASE + "extra:\n" + "".join(f"  {row}\n" for row in rows)
    issue = _one(_issues(text), f"extra.a{MAX_DEPTH - 2}", f"nested more than {MAX_DEPTH} levels deep")
    assert (issue.file, issue.line) == ("r.yaml", 10)      # where the limit was reached (a0's mapping)


def test_a_short_chain_of_merge_keys_still_loads():
    rows = ["a0: &a0 {k: 1}"] + [f"a{i}: &a{i} {{<<: *a{i - 1}, k{i}: {i}}}" for i in range(1, 20)]
    text = BASE.replace("name: base", "name: base\nvars:\n" + "".join(f"  {row}\n" for row in rows).rstrip())
    recipe = load_recipe_text(text)
    assert recipe.vars["a19"] == {"k": 1, **{f"k{i}": i for i in range(1, 20)}}


def test_variables_nested_inside_each_others_values_are_bounded():
    """Each variable nests 60 levels and references the next one innermost: resolving the chain
    recursed 64 x 60 levels (a RecursionError); the nesting is bounded across the variables."""
    rows = [f"  v{i}: " + "[" * 60 + (f"'${{v{i + 1}}}'" if i < 63 else "1") + "]" * 60 for i in range(64)]
    text = BASE.replace("name: base", "name: base\nvars:\n" + "\n".join(rows))
    issues = _issues(text)
    issue = _one(issues, "vars.v1" + ".0" * 4, f"nested more than {MAX_DEPTH} levels deep through the values of variables")
    assert issue.line == 4    # v1's line: v0's 60 levels + v1's first 4 reach the limit
    _one(issues, "vars.v0" + ".0" * 60, f"${{v1}} nests its value more than {MAX_DEPTH} levels deep here")


def test_variables_referencing_each_other_within_the_bound_resolve():
    text = BASE.replace("name: base", "name: base\nvars:\n  a: [[${b}]]\n  b: [[${c}]]\n  c: [1, 2]")
    assert load_recipe_text(text).vars["a"] == [[[[[1, 2]]]]]


def test_overrides_share_the_recipes_value_budget():
    """Three overrides of 74,733 values each were each below the bound, together above it."""
    value = "[" + ", ".join(["&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
                            + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 5)]) + "]"
    text = BASE.replace("name: base", "name: base\nvars: {}")
    overrides = [f"vars.y{i}={value}" for i in range(3)]
    recipe = load_recipe_text(text, overrides=overrides[:2])   # 2 x 74,733 values: within the bound
    assert len(recipe.vars["y1"][4]) == 9
    issues = _issues(text, overrides)
    assert len(issues) == 1 and issues[0].file.startswith("<override vars.y2=[&a0")
    assert f"expands to more than {MAX_VALUES:,} values" in issues[0].message
    assert "override values count too" in issues[0].message


def test_overrides_together_are_bounded_in_length():
    big = "x" * (MAX_RECIPE_BYTES // 2)
    issues = _issues(BASE, [f"name={big}", f"description={big}", "name=ok"])
    assert len(issues) == 1 and issues[0].path == "description"
    assert "more than 4,194,304 characters long in all with this one" in issues[0].message
    assert len(str(issues[0])) < 300     # the override is cited cut short


def test_many_overrides_in_a_subprocess():
    """100 overrides of 74,733 values each, every one within the bound, built 7.5 million values
    (about 2 GB); with one budget for all, the third one is refused and the rest are not built."""
    value = "[" + ", ".join(["&a0 [x, x, x, x, x, x, x, x, x]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
                                                                  for i in range(1, 5)]) + "]"
    text = BASE.replace("name: base", "name: base\nvars: {}")
    script = textwrap.dedent(f"""
        import sys
        from schemas import RecipeError, load_recipe_text, source
        try:
            load_recipe_text({text!r},
                             overrides=[f"vars.y{{i}}={value}" for i in range(100)])
        except RecipeError as exc:
            print(len(exc.issues), exc.issues[0].file[:19], exc.issues[0].message)
            sys.exit(2)
    """)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         preexec_fn=limit)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stdout.startswith("98 <override vars.y2=[ invalid value: the YAML expands to more than 200,000 values")


@pytest.mark.parametrize("edit,path,message", [
    (("[batch, 16]", "[" + "1, " * MAX_NDIM + "16]"), "functions.forward.x.shape",
     f"a shape may have at most {MAX_NDIM} dims, got {MAX_NDIM + 1}"),
    (("  forward:\n    x:", "".join(f"  f{i}:\n    x: {{shape: [1], dtype: float32}}\n" for i in range(MAX_FUNCTIONS))
      + "  forward:\n    x:"), "functions", f"at most {MAX_FUNCTIONS} functions"),
    (("in_features: 16, out_features: 8", "hidden_size: 16, axes: 99999999999999999999"), "model.layers.fc.axes",
     "axis 99999999999999999999 is out of range: a tensor has at most 32 dims"),
    (("in_features: 16, out_features: 8", "hidden_size: 16, axes: [-1, -33]"), "model.layers.fc.axes",
     "axis -33 is out of range"),
])
def test_size_bounds_of_the_schema(edit, path, message):
    text = BASE.replace(*edit).replace("type: Linear", "type: RMSNorm" if "axes" in edit[1] else "type: Linear")
    _one(_issues(text), path, message)


def test_group_size_is_bounded():
    issues = _issues(BASE + "quantization: {kind: group, group_size: 18446744073709551616}\n")
    _one(issues, "quantization.group_size", "group_size must be positive and at most 2**40, got 18446744073709551616")


@pytest.mark.parametrize("text,path", [
    (BASE.replace("out_features: 8", "out_features: 1" + "0" * 4000), "model.layers.fc.out_features"),
    (BASE.replace("type: Linear", "type: L" + "i" * 5000), "model.layers.fc.type"),
    (BASE.replace("name: base", "name: base\n? " + "x" * 3000 + "\n: 1"), "x" * 3000),
    (BASE.replace("name: base", "name: !!int " + "9" * 5000), "name"),
])
def test_long_user_values_are_quoted_short(text, path):
    issues = _issues(text)
    assert issues and all(len(i.message) < 400 for i in issues), [len(i.message) for i in issues]


@pytest.mark.parametrize("segment", ["9" * 5000, "\u00b2", "\u0663", "2"])
def test_an_override_index_must_be_a_small_ascii_number(segment):
    """``int("9" * 5000)`` raised ValueError (the int conversion limit) and ``int("\u00b2")`` too: both
    escaped as internal errors."""
    issues = _issues(BASE, [f"functions.forward.x.shape.{segment}=1"])
    assert len(issues) == 1 and issues[0].file.startswith("<override functions.forward.x.shape.")
    assert "is not an index of functions.forward.x.shape (a list of 2 items)" in issues[0].message
    assert len(str(issues[0])) < 400


def test_long_overrides_are_cited_short():
    issues = _issues(BASE, ["quantization=" + "q" * 100_000])
    assert len(str(issues[0])) < 600
    assert issues[0].file == "<override quantization=" + "q" * 67 + "... (100,013 characters)>"


@pytest.mark.parametrize("loader", ["SafeLoader", "CSafeLoader"])
def test_both_yaml_loaders_report_the_same_positions(monkeypatch, loader):
    """libyaml parses a 4 MiB recipe about 10x faster than PyYAML's Python parser; either one is used
    (whichever PyYAML has) with the same checks, and positions count characters, not UTF-8 bytes."""
    import yaml

    if not hasattr(yaml, loader):
        pytest.skip("PyYAML without libyaml")
    monkeypatch.setattr(source, "_LOADER", getattr(yaml, loader))
    issues = _issues("na\u00efve: \"\u00e9\u00e9\x07\"\n")
    assert (issues[0].line, issues[0].column) == (1, 11) and "characters are not allowed" in issues[0].message
    issues = _issues(BASE.replace("name: base", 'name: "\\ud800"'))
    assert (issues[0].line, issues[0].column) in ((1, 7), (1, 10)) and "Unicode" in issues[0].message
    issue = _one(_issues(BASE.replace("out_features: 8", "out_features: !!int 1e3")),
                 "model.layers.fc.out_features", "cannot read '1e3' as int")
    assert (issue.line, issue.column) == (4, 55)


def test_helpers():
    assert shorten("abc") == "'abc'"
    assert shorten("a" * 1000) == "'" + "a" * 39 + "..." + "a" * 9 + "' (1,002 characters)"
    assert shorten(10 ** 5000) == "an integer of about 5,001 digits"
    assert override_label("a=1") == "<override a=1>"
    assert printable("\x1b[2Jx\ny") == "\\x1b[2Jx\\ny"
