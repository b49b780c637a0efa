"""Loading valid recipes: types after interpolation, overrides, variables, YAML features."""

import pytest

from schemas import (
    DTYPES, LAYER_TYPES, GELU, Conv1D, Embedding, InputSpec, LayerNorm, Linear, Recipe, RecipeError, ReLU, RMSNorm,
    SiLU, WeightsDef, load_recipe, load_recipe_text,
)


def test_example_recipe_loads_with_typed_values(llama_mlp_path):
    recipe = load_recipe(llama_mlp_path)

    assert isinstance(recipe, Recipe)
    assert recipe.name == "llama_mlp"
    assert recipe.vars == {"hidden_size": 4096, "intermediate_size": 11008, "dtype": "float16"}
    gate = recipe.model.layers["gate_proj"]
    assert isinstance(gate, Linear)
    assert (gate.in_features, gate.out_features, gate.bias, gate.dtype) == (4096, 11008, False, "float16")
    assert type(gate.in_features) is int
    assert recipe.model.layers["down_proj"].in_features == 11008
    assert list(recipe.model.layers) == ["gate_proj", "up_proj", "down_proj"]
    assert recipe.model.forward == "gate = gate_proj(x)\nup = up_proj(x)\nreturn down_proj(silu(gate) * up)\n"
    x = recipe.functions["forward"]["x"]
    assert isinstance(x, InputSpec)
    assert x.shape == ["batch_size", 4096]
    assert x.dtype == "float16"
    assert recipe.dtype == "float16"
    assert recipe.quantization == "none"
    assert recipe.weights == WeightsDef(prefix="model.layers.0.mlp.")
    assert recipe.source.file == str(llama_mlp_path)


def test_overrides_of_variables_change_layers_and_functions(llama_mlp_text):
    recipe = load_recipe_text(llama_mlp_text, overrides=["dtype=float32", "hidden_size=512"])

    assert recipe.vars["hidden_size"] == 512
    for name in ("gate_proj", "up_proj"):
        assert recipe.model.layers[name].in_features == 512
        assert recipe.model.layers[name].dtype == "float32"
    assert recipe.model.layers["down_proj"].out_features == 512
    assert recipe.functions["forward"]["x"].shape == ["batch_size", 512]
    assert recipe.functions["forward"]["x"].dtype == "float32"
    assert recipe.dtype == "float32"


def test_dotted_overrides(llama_mlp_text):
    recipe = load_recipe_text(llama_mlp_text, overrides=[
        "model.layers.gate_proj.bias=true",
        "vars.intermediate_size=64",
        "functions.forward.x.dtype=float32",
        "functions.forward.x.shape.0=8",
        "model.layers.up_proj.out_dtype=float32",  # a new key in an existing mapping
        "weights.prefix=''",
        "weights.path=null",
    ])

    assert recipe.model.layers["gate_proj"].bias is True
    assert recipe.model.layers["up_proj"].bias is False
    assert recipe.model.layers["up_proj"].out_features == 64
    assert recipe.model.layers["up_proj"].out_dtype == "float32"
    assert recipe.functions["forward"]["x"].shape == [8, 4096]
    assert recipe.functions["forward"]["x"].dtype == "float32"
    assert recipe.weights == WeightsDef(prefix="", path=None)


def test_bare_override_sets_top_level_field_when_no_variable_has_that_name(minimal_text):
    recipe = load_recipe_text(minimal_text, overrides=["dtype=bfloat16", "quantization=none", "name=renamed"])

    assert recipe.dtype == "bfloat16"
    assert recipe.quantization == "none"
    assert recipe.name == "renamed"


def test_override_value_is_parsed_as_yaml(minimal_text):
    text = minimal_text.replace("name: tiny", "name: tiny\nvars: {n: 1}")
    recipe = load_recipe_text(text, overrides=["n=[1, 2]", "model.layers.fc.bias=false", "description='4096'"])

    assert recipe.vars["n"] == [1, 2]
    assert recipe.model.layers["fc"].bias is False
    assert recipe.description == "4096"


def test_override_value_may_reference_variables(llama_mlp_text):
    recipe = load_recipe_text(llama_mlp_text, overrides=["model.layers.gate_proj.out_features=${hidden_size}"])

    assert recipe.model.layers["gate_proj"].out_features == 4096


def test_embedded_interpolation_substitutes_text_and_escape_keeps_literal(minimal_text):
    text = minimal_text + (
        "vars: {i: 3, base: model, prefix: '${base}.layers.${i}.'}\n"
        "description: 'costs $${dollars}, layer ${i}'\n"
        "weights: {prefix: \"${prefix}\", path: 'w/${base}_${i}.safetensors'}\n"
    )
    recipe = load_recipe_text(text)

    assert recipe.vars["prefix"] == "model.layers.3."
    assert recipe.weights.prefix == "model.layers.3."
    assert recipe.weights.path == "w/model_3.safetensors"
    assert recipe.description == "costs ${dollars}, layer 3"


def test_interpolation_in_forward_and_not_in_keys(minimal_text):
    text = minimal_text.replace("forward: fc(x)", "forward: ${act}(fc(x))") + "vars: {act: relu, fc: nope}\n"
    recipe = load_recipe_text(text)

    assert recipe.model.forward == "relu(fc(x))"
    assert list(recipe.model.layers) == ["fc"]


def test_variables_keep_their_type_through_chains(minimal_text):
    text = minimal_text.replace("in_features: 4", "in_features: ${a}") + "vars: {a: '${b}', b: '${c}', c: 16}\n"
    recipe = load_recipe_text(text)

    assert recipe.model.layers["fc"].in_features == 16
    assert recipe.vars == {"a": 16, "b": 16, "c": 16}


def test_anchors_aliases_and_merge_keys(minimal_text):
    text = minimal_text.replace(
        "  forward: fc(x)\n",
        "    up: {<<: *fc, out_features: 3}\n    same: *fc\n  forward: fc(x)\n",
    ).replace("    fc:\n", "    fc: &fc\n")
    recipe = load_recipe_text(text)

    assert recipe.model.layers["up"] == Linear(in_features=4, out_features=3)
    assert recipe.model.layers["same"] == Linear(in_features=4, out_features=2)


def test_every_layer_type_with_tvm_defaults():
    for name, model in LAYER_TYPES.items():   # the registry: each model under its own `type` name
        assert model.model_fields["type"].default == name
    assert Linear(in_features=2, out_features="n").model_dump() == {
        "repeat": None, "type": "Linear", "in_features": 2, "out_features": "n", "bias": True, "dtype": None,
        "out_dtype": None, "tensor_parallel": None}
    assert LayerNorm(normalized_shape=8).eps == 1e-5 and LayerNorm(normalized_shape=8).elementwise_affine
    norm = RMSNorm(hidden_size=8)
    assert (norm.axes, norm.epsilon, norm.bias) == (-1, 1e-5, False)
    conv = Conv1D(in_channels=1, out_channels=2, kernel_size=3)
    assert (conv.stride, conv.padding, conv.dilation, conv.groups, conv.bias) == (1, 0, 1, 1, True)
    assert Embedding(num="vocab_size", dim=64).num == "vocab_size"
    assert [ReLU().type, SiLU().type, GELU().type] == ["ReLU", "SiLU", "GELU"]
    assert "bfloat16" in DTYPES and len(DTYPES) == 13


def test_int_is_accepted_for_float_fields_and_axes_may_be_a_list(minimal_text):
    text = minimal_text.replace("  forward:", "    ln: {type: LayerNorm, normalized_shape: 4, eps: 1}\n"
                                             "    rms: {type: RMSNorm, hidden_size: 4, axes: [-2, -1]}\n  forward:", 1)
    layers = load_recipe_text(text).model.layers

    assert layers["ln"].eps == 1.0 and isinstance(layers["ln"].eps, float)
    assert layers["rms"].axes == [-2, -1]


@pytest.mark.parametrize("field, value", [
    ("bias", '"yes"'), ("bias", "1"), ("in_features", "1.5"), ("in_features", '"4"'), ("in_features", "-1"),
    ("in_features", "true"), ("out_features", "[2]"),
])
def test_strict_field_types_reject_coercible_values(minimal_text, field, value):
    layer = {"in_features": "4", "out_features": "2", field: value}
    body = "".join(f"      {key}: {text}\n" for key, text in layer.items())
    text = minimal_text.replace("      in_features: 4\n      out_features: 2\n", body)
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text)
    assert len(info.value.issues) == 1
    assert info.value.issues[0].path == f"model.layers.fc.{field}"


def test_yaml_1_2_exponent_floats_are_numbers(minimal_text):
    """``eps: 1e-12`` is a number (YAML 1.2; PyYAML's YAML 1.1 makes it a string), in the recipe, in a
    variable and in an override; quoted or ``!!str`` it stays a string."""
    text = minimal_text.replace("  forward:", "    ln: {type: LayerNorm, normalized_shape: 4, eps: 1e-12}\n"
                                             "    ln2: {type: LayerNorm, normalized_shape: 4, eps: ${tiny}}\n"
                                             "  forward:", 1)
    text = "vars: {tiny: 2E-6, label: '1e5', tagged: !!str 3e2}\n" + text
    recipe = load_recipe_text(text)
    assert recipe.model.layers["ln"].eps == 1e-12 and recipe.model.layers["ln2"].eps == 2e-6
    assert recipe.vars["label"] == "1e5" and recipe.vars["tagged"] == "3e2"
    over = load_recipe_text(text, overrides=["model.layers.ln.eps=5e-7", "tiny=1.5e3"])
    assert over.model.layers["ln"].eps == 5e-7 and over.model.layers["ln2"].eps == 1500.0
