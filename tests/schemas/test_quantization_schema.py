"""The recipe's ``quantization`` field: preset names, full specs per kind, validation and overrides."""
import pytest

from schemas import (
    QUANTIZATION_PRESETS, GroupQuantization, NoQuantization, PerChannelQuantization, RecipeError,
    load_recipe_text, register_quantization_preset, resolve_quantization,
)


def line_of(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def issues_of(text, overrides=()):
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, filename="r.yaml", overrides=overrides)
    return info.value.issues


def test_required_presets_exist_and_mean_what_their_names_say():
    for name in ("none", "q0f32", "q0f16", "q0bf16", "q4f16_1", "q4f32_1", "q4bf16_1", "q8f16_1", "q8f32_1",
                 "q8f32_pc"):
        assert name in QUANTIZATION_PRESETS
    q4 = QUANTIZATION_PRESETS["q4f16_1"]
    assert (q4.kind, q4.bits, q4.group_size, q4.storage_dtype, q4.model_dtype) == ("group", 4, 32, "uint32", "float16")
    assert (q4.elements_per_word, q4.max_int, q4.zero_point) == (8, 7, 7)
    q8 = QUANTIZATION_PRESETS["q8f32_1"]
    assert (q8.bits, q8.elements_per_word, q8.max_int, q8.model_dtype) == (8, 4, 127, "float32")
    pc = QUANTIZATION_PRESETS["q8f32_pc"]
    assert (pc.kind, pc.storage_dtype, pc.zero_point) == ("per_channel", "int8", 0)
    assert QUANTIZATION_PRESETS["q0bf16"] == NoQuantization(model_dtype="bfloat16")
    assert QUANTIZATION_PRESETS["none"].model_dtype is None


def test_preset_name_and_full_spec(llama_mlp_text):
    recipe = load_recipe_text(llama_mlp_text, overrides=["quantization=q4f16_1"])
    assert recipe.quantization == "q4f16_1"
    assert recipe.quantization_spec == QUANTIZATION_PRESETS["q4f16_1"]
    text = llama_mlp_text.replace("quantization: none", """quantization:
  kind: group
  bits: 4
  group_size: 32
  storage_dtype: uint32
  model_dtype: float16
  exclude: ["lm_head", "*.norm*"]
  quantize_embedding: true""")
    spec = load_recipe_text(text).quantization
    assert isinstance(spec, GroupQuantization)
    assert spec.exclude == ["lm_head", "*.norm*"] and spec.group_size == 32
    pc = load_recipe_text(llama_mlp_text.replace("quantization: none", "quantization: {kind: per_channel}")).quantization
    assert isinstance(pc, PerChannelQuantization) and pc.model_dtype == "float32"


def test_override_of_a_field_of_a_preset_resolves_the_preset_first(llama_mlp_text):
    recipe = load_recipe_text(llama_mlp_text, overrides=["quantization=q4f16_1", "quantization.group_size=64"])
    assert recipe.quantization == GroupQuantization(group_size=64)
    recipe = load_recipe_text(llama_mlp_text, overrides=["quantization=q8f32_pc", "quantization.exclude=[down_proj]"])
    assert recipe.quantization == PerChannelQuantization(exclude=["down_proj"])
    # the preset first whatever the order on the command line (the field is not dropped)
    recipe = load_recipe_text(llama_mlp_text, overrides=["quantization.group_size=64", "quantization=q4f16_1"])
    assert recipe.quantization == GroupQuantization(group_size=64)


def test_unknown_preset_lists_close_and_valid_names(llama_mlp_text):
    [issue] = issues_of(llama_mlp_text, overrides=["quantization=q4f16"])
    assert issue.file == "<override quantization=q4f16>"
    assert "unknown quantization preset 'q4f16' (did you mean 'q4f16_1'" in issue.message
    assert "valid presets: none, q0f32, q0f16, q0bf16, q4f16_1" in issue.message
    text = llama_mlp_text.replace("quantization: none", "quantization: int4")
    [issue] = issues_of(text)
    assert (issue.line, issue.path) == (line_of(text, "int4"), "quantization") and "valid presets:" in issue.message


@pytest.mark.parametrize("overrides,path,message", [
    (["quantization=q4f16_1", "quantization.group_size=60"], "quantization.group_size",
     "group_size 60 is not divisible by the 8 values of 4 bits packed in one uint32 word"),
    (["quantization=q4f16_1", "quantization.bits=3"], "quantization.bits", "Input should be 4 or 8, got 3"),
    (["quantization=q4f16_1", "quantization.group_sise=64"], "quantization.group_sise",
     "unknown field 'group_sise'; did you mean 'group_size'?"),
    (["quantization={kind: grp}"], "quantization.kind",
     "unknown quantization kind 'grp'; did you mean 'group'?; valid kinds: group, per_channel, none"),
    (["quantization={bits: 4}"], "quantization", "missing required field 'kind'; valid kinds: group, per_channel, none"),
    (["quantization=5"], "quantization", "expected a preset name (none, q0f32"),
    (["quantization.group_size=64"], "quantization.group_size", "unknown field 'group_size'; valid fields: kind, model_dtype"),
    (["quantization=q4f16_1", "quantization.group_size=0"], "quantization.group_size", "group_size must be positive"),
])
def test_invalid_specs_name_the_field_and_the_override(llama_mlp_text, overrides, path, message):
    [issue] = issues_of(llama_mlp_text, overrides=overrides)
    assert issue.path == path
    assert message in issue.message
    assert issue.file.startswith("<override quantization")


def test_invalid_spec_in_the_file_cites_its_line(llama_mlp_text):
    text = llama_mlp_text.replace("quantization: none", "quantization:\n  kind: group\n  group_size: 12")
    [issue] = issues_of(text)
    assert (issue.file, issue.line, issue.path) == ("r.yaml", line_of(text, "group_size: 12"), "quantization.group_size")
    assert "not divisible by the 8 values" in issue.message


def test_dotted_override_of_an_interpolated_quantization_is_an_error(llama_mlp_text):
    text = llama_mlp_text.replace("quantization: none", "quantization: ${q}").replace("dtype: float16}", "dtype: float16, q: q4f16_1}")
    [issue] = issues_of(text, overrides=["quantization.group_size=64"])
    assert "not a preset name or a mapping" in issue.message


def test_8_bit_groups_in_bytes_and_registered_presets(llama_mlp_text):
    spec = load_recipe_text(llama_mlp_text, overrides=[
        "quantization=q8f16_1", "quantization.storage_dtype=uint8", "quantization.group_size=4"]).quantization
    assert spec.elements_per_word == 1 and spec.group_size == 4
    register_quantization_preset("q4f16_g128", GroupQuantization(group_size=128))
    try:
        assert load_recipe_text(llama_mlp_text, overrides=["quantization=q4f16_g128"]).quantization_spec.group_size == 128
        with pytest.raises(ValueError, match="already means"):
            register_quantization_preset("q4f16_g128", GroupQuantization(group_size=64))
    finally:
        del QUANTIZATION_PRESETS["q4f16_g128"]
    with pytest.raises(ValueError, match="unknown quantization preset 'zzz'; valid presets: none"):
        resolve_quantization("zzz")
