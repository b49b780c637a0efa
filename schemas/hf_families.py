"""The schema of ``recipes/hf/families.yaml``: how a Hugging Face checkpoint folder's ``config.json`` becomes a
recipe's variables (``build DIR``, :mod:`builder.checkpoint`).

A family names the ``architectures`` / ``model_type`` values it serves, its recipe, and for each recipe variable
where its value comes from (:class:`ConfigVar`). Every top-level field of ``config.json`` must be accounted for:
read by a variable, checked (:class:`ConfigCheck`: only the values the recipe computes exactly pass) or
declared ``harmless`` (known not to change the computation: ``transformers_version``, token ids, dropout
rates, ...). Any other field is refused, naming it and its value: a field the family does not know may change
what the model computes, and a silently different model is worse than an error.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from .fields import StrictModel

__all__ = ["ConfigCheck", "ConfigVar", "HFFamilies", "HFFamily", "TiedEmbeddings"]


class ConfigVar(StrictModel):
    """One recipe variable's value from ``config.json``.

    ``from``: config fields (a dotted path reads into a nested object: ``rope_parameters.rope_theta``), the
    first that is present and not null wins. Else ``value``: a ``${...}`` expression over the config's top-level
    number fields (:mod:`schemas.expressions`: ``${hidden_size // num_attention_heads}``). Else ``default``
    (may be null); with none of the three the field is required. For an object value (``rope_parameters``):
    ``rename_keys`` (old spellings: ``type`` -> ``rope_type``), ``drop_keys`` (read elsewhere), ``allow``
    (key -> the values the recipe supports; another is an error naming the field and value) and ``null_if``
    (key -> values that mean "none": ``rope_type: default`` is no scaling). ``values``: a value map, the config
    value -> the recipe value it chooses (``feed_forward_proj: {relu: T5DenseActDense, gated-gelu:
    T5DenseGatedActDense}``, ``use_parallel_residual: {true: GPTNeoXParallelLayer, false: GPTNeoXLayer}``); a
    config value it lacks is an error naming the field, its value and the known values (``default`` is not
    mapped: it is the recipe value itself). ``if_tensor`` with ``then`` / ``else``: the value chosen by whether the
    checkpoint holds that tensor (read from the safetensors header or the shards' index, never the data:
    ``pooler_type: {if_tensor: pooler.dense.weight, then: ViTPooler, else: ViTNoPooler}`` for a model saved with
    ``add_pooling_layer=False``); it takes no ``from`` / ``value`` / ``default``."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    from_: list[str] = Field(default_factory=list, alias="from")
    value: Optional[str] = None
    default: Any = None
    rename_keys: dict[str, str] = Field(default_factory=dict)
    drop_keys: list[str] = Field(default_factory=list)
    allow: dict[str, list[Any]] = Field(default_factory=dict)
    null_if: dict[str, list[Any]] = Field(default_factory=dict)
    values: Optional[dict[Any, Any]] = None
    if_tensor: Optional[str] = None
    then: Any = None
    else_: Any = Field(default=None, alias="else")

    @model_validator(mode="after")
    def _tensor_alone(self) -> "ConfigVar":
        """``if_tensor`` chooses between ``then`` and ``else`` by itself; ``then`` / ``else`` need it."""
        chosen = {"then", "else_"} & self.model_fields_set
        if self.if_tensor is None and chosen:
            raise ValueError("then / else need if_tensor")
        if self.if_tensor is not None and ({"from_", "value", "default", "values"} & self.model_fields_set
                                           or chosen != {"then", "else_"}):
            raise ValueError("if_tensor takes then and else, and no from / value / default / values")
        return self

    @field_validator("values")
    @classmethod
    def _scalar_keys(cls, value: Any) -> Any:
        """A value map's keys are JSON scalars (a string, a number, true / false)."""
        for key in value or {}:
            if key is None or not isinstance(key, (str, int, float, bool)):
                raise ValueError(f"a values key must be a string, number or boolean, not {key!r}")
        return value

    @field_validator("from_", mode="before")
    @classmethod
    def _one_field(cls, value: Any) -> Any:
        """``from: hidden_size`` is ``from: [hidden_size]``."""
        return [value] if isinstance(value, str) else value

    @property
    def required(self) -> bool:
        """Whether a config without any ``from`` field (and no ``value``) is an error."""
        return self.value is None and self.if_tensor is None and "default" not in self.model_fields_set


class ConfigCheck(StrictModel):
    """A config field the recipe does not read but that changes the computation unless it has one of the
    values ``allow`` lists (``hidden_act: silu``). ``at_least``: a number of at least this config field's
    value passes too (a sliding window no shorter than ``max_position_embeddings`` never slides). ``each``:
    the value is a list and every element must be allowed (Qwen2's ``layer_types``). ``cycle``: the value is
    a list whose item k is ``cycle[k % len(cycle)]`` (Gemma 2's ``layer_types``, the pattern of the recipe's
    ``per_layer``); with ``cycle``, ``allow`` lists other whole values that pass (null). ``given`` with
    ``allow_given``: the values allowed besides ``allow`` depend on another config field's value (T5's
    ``is_gated_act`` must agree with the ``feed_forward_proj`` that chose the MLP: ``{relu: [false], gated-gelu:
    [true]}``). ``reason``: why other values are refused, for the message."""

    allow: list[Any] = Field(default_factory=list)
    given: Optional[str] = None
    allow_given: dict[Any, list[Any]] = Field(default_factory=dict)
    at_least: Optional[str] = None
    each: bool = False
    cycle: list[Any] = Field(default_factory=list)
    reason: str = "the recipe does not compute it"


class TiedEmbeddings(StrictModel):
    """``tie_word_embeddings``: its value when the config lacks it (``default``) and the ``weights.map`` entries
    added when it is true and the checkpoint has no tensor of its own for the tied parameter (``map``: recipe
    parameter -> the checkpoint tensor it shares; merged over the recipe's own map, ``${...}`` allowed)."""

    default: bool = False
    map: dict[str, str] = Field(default_factory=dict)


class HFFamily(StrictModel):
    """One family: the ``architectures`` / ``model_types`` it serves, its ``recipe`` (a path relative to
    ``families.yaml``), its variables (:class:`ConfigVar`), fixed recipe ``overrides`` (``KEY=VALUE``, as on the
    command line), ``tie_word_embeddings``, the fields it knows to be ``harmless`` (besides the file's
    shared list), the ``checks`` of fields it refuses other values of, and ``ignore_weights`` (globs of
    checkpoint tensors that no parameter uses and may stay unused, added to the recipe's ``weights.ignore``)."""

    architectures: list[str] = Field(default_factory=list)
    model_types: list[str] = Field(default_factory=list)
    recipe: str
    description: str = ""
    vars: dict[str, ConfigVar] = Field(default_factory=dict)
    overrides: list[str] = Field(default_factory=list)
    tie_word_embeddings: Optional[TiedEmbeddings] = None
    harmless: list[str] = Field(default_factory=list)
    checks: dict[str, ConfigCheck] = Field(default_factory=dict)
    ignore_weights: list[str] = Field(default_factory=list)


class HFFamilies(StrictModel):
    """The whole file: ``harmless`` fields of every family (what ``PretrainedConfig`` saves for any model) and
    the ``families`` by name."""

    harmless: list[str] = Field(default_factory=list)
    families: dict[str, HFFamily]
