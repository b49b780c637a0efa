"""recipes/hf/families.yaml itself: every family's recipe validates with its defaults, every variable it maps is
a variable of that recipe, no architecture is served twice; a malformed families file is one message; a family's
weights overrides add to its recipe's own."""
import json

import numpy as np
import pytest

from builder.build_model import validate
from builder.checkpoint import FAMILIES_FILE, HFCheckpointError, load_families, resolve_checkpoint


@pytest.mark.parametrize("name", sorted(load_families().families))
def test_family_recipe_builds_and_knows_the_mapped_vars(name):
    fam = load_families().families[name]
    recipe = FAMILIES_FILE.parent / fam.recipe
    declared = validate(recipe).recipe.vars
    assert set(fam.vars) <= set(declared), set(fam.vars) - set(declared)
    assert fam.architectures      # model_types may be empty: a second family of one model type (GPT2Model)


def test_each_architecture_has_one_family():
    archs = [a for f in load_families().families.values() for a in f.architectures]
    assert len(archs) == len(set(archs))


def test_malformed_families_file(tmp_path):
    bad = tmp_path / "families.yaml"
    bad.write_text("families:\n  x:\n    recipe: r.yaml\n    vars: {a: {form: b}}\n")
    with pytest.raises(HFCheckpointError, match="families.x.vars.a.form: Extra inputs are not permitted"):
        load_families(bad)


@pytest.mark.parametrize("rule, message", [
    ("{if_tensor: t, then: A, else: B, from: x}", "if_tensor takes then and else, and no from"),
    ("{if_tensor: t, then: A}", "if_tensor takes then and else"),
    ("{from: x, then: A, else: B}", "then / else need if_tensor"),
    ("{from: x, values: {[1]: A}}", "unhashable|must be a string, number or boolean"),
])
def test_malformed_var_choices(tmp_path, rule, message):
    bad = tmp_path / "families.yaml"
    bad.write_text(f"families:\n  x:\n    recipe: r.yaml\n    vars: {{a: {rule}}}\n")
    with pytest.raises(HFCheckpointError, match=message):
        load_families(bad)


def test_ignore_weights_and_the_tie_rule_add_to_the_recipe_weights(tmp_path):
    """A family's ``ignore_weights`` and tie rule give one ``weights.ignore`` / ``weights.map`` override each: the
    recipe's own entries as written (``${...}`` kept for its interpolation), then the family's."""
    from safetensors.numpy import save_file

    recipe = (FAMILIES_FILE.parent / "gpt2.yaml").resolve()
    families = tmp_path / "families.yaml"
    families.write_text(f"families:\n  g:\n    architectures: [G]\n    recipe: {json.dumps(str(recipe))}\n"
                        "    tie_word_embeddings: {default: true, map: {lm_head.weight: wte.weight, x.weight: x}}\n"
                        "    ignore_weights: ['extra.*']\n")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["G"]}))
    save_file({"x": np.zeros(1, np.float32), "x.weight": np.zeros(1, np.float32)}, str(tmp_path / "model.safetensors"))
    out = resolve_checkpoint(tmp_path, families_file=families).overrides
    assert out == ['weights.map={"h.{i}.attn.o_proj.": "${weights_prefix}h.{i}.attn.c_proj.", '   # x.weight: saved
                   '"lm_head.weight": "wte.weight"}',
                   'weights.ignore=["${weights_prefix}h.*.attn.bias", "${weights_prefix}h.*.attn.masked_bias", '
                   '"extra.*"]']
