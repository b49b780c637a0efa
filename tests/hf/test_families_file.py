"""recipes/hf/families.yaml itself: every family's recipe validates with its defaults, every variable it maps is
a variable of that recipe, no architecture is served twice; a malformed families file is one message."""
import pytest

from builder.build_model import validate
from builder.checkpoint import FAMILIES_FILE, HFCheckpointError, load_families


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
