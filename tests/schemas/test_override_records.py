"""SourceMap's record of which paths ``KEY=VALUE`` overrides set (issue 40 item 11): a trie keyed by path
segment, so many overrides are recorded and looked up in linear work, with the same answers as the
plain rule (the override of the path or of its nearest overridden ancestor; an override forgets the
ones recorded below its path)."""

import random

import pytest

from schemas import RecipeError, SourceMap, load_recipe_text
from tests.schemas.conftest import LLAMA_MLP


def _reference_override(records: list[tuple[tuple, str]], path: tuple) -> str | None:
    """The rule spelled out: replay the records (each drops those at or below its path), then take the
    deepest recorded prefix of ``path``."""
    live: dict[tuple, str] = {}
    for p, o in records:
        live = {q: v for q, v in live.items() if q[:len(p)] != p}
        live[p] = o
    for depth in range(len(path), -1, -1):
        if path[:depth] in live:
            return live[path[:depth]]
    return None


def test_override_lookup_agrees_with_the_rule_on_random_paths():
    rng = random.Random(40)
    segments = ["a", "b", 0, 1, "c"]
    paths = [tuple(rng.choice(segments) for _ in range(rng.randint(1, 4))) for _ in range(60)]
    source = SourceMap("f.yaml")
    records = []
    for step in range(400):
        path = rng.choice(paths)
        override = f"o{step}"
        source.record_override(path, override)
        records.append((path, override))
        probe = rng.choice(paths) + tuple(rng.choice(segments) for _ in range(rng.randint(0, 2)))
        assert source.override(probe) == _reference_override(records, probe), (records[-5:], probe)
    for probe in paths + [(), ("zz",)]:
        assert source.override(probe) == _reference_override(records, probe)


def test_an_override_of_an_ancestor_replaces_the_ones_below_it_and_a_later_descendant_wins_below():
    source = SourceMap("f.yaml")
    source.record_override(("model", "layers", "fc", "bias"), "model.layers.fc.bias=true")
    source.record_override(("model", "layers"), "model.layers={}")
    assert source.override("model.layers.fc.bias") == "model.layers={}"
    source.record_override(("model", "layers", "fc"), "model.layers.fc={}")
    assert source.override(("model", "layers", "fc", "bias")) == "model.layers.fc={}"
    assert source.override("model.layers.other") == "model.layers={}"
    assert source.override("model") is None and source.override("model.forward") is None
    assert source.override("vars.0") is None


@pytest.mark.parametrize("n", [1_000, 4_000])
def test_recording_many_overrides_is_linear_work(n):
    overrides = [f"vars.v{i}={i}" for i in range(n)]
    recipe = load_recipe_text(LLAMA_MLP, overrides=overrides)
    source = recipe.source
    # each override's path has two segments: recording all of them visits 2n trie nodes, plus the
    # lookups the loader makes (a constant number per recipe field, not per override)
    assert 2 * n <= source.override_steps <= 2 * n + 200, source.override_steps
    assert source.override(("vars", f"v{n - 1}")) == f"vars.v{n - 1}={n - 1}"
    assert recipe.vars[f"v{n - 1}"] == n - 1


def test_an_error_in_one_of_many_overrides_still_names_that_override():
    overrides = [f"vars.v{i}={i}" for i in range(2_000)] + ["name=[1, 2]"]
    with pytest.raises(RecipeError) as info:
        load_recipe_text(LLAMA_MLP, overrides=overrides)
    assert [str(i).split(": ")[0] for i in info.value.issues] == ["<override name=[1, 2]>"]
