"""The layer registry (builder/layers.py): every recipe layer type has one registration, whose fields are
checked against the module's ``__init__`` when it is registered, and whose tensor-parallel and quantization
rules are what the recipe builder and the quantization Mutator follow."""
from typing import Literal, Optional

import pytest

from builder import nn
from builder.layers import (LAYERS, LayerRegistrationError, QuantizeRule, TensorParallelRule, quantize_rule,
                            register_layer, registration, unregister_layer)
from builder.nn.tensor_parallel import split_size
from builder.quant import GroupQuantization, QuantizedEmbedding, QuantizedLinear, quantize_mutator
from builder.recipe import instantiate
from schemas import LAYER_TYPES, LayerEntry, RecipeError, load_recipe_text, register_layer_model, unregister_layer_model
from schemas import layers as schema_layers


class GainEntry(LayerEntry):
    type: Literal["Gain"] = "Gain"
    channels: int
    dtype: Optional[str] = None


class Gain(nn.Module):
    """``x * weight``; the channels split across tensor-parallel workers."""

    def __init__(self, num_channels: int, dtype: str | None = None, shards: int = 1) -> None:
        self.weight = nn.Parameter((split_size(num_channels, shards, "num_channels"),), dtype)

    def forward(self, x):
        return x * self.weight


@pytest.fixture
def clean_registry():
    """Whatever a test registers is removed afterwards; the built-in registrations stay as they were."""
    before, schema_before = dict(LAYERS), dict(LAYER_TYPES)
    yield
    for name in set(LAYERS) - set(before):
        unregister_layer(name)
    for name in set(LAYER_TYPES) - set(schema_before):
        unregister_layer_model(name)
    assert dict(LAYERS) == before and dict(LAYER_TYPES) == schema_before


def test_every_recipe_layer_type_has_one_registration_with_its_model():
    assert list(LAYERS) == list(LAYER_TYPES)
    for name, reg in LAYERS.items():
        assert reg.type == name and reg.schema is LAYER_TYPES[name]
        assert issubclass(reg.module, nn.Module)
    assert len({reg.module for reg in LAYERS.values()}) == len(LAYERS)   # one layer type per module class


def test_the_tensor_parallel_rule_decides_which_entries_get_the_shards():
    linear = registration("Linear")
    assert "tensor_parallel_shards" not in linear.init_arguments(schema_layers.Linear(in_features=4, out_features=8), 2)
    column = schema_layers.Linear(in_features=4, out_features=8, tensor_parallel="column")
    assert linear.init_arguments(column, 2) == {"in_features": 4, "out_features": 8, "bias": True, "dtype": None,
                                                "out_dtype": None, "tensor_parallel": "column",
                                                "tensor_parallel_shards": 2}
    attention = schema_layers.Attention(hidden_size=8, num_heads=2, tensor_parallel=False)
    assert registration("Attention").init_arguments(attention, 2)["tensor_parallel_shards"] == 2   # it decides
    assert registration("LayerNorm").tensor_parallel is None                                       # replicated


class _Wide(nn.Linear):
    pass


class _Net(nn.Module):
    def __init__(self) -> None:
        self.attn = nn.Attention(8, 2, dtype="float32")
        self.wide = _Wide(32, 16, dtype="float32")
        self.embed = nn.Embedding(10, 32, dtype="float32")
        self.norm = nn.LayerNorm(32, dtype="float32")


def test_the_quantization_rule_is_the_layers_and_applies_anywhere_in_a_tree():
    assert quantize_rule(nn.Linear(32, 16)) is registration("Linear").quantize
    assert quantize_rule(_Wide(32, 16)) is registration("Linear").quantize                 # a subclass too
    assert quantize_rule(nn.Attention(8, 2)) is None and quantize_rule(nn.LayerNorm(8)) is None
    spec = GroupQuantization(model_dtype="float32", group_size=8)
    net = quantize_mutator(spec).visit("", _Net())
    assert [type(m) for m in (net.attn.q_proj, net.attn.o_proj, net.wide, net.embed, net.norm)] == [
        QuantizedLinear, QuantizedLinear, QuantizedLinear, QuantizedEmbedding, nn.LayerNorm]
    kept = quantize_mutator(GroupQuantization(model_dtype="float32", group_size=8, quantize_embedding=False))
    assert type(kept.visit("", _Net()).embed) is nn.Embedding          # the rule's `enabled` reads the spec


def test_a_layer_may_bring_its_own_quantization_rule(clean_registry):
    made = []

    def replace(module, spec):
        made.append((type(module), spec.bits))
        return QuantizedLinear(module.weight.shape[0], 1, spec, bias=False)

    register_layer(GainEntry, Gain, arguments={"channels": "num_channels"}, quantize=QuantizeRule(replace))
    net = nn.ModuleList([Gain(16, "float32"), nn.LayerNorm(16)])
    out = quantize_mutator(GroupQuantization(model_dtype="float32", group_size=8)).visit("", net)
    assert [type(m) for m in out] == [QuantizedLinear, nn.LayerNorm] and made == [(Gain, 4)]


@pytest.mark.parametrize("kwargs, message", [
    ({}, r"layer 'Gain': field 'channels' of GainEntry is not an argument of Gain.__init__ \(its arguments: "
         r"num_channels, dtype, shards\)"),
    ({"arguments": {"channels": "num_channels", "width": "num_channels"}},
     r"layer 'Gain': arguments renames 'width', which is not a field of GainEntry \(fields: channels, dtype\)"),
    ({"arguments": {"channels": None}}, r"layer 'Gain': argument 'num_channels' of Gain.__init__ has no default and "
                                        r"no field of GainEntry gives it"),
    ({"arguments": {"channels": "num_channels", "dtype": "num_channels"}},
     r"layer 'Gain': fields 'channels' and 'dtype' both give the argument 'num_channels'"),
    ({"arguments": {"channels": "num_channels"}, "tensor_parallel": TensorParallelRule(argument="workers")},
     r"layer 'Gain': the tensor-parallel argument 'workers' is not an argument of Gain.__init__"),
    ({"arguments": {"channels": "num_channels", "dtype": "shards"}, "tensor_parallel": TensorParallelRule(argument="shards")},
     r"layer 'Gain': field 'dtype' gives 'shards', the argument the tensor-parallel rule sets"),
])
def test_a_registration_whose_fields_do_not_fit_is_refused_naming_the_field(clean_registry, kwargs, message):
    with pytest.raises(LayerRegistrationError, match=message):
        register_layer(GainEntry, Gain, **kwargs)
    assert "Gain" not in LAYERS and "Gain" not in LAYER_TYPES           # nothing half-registered


def test_a_module_or_a_name_registered_twice_is_refused(clean_registry):
    with pytest.raises(LayerRegistrationError, match=r"layer 'Gain': Linear is registered already, as layer type "
                                                     r"'Linear'"):
        register_layer(GainEntry, nn.Linear, arguments={"channels": "in_features", "dtype": None})

    class OtherGain(LayerEntry):
        type: Literal["Gain"] = "Gain"

    register_layer_model(OtherGain)                       # the name taken on the schema side
    with pytest.raises(ValueError, match=r"layer type 'Gain' is already registered by \S*OtherGain; "
                                         r"cannot register \S*GainEntry under the same name"):
        register_layer(GainEntry, Gain, arguments={"channels": "num_channels"})
    assert "Gain" not in LAYERS and LAYER_TYPES["Gain"] is OtherGain
    with pytest.raises(LayerRegistrationError, match=r"layer 'Linear' is registered already \(module Linear\); "
                                                     r"unregister_layer\('Linear'\) first"):
        register_layer(schema_layers.Linear, _Wide)      # the same schema model with another module
    with pytest.raises(LayerRegistrationError, match="must be a builder.nn.Module class"):
        register_layer(GainEntry, object)
    assert registration("Linear").schema is schema_layers.Linear and "Gain" not in LAYERS


def _recipe(shards: int = 1) -> str:
    return f"""\
name: gain
tensor_parallel_shards: {shards}
model:
  layers:
    g: {{type: Gain, channels: 6}}
  forward: return g(x)
functions:
  forward:
    x: {{shape: [2, 6], dtype: float32}}
"""


def test_a_shard_error_points_at_the_schema_field_that_gives_the_argument(clean_registry):
    register_layer(GainEntry, Gain, arguments={"channels": "num_channels"},
                   tensor_parallel=TensorParallelRule(argument="shards"))
    module, _ = instantiate(load_recipe_text(_recipe(2)))
    assert module.g.weight.shape == [3]
    with pytest.raises(RecipeError) as info:
        instantiate(load_recipe_text(_recipe(4)))
    assert str(info.value) == ("<string>:5:31: model.layers.g.channels: Gain: num_channels (6) is not divisible by "
                               "tensor_parallel_shards (4) (tensor_parallel_shards=4)")


def test_a_schema_model_without_a_module_is_a_recipe_error_at_its_type(clean_registry):
    register_layer_model(GainEntry)                       # the schema side alone: valid, but nothing to build
    with pytest.raises(RecipeError, match=r"<string>:5:15: model.layers.g.type: Gain: no layer type 'Gain' is "
                                          r"registered with builder.layers.register_layer"):
        instantiate(load_recipe_text(_recipe()))
