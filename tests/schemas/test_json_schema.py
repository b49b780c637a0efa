"""The JSON Schema of recipe files (issue 14, ``build --schema``): valid draft 2020-12, accepts the
shipped recipes as written (``${var}`` where numbers, booleans and dtypes go), rejects unknown
fields and wrong types, and its post-processing is a generic walk, not a list of today's fields."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional, Union

import pytest
from pydantic import BaseModel, ConfigDict, Field

from schemas.json_schema import INTERPOLATION_SCHEMA, JSON_SCHEMA_DIALECT, accept_interpolation, recipe_json_schema
from schemas.source import IssueCollector, SourceMap, parse_yaml

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p for p in (ROOT / "recipes").rglob("*.yaml") if p.name != "families.yaml")   # recipes/hf/ too
INTERP = {"$ref": "#/$defs/Interpolation"}


def _data(text: str, name: str = "r.yaml"):
    """A recipe file's data as written (before ``${var}`` substitution): the recipe YAML dialect
    allows ``{a: ${n}}`` in flow mappings, which plain ``yaml.safe_load`` refuses."""
    return parse_yaml(text, IssueCollector(SourceMap(name, text)))


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = recipe_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator, data) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data))


def test_schema_head_and_json():
    schema = recipe_json_schema()
    assert schema["$schema"] == JSON_SCHEMA_DIALECT == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "model-builder recipe"
    assert list(schema)[:2] == ["$schema", "title"]
    assert json.loads(json.dumps(schema)) == schema
    assert schema["$defs"]["Interpolation"] == INTERPOLATION_SCHEMA
    assert recipe_json_schema() == schema and recipe_json_schema() is not schema


def test_structure_numbers_booleans_and_enums_take_interpolation():
    """What an editor sees, checked without a validator library."""
    schema = recipe_json_schema()
    defs = schema["$defs"]
    linear = defs["Linear"]["properties"]
    assert linear["bias"] == {"title": "Bias", "default": True, "anyOf": [{"type": "boolean"}, INTERP]}
    assert linear["in_features"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]   # a Dim takes any name
    assert INTERP in linear["dtype"]["anyOf"] and {"type": "null"} in linear["dtype"]["anyOf"]
    assert linear["type"] == {"const": "Linear", "default": "Linear", "title": "Type", "type": "string"}  # a tag
    norm = defs["LayerNorm"]["properties"]
    assert norm["eps"]["anyOf"][1] == INTERP and norm["eps"]["anyOf"][0]["type"] == "number"
    assert norm["normalized_shape"]["anyOf"][0] == {"maximum": 2**40, "minimum": 1, "type": "integer"}
    assert INTERP in defs["GroupQuantization"]["properties"]["bits"]["anyOf"]
    assert "type" in defs["Linear"]["required"] and "kind" in defs["GroupQuantization"]["required"]
    assert defs["WeightsDef"]["additionalProperties"] is False
    assert schema["properties"]["dtype"]["anyOf"][1] == INTERP
    # strings stay strings; the quantization union has a plain-string alternative (a preset name)
    assert schema["properties"]["name"] == {"title": "Name", "type": "string"}
    assert schema["properties"]["quantization"]["oneOf"][0] == {"type": "string"}
    # a nested model (the rope scaling of Llama 3) takes a var holding the whole mapping, or null
    scaling = defs["Attention"]["properties"]["rope_scaling"]["anyOf"]
    assert {"$ref": "#/$defs/RopeScaling"} in scaling and INTERP in scaling and {"type": "null"} in scaling


def test_shipped_recipes_validate(validator, llama_mlp_text, minimal_text):
    assert RECIPES
    for path in RECIPES:
        assert _errors(validator, _data(path.read_text(), path.name)) == [], path
    for text in (llama_mlp_text, minimal_text):
        assert _errors(validator, _data(text)) == []


def test_unknown_fields_and_wrong_values_are_rejected(validator, llama_mlp_text):
    LLAMA_MLP = llama_mlp_text
    good = _data(LLAMA_MLP)
    cases = {
        "top-level": ("modle", {"layers": {}}),
        "layer": ("model.layers.gate_proj.biass", True),
        "weights": ("weights.mapping", {}),
        "input": ("functions.forward.x.dtypes", "float32"),
    }
    for label, (path, value) in cases.items():
        data = _data(LLAMA_MLP)
        node = data
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
        errors = _errors(validator, data)
        assert errors and any("Additional properties are not allowed" in e or "is not valid under any" in e
                              for e in errors), (label, errors)
    bad_values = [("model.layers.gate_proj.bias", "yes"), ("dtype", "float99"), ("model.layers.gate_proj.dtype", 3),
                  ("model.layers.gate_proj.bias", "${a} and ${b}"), ("quantization", {"bits": 4})]
    for path, value in bad_values:
        data = _data(LLAMA_MLP)
        node = data
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
        assert _errors(validator, data), (path, value)
    data = _data(LLAMA_MLP)
    del data["model"]["layers"]["up_proj"]["type"]           # the loader requires a layer's type
    assert _errors(validator, data)
    data = _data(LLAMA_MLP)
    data["model"]["layers"]["gate_proj"]["bias"] = "${use_bias}"
    data["quantization"] = {"kind": "group", "bits": "${bits}", "group_size": "${g}"}
    assert _errors(validator, data) == [] and _errors(validator, good) == []
    data = _data(LLAMA_MLP)       # a block layer's type may be a var (recipes/hf/vit.yaml's pooler), never a layer type
    data["blocks"] = {"Head": {"inputs": ["x"], "forward": "return x"}}
    data["model"]["layers"]["head"] = {"type": "${head_type}"}
    assert _errors(validator, data) == []
    data["model"]["layers"]["head"] = {"type": "Attention"}
    assert _errors(validator, data)


def test_the_post_processing_is_generic(validator):
    """A model with field shapes recipes do not have today gets the same treatment."""
    jsonschema = pytest.importorskip("jsonschema")

    class Inner(BaseModel):
        model_config = ConfigDict(extra="forbid")
        kind: Literal["inner"] = "inner"
        rate: float = 0.5
        flags: list[bool] = []

    class Other(BaseModel):
        model_config = ConfigDict(extra="forbid")
        kind: Literal["other"] = "other"
        size: Optional[int] = None

    class Block(BaseModel):
        model_config = ConfigDict(extra="forbid")
        count: int = Field(ge=1)
        mode: Literal["a", "b"]
        scale: Union[float, Literal["auto"]] = "auto"
        part: Union[Inner, Other] = Field(discriminator="kind")
        sizes: tuple[int, str]
        tags: dict[str, Literal[1, 2]] = {}

    schema = accept_interpolation(Block.model_json_schema())
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    ok = {"count": "${n}", "mode": "${m}", "scale": "${s}", "part": {"kind": "inner", "rate": "${r}",
                                                                     "flags": [True, "${f}"]},
          "sizes": ["${a}", "${b}"], "tags": {"x": "${t}", "y": 2}}
    assert list(v.iter_errors(ok)) == []
    assert list(v.iter_errors({**ok, "count": 0}))                           # constraints still hold
    assert list(v.iter_errors({**ok, "mode": "c"}))
    assert list(v.iter_errors({**ok, "part": {"rate": 1.0}}))               # the union's tag is required
    assert list(v.iter_errors({**ok, "part": {"kind": "${k}"}}))            # tags stay literal
    assert list(v.iter_errors({**ok, "unknown": 1}))
    assert list(v.iter_errors({**ok, "count": "${n}x"}))                    # one whole reference only
    assert schema["$defs"]["Inner"]["required"] == ["kind"]
    # a name taken by the model is left alone
    taken = accept_interpolation({"$defs": {"Interpolation": {"type": "object"}},
                                  "properties": {"x": {"type": "integer"}}, "type": "object"})
    assert taken["$defs"]["Interpolation"] == {"type": "object"}
    assert taken["properties"]["x"]["anyOf"][1] == {"$ref": "#/$defs/Interpolation1"}


def test_include_is_a_list_of_paths(validator, llama_mlp_text):
    data = _data(llama_mlp_text)
    data["include"] = ["blocks/common.yaml"]
    assert _errors(validator, data) == []
    data["include"] = "blocks/common.yaml"   # the loader wants a list too
    assert _errors(validator, data)
