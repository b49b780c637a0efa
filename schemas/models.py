"""Pydantic models of a recipe. All are strict: unknown keys and wrongly typed values are errors.

The field types are in :mod:`schemas.fields`, the layer entries and the registry of layer types in
:mod:`schemas.layers` (both importable from here too); the models holding layers rebuild when a layer type
is registered."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (AfterValidator, BeforeValidator, Discriminator, Field, PrivateAttr, Tag, ValidationInfo,
                      ConfigDict, field_validator, model_serializer, model_validator)
from pydantic_core import PydanticCustomError

from core.dtypes import STORAGE_BITS
from core.limits import MAX_DIM, MAX_FUNCTIONS, MAX_NDIM, MAX_TENSOR_PARALLEL_SHARDS
from core.limits import MAX_WEIGHT_IGNORE, MAX_WEIGHT_MAP_ENTRIES, MAX_WEIGHT_NAME_CHARS, MAX_WEIGHT_PATTERN_ENTRIES
from core.limits import MAX_WEIGHT_TRANSFORM_PARTS, MAX_WEIGHT_TRANSFORMS
from core.messages import shorten
from core.precision import MatmulPrecision
from core.weight_names import file_side_problems, parameter_side_problems, parse_rule
from core.weight_transforms import transform_problems

from .fields import DTYPES, Axes, Dim, DType, Identifier, StrictModel, is_identifier  # noqa: F401 (re-exported)
from .layers import (LAYER_TYPES, MAX_REPEAT, Attention, BlockLayer, Conv1D, ConvTranspose1D,  # noqa: F401
                     Embedding, GELU, GroupNorm, LayerEntry, LayerNorm, Linear, ReLU, RMSNorm, RopeScaling, SiLU,
                     layer_union, on_layer_types_changed)
from .source import SourceMap


def _check_ndim(value: Any) -> Any:
    if isinstance(value, list) and len(value) > MAX_NDIM:
        raise PydanticCustomError("ndim", "a shape may have at most {limit} dims, got {n}",
                                  {"limit": MAX_NDIM, "n": len(value)})
    return value


def _check_function_count(value: Any) -> Any:
    if isinstance(value, dict) and len(value) > MAX_FUNCTIONS:
        raise PydanticCustomError(
            "functions", "a recipe may export at most {limit} functions (each compiles the whole forward), "
            "got {n}", {"limit": MAX_FUNCTIONS, "n": len(value)})
    return value


LayerDef = layer_union()
"""One entry of ``layers:`` (:func:`schemas.layers.layer_union` of the layer types registered at import; the
models below rebuild with a new union whenever a layer type is registered)."""


def _check_block_name(value: str) -> str:
    if value in LAYER_TYPES:
        raise PydanticCustomError(
            "block_name", "block name {value} is the name of a layer type: a layer entry `type: {name}` builds that "
            "layer, never this block; rename the block", {"value": shorten(value), "name": value})
    return value


BlockName = Annotated[Identifier, AfterValidator(_check_block_name)]
"""The name of a block of ``blocks:``: an identifier that is no registered layer type's name."""


MAX_BLOCK_INPUTS = 64
"""The most arguments a block's forward may take."""


def _check_block_input(value: Any) -> Any:
    name = value[:-5] if isinstance(value, str) and value.endswith("=None") else value
    if not is_identifier(name):
        raise PydanticCustomError(
            "block_input", "a block input is a name, or `name=None` for an optional one, got {value}",
            {"value": shorten(value)})
    return value


class BlockDef(StrictModel):
    """A reusable block (a user-defined ``nn.Module`` class): the names of its forward's arguments
    (``inputs``; ``name=None`` makes an argument optional, ``None`` when not passed), its layers (built-in
    types or other blocks) and its ``forward:`` text. A layer entry ``{type: BlockName}`` instantiates it."""

    inputs: Annotated[list[Annotated[str, AfterValidator(_check_block_input)]], Field(max_length=MAX_BLOCK_INPUTS)] = []
    layers: dict[Identifier, LayerDef] = {}
    forward: str

    @property
    def input_names(self) -> list[str]:
        """The argument names, without the ``=None`` of optional ones."""
        return [n[:-5] if n.endswith("=None") else n for n in self.inputs]

    @property
    def optional_inputs(self) -> set[str]:
        """Names of the arguments that default to ``None``."""
        return {n[:-5] for n in self.inputs if n.endswith("=None")}


class ModelDef(StrictModel):
    """The network: named layers (parameters) and the forward computation as Python-syntax text
    (optional when every function gives its own ``forward``)."""

    layers: dict[Identifier, LayerDef] = {}
    forward: Optional[str] = None


class InputSpec(StrictModel):
    """One input tensor of an exported function: its shape (sizes or symbolic names, at most
    :data:`~core.limits.MAX_NDIM` of them) and element type (``nn.spec.Tensor``)."""

    type: Annotated[Literal["tensor"], Field(json_schema_extra={"x-optional-tag": True})] = "tensor"
    shape: Annotated[list[Dim], BeforeValidator(_check_ndim)]
    dtype: DType


class IntInput(StrictModel):
    """``{type: int}``: a symbolic integer input (``nn.spec.Int``), e.g. the number of tokens a KV cache
    holds after a call; its name is usable as a value in ``forward:`` and as a dim."""

    type: Literal["int"]


class KVCacheInput(StrictModel):
    """``{type: kv_cache}``: a KV cache object (``runtime`` KV cache, an ``R.Object`` input) that the
    model's ``Attention`` layers append to and read from (prefill / decode)."""

    type: Literal["kv_cache"]


def _input_tag(value: Any) -> Optional[str]:
    kind = value.get("type", "tensor") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("tensor", "int", "kv_cache") else None


InputDef = Annotated[
    Union[Annotated[InputSpec, Tag("tensor")], Annotated[IntInput, Tag("int")], Annotated[KVCacheInput, Tag("kv_cache")]],
    Discriminator(_input_tag, custom_error_type="input_kind",
                  custom_error_message="an input is a tensor {shape, dtype}, {type: int} or {type: kv_cache}"),
]
"""One input of an exported function: a tensor, a symbolic int or a KV cache."""


class FunctionDef(StrictModel):
    """An exported function with its own inputs and, optionally, its own ``forward:`` text (else the
    model's). All functions share the model's parameters."""

    inputs: dict[Identifier, InputDef] = {}
    forward: Optional[str] = None


def _function_tag(value: Any) -> str:
    if isinstance(value, FunctionDef):
        return "function"
    if isinstance(value, dict):
        if isinstance(value.get("forward"), str):
            return "function"
        inputs = value.get("inputs")
        if isinstance(inputs, dict) and not {"shape", "dtype", "type"} & set(inputs):
            return "function"
    return "inputs"


FunctionEntry = Annotated[
    Union[Annotated[FunctionDef, Tag("function")], Annotated[dict[Identifier, InputDef], Tag("inputs")]],
    Discriminator(_function_tag),
]
"""A ``functions:`` entry: ``{inputs: {...}, forward: ...}``, or (short form) the inputs mapping alone."""


# --- quantization ------------------------------------------------------------------------------------

FloatDType = Literal["float16", "bfloat16", "float32"]
"""A model (activation / scale) dtype of a quantization spec."""



class NoQuantization(StrictModel):
    """``kind: none``: weights stay floating point. ``model_dtype`` (when set) is a dtype cast of every
    floating-point parameter and input (the ``q0f16`` / ``q0f32`` / ``q0bf16`` presets); ``None`` leaves the
    recipe's own ``dtype`` in charge."""

    kind: Literal["none"] = "none"
    model_dtype: Optional[FloatDType] = None


class GroupQuantization(StrictModel):
    """``kind: group``: symmetric group quantization of Linear (and Embedding) weights, as MLC-LLM's
    ``q4f16_1`` family.

    Along the input dimension every ``group_size`` consecutive weights of a row share one scale
    ``max|w| / max_int`` (``max_int = 2**(bits-1) - 1``, 7 for 4 bits); a weight is stored as
    ``clamp(round(w / scale) + max_int, 0, 2 * max_int)``, ``elements_per_word`` values packed into one
    ``storage_dtype`` word (element ``i`` in bits ``[i*bits, (i+1)*bits)``), and dequantized as
    ``(q - max_int) * scale``. Parameters ``q_weight`` (out, padded_in / elements_per_word) and
    ``q_scale`` (out, padded_in / group_size) in ``model_dtype``: the NK layout; a Linear's weights
    in ``uint32`` words with ``out`` a multiple of 16 are stored in tiles of 16 rows
    instead (``q_weight`` (out / 16, words, 16), ``q_scale`` (out / 16, groups, 16), each tile
    transposed) for the row-tiled kernels, as llama.cpp repacks ``Q4_0`` at load time. ``exclude``
    lists module-path globs (``lm_head``, ``*.norm*``) kept in ``model_dtype``.

    ``activation_quantization: int8`` lets the matmul kernels of 4-bit weights (and of 8-bit
    ones stored in row tiles: a Linear's weights in uint32 words whose rows fill tiles of 16)
    quantize the activations too, at every batch size (integer GEMV and GEMM): symmetric int8 per group of
    ``group_size`` inputs (``d = max|x| / 127``, ``x_q = round(x / d)``; the columns past
    whole 64-column steps of whole groups stay float), integer dot products per group, then
    ``scale * d * (sum x_q * q - zero_point * sum x_q)`` -- llama.cpp's Q4_0 x Q8_0 and
    onnxruntime MatMulNBits ``accuracy_level=4``. It adds about 0.5% relative error (far below
    4-bit weight error), reads the weights about 1.5x as fast at batch 1 and about doubles the
    large-batch throughput on AVX2 (``vpmaddubsw``); ``none`` (the
    default, MLC-LLM's semantics) keeps float activations. Hosts without AVX2 and other 8-bit
    weights (uint8 / uint16 words, rows not a multiple of 16) always use float activations.

    Raises (validation): ``group_size`` not positive (or above 2**40) or not divisible by ``elements_per_word``.
    """

    kind: Literal["group"] = "group"
    bits: Literal[4, 8] = 4
    storage_dtype: Literal["uint8", "uint16", "uint32"] = "uint32"
    group_size: int = 32
    model_dtype: FloatDType = "float16"
    exclude: list[str] = []
    quantize_embedding: bool = True
    activation_quantization: Literal["none", "int8"] = "none"

    @field_validator("group_size")
    @classmethod
    def _check_group_size(cls, value: int, info: ValidationInfo) -> int:
        bits, storage = info.data.get("bits"), info.data.get("storage_dtype")
        if not 0 < value <= MAX_DIM:
            raise PydanticCustomError("group_size", "group_size must be positive and at most 2**40, got {value}",
                                      {"value": shorten(value)})
        if bits is not None and storage is not None:
            per_word = STORAGE_BITS[storage] // bits
            if value % per_word:
                raise PydanticCustomError(
                    "group_size", "group_size {value} is not divisible by the {per_word} values of {bits} bits "
                    "packed in one {storage} word", {"value": value, "per_word": per_word, "bits": bits,
                                                     "storage": storage})
        return value

    @property
    def elements_per_word(self) -> int:
        """Quantized values per storage word (``storage bits // bits``: 8 for 4 bits in uint32)."""
        return STORAGE_BITS[self.storage_dtype] // self.bits

    @property
    def max_int(self) -> int:
        """``2**(bits-1) - 1``: the largest magnitude of a quantized value (7 for 4 bits)."""
        return 2 ** (self.bits - 1) - 1

    @property
    def zero_point(self) -> int:
        """The stored value of a zero weight (``max_int``: values are stored with an offset)."""
        return self.max_int


class PerChannelQuantization(StrictModel):
    """``kind: per_channel``: symmetric int8 quantization with one scale per output channel (row).

    ``scale = max|w_row| / 127``, ``q = clamp(round(w / scale), -127, 127)`` stored as ``int8``
    (one value per word, no offset), dequantized as ``q * scale``. Parameters ``q_weight``
    (out, in) int8 and ``q_scale`` (out, 1) in ``model_dtype``: the group layout with a single
    group spanning the whole row, so it shares the group kernels.
    """

    kind: Literal["per_channel"] = "per_channel"
    bits: Literal[8] = 8
    storage_dtype: Literal["int8"] = "int8"
    model_dtype: FloatDType = "float32"
    exclude: list[str] = []
    quantize_embedding: bool = True

    @property
    def elements_per_word(self) -> int:
        """Always 1: int8 values are stored one per element."""
        return 1

    @property
    def max_int(self) -> int:
        """127: the largest magnitude of a quantized value."""
        return 2 ** (self.bits - 1) - 1

    @property
    def zero_point(self) -> int:
        """0: values are stored signed, without offset."""
        return 0


QuantizationSpec = Union[NoQuantization, GroupQuantization, PerChannelQuantization]
"""A full quantization spec, chosen by its ``kind``."""

QUANTIZATION_KINDS: dict[str, type[StrictModel]] = {
    "group": GroupQuantization, "per_channel": PerChannelQuantization, "none": NoQuantization}
"""Spec models by their ``kind``."""

QUANTIZATION_PRESETS: dict[str, QuantizationSpec] = {
    "none": NoQuantization(),
    "q0f32": NoQuantization(model_dtype="float32"),
    "q0f16": NoQuantization(model_dtype="float16"),
    "q0bf16": NoQuantization(model_dtype="bfloat16"),
    "q4f16_1": GroupQuantization(bits=4, group_size=32, model_dtype="float16"),
    "q4f32_1": GroupQuantization(bits=4, group_size=32, model_dtype="float32"),
    "q4bf16_1": GroupQuantization(bits=4, group_size=32, model_dtype="bfloat16"),
    "q8f16_1": GroupQuantization(bits=8, group_size=32, model_dtype="float16"),
    "q8f32_1": GroupQuantization(bits=8, group_size=32, model_dtype="float32"),
    "q8f16_pc": PerChannelQuantization(model_dtype="float16"),
    "q8f32_pc": PerChannelQuantization(model_dtype="float32"),
}
"""Named quantization specs (valid string values of :attr:`Recipe.quantization`), MLC-LLM's
``q{bits}f{model float bits}_{variant}`` naming: ``_1`` is group quantization with groups of 32 along
the input dimension, ``_pc`` per-channel int8, ``q0*`` a dtype cast only. Add more with
:func:`register_quantization_preset`."""


def register_quantization_preset(name: str, spec: QuantizationSpec) -> None:
    """Make ``name`` a valid value of ``quantization:`` meaning ``spec``.

    Raises ValueError when ``name`` is taken by a different spec, TypeError for a non-spec.
    """
    if not isinstance(spec, (NoQuantization, GroupQuantization, PerChannelQuantization)):
        raise TypeError(f"a quantization preset must be a spec model, got {type(spec).__name__}")
    if name in QUANTIZATION_PRESETS and QUANTIZATION_PRESETS[name] != spec:
        raise ValueError(f"quantization preset {name!r} already means {QUANTIZATION_PRESETS[name]!r}; "
                         f"cannot redefine it as {spec!r}")
    QUANTIZATION_PRESETS[name] = spec


def unknown_preset_message(name: Any) -> str:
    """The error text for a quantization preset name that is not registered (close matches and the valid names)."""
    import difflib

    close = difflib.get_close_matches(str(name), list(QUANTIZATION_PRESETS), n=3)
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    return f"unknown quantization preset {shorten(name)}{hint}; valid presets: {', '.join(QUANTIZATION_PRESETS)}"


def resolve_quantization(value: Union[str, QuantizationSpec]) -> QuantizationSpec:
    """The full spec of a preset name (a copy) or of a spec (itself).

    Raises ValueError for an unknown preset name, listing the valid ones.
    """
    if isinstance(value, str):
        if value not in QUANTIZATION_PRESETS:
            raise ValueError(unknown_preset_message(value))
        return QUANTIZATION_PRESETS[value].model_copy(deep=True)
    return value


def _check_preset(value: str) -> str:
    if value not in QUANTIZATION_PRESETS:
        raise PydanticCustomError("quantization", "{message}", {"message": unknown_preset_message(value)})
    return value


def _quantization_tag(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return "preset"
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if isinstance(kind, str) and kind in QUANTIZATION_KINDS else None


Quantization = Annotated[
    Union[Annotated[Annotated[str, AfterValidator(_check_preset)], Tag("preset")],
          Annotated[GroupQuantization, Tag("group")],
          Annotated[PerChannelQuantization, Tag("per_channel")],
          Annotated[NoQuantization, Tag("none")]],
    Discriminator(_quantization_tag, custom_error_type="quantization_kind",
                  custom_error_message="expected a quantization preset name or a mapping with a 'kind' of "
                                       "group, per_channel or none"),
]
""":attr:`Recipe.quantization`: a preset name (``q4f16_1``) or a full spec mapping chosen by ``kind``."""


def _check_weight_name_key(value: str) -> str:
    problems = parameter_side_problems(value)     # the grammar is core.weight_names', as the loader's
    if problems:
        raise PydanticCustomError("weights_map", "{message}", {"message": "; ".join(problems)})
    return value


def _check_weight_name_value(value: str) -> str:
    problems = file_side_problems(value)
    if problems:
        raise PydanticCustomError("weights_map", "{message}", {"message": "; ".join(problems)})
    return value


def _check_weight_map(value: Any) -> Any:
    if isinstance(value, dict) and len(value) > MAX_WEIGHT_MAP_ENTRIES:
        raise PydanticCustomError("weights_map", "weights.map may have at most {limit} entries, got {n}",
                                  {"limit": MAX_WEIGHT_MAP_ENTRIES, "n": len(value)})
    return value


def _check_weight_rules(value: dict[str, str]) -> dict[str, str]:
    problems = []
    patterns = 0
    for ours, theirs in value.items():     # each side is valid here: what is left are the pair's rules
        rule, bad = parse_rule(ours, theirs)
        problems += [f"entry {shorten(ours)}: {p}" for p in bad]
        patterns += rule is not None and not rule.exact
    if patterns > MAX_WEIGHT_PATTERN_ENTRIES:
        problems.append(f"weights.map may have at most {MAX_WEIGHT_PATTERN_ENTRIES} entries with placeholders or "
                        f"a trailing '.', got {patterns}")
    if problems:
        raise PydanticCustomError("weights_map", "{message}", {"message": "; ".join(problems)})
    return value


def _check_ignore_glob(value: str) -> str:
    if not value or len(value) > MAX_WEIGHT_NAME_CHARS:
        raise PydanticCustomError("weights_ignore", "an ignore pattern must have 1 to {limit} characters, got {n}",
                                  {"limit": MAX_WEIGHT_NAME_CHARS, "n": len(value)})
    return value


WeightName = Annotated[str, AfterValidator(_check_weight_name_key)]
"""The parameter side of a ``weights.map`` entry: a name, a pattern with ``{placeholders}``, or a prefix (ends with ``.``)."""

FileWeightName = Annotated[str, AfterValidator(_check_weight_name_value)]
"""The file side of a ``weights.map`` entry, with the same placeholders as its parameter side."""


TensorName = Annotated[str, Field(min_length=1, max_length=MAX_WEIGHT_NAME_CHARS)]
"""A file tensor name of ``weights.transforms`` (``{placeholders}`` as in ``weights.map``'s file side)."""

TensorNames = Annotated[list[TensorName], Field(min_length=2, max_length=MAX_WEIGHT_TRANSFORM_PARTS)]


class SplitDef(StrictModel):
    """``split: {axis, sizes}``: consecutive parts of these sizes along ``axis`` (they add up to its length)."""

    axis: int
    sizes: Annotated[list[Annotated[int, Field(gt=0, le=MAX_DIM)]],
                     Field(min_length=2, max_length=MAX_WEIGHT_TRANSFORM_PARTS)]


class SliceDef(StrictModel):
    """``slice: {axis, start, stop}``: the part ``[start, stop)`` along ``axis``."""

    axis: int
    start: Annotated[int, Field(ge=0, le=MAX_DIM)]
    stop: Annotated[int, Field(gt=0, le=MAX_DIM)]


class ConcatenateDef(StrictModel):
    """``concatenate: {axis}``: the ``from`` tensors joined along ``axis``."""

    axis: int


class WeightTransform(StrictModel):
    """One entry of ``weights.transforms`` (:mod:`core.weight_transforms` says it in full): ``from`` (a file
    tensor name, or a list for ``concatenate``), exactly one of ``transpose`` (``true`` or a permutation),
    ``split``, ``slice``, ``reshape`` (a shape, one size may be -1), ``concatenate``, and ``to`` (one name,
    a list of one per part for ``split``; default ``from``). Raises (validation): no or two operations,
    ``to`` / ``from`` not fitting the operation, placeholders of ``to`` not those of ``from``, a name ending
    with ``.``."""

    from_: Annotated[Union[TensorName, TensorNames], Field(alias="from")]
    to: Optional[Union[TensorName, TensorNames]] = None
    transpose: Optional[Union[bool, Annotated[list[int], Field(min_length=1, max_length=MAX_NDIM)]]] = None
    split: Optional[SplitDef] = None
    slice: Optional[SliceDef] = None
    reshape: Optional[Annotated[list[int], Field(min_length=1, max_length=MAX_NDIM)]] = None
    concatenate: Optional[ConcatenateDef] = None

    model_config = ConfigDict(extra="forbid", strict=True, serialize_by_alias=True)

    @model_serializer(mode="wrap")
    def _dump(self, handler) -> dict:
        """As written: ``from`` (not ``from_``), the operation given and no unset keys."""
        return {k: v for k, v in handler(self).items() if v is not None}

    @model_validator(mode="after")
    def _check(self) -> "WeightTransform":
        problems = transform_problems(self.model_dump(by_alias=True, exclude_none=True))
        if problems:
            raise PydanticCustomError("weights_transform", "{message}", {"message": "; ".join(problems)})
        return self


class WeightsDef(StrictModel):
    """Where the weights come from: a file, a name prefix in it, renames (our name -> name in the
    file) and globs of file tensors the model does not need.

    ``map`` entries (:mod:`core.weight_names` says it in full; the loader applies the same grammar):

    - ``lm_head.weight: model.embed_tokens.weight`` renames one parameter;
    - ``"layers.{i}.mlp.gate_proj.weight": "model.layers.{i}.mlp.gate_proj.weight"``: a placeholder
      ``{name}`` matches one non-empty, dot-free piece of a name (``0``, ``q_proj``), at most one per
      dot-separated segment (``layer_{i}``); both sides use the same placeholders;
    - ``"layers.{i}.attn.": "model.layers.{i}.self_attn."``: both sides ending with ``.`` make a
      prefix rule, renaming every parameter under the left side and keeping the rest of its name
      (the right side may be ``""`` to strip it);
    - the most specific entry wins (most literal characters on the left; a whole name before a
      prefix); mapped names are complete (``prefix`` is not added); an entry that matches no
      parameter is an error when the weights are bound.

    ``ignore``: ``fnmatch`` globs over the file's tensor names (``pooler.*``, ``embeddings.position_ids``;
    ``*`` matches dots too). A tensor under ``prefix`` that no parameter uses is an error unless one
    matches it; a glob that matches no tensor is a warning (checkpoints of one model differ in such
    leftovers). Ignoring never skips a tensor a parameter uses.

    ``transforms``: the file's tensors as the recipe's layout wants them (a transposed Conv1D weight,
    a fused ``qkv_proj`` split into three), applied in order before names bind, quantization and shards:
    :class:`WeightTransform`. ``layout``: globs of the file's 2-D tensors -> ``in_out`` / ``out_in``, checked
    against the transforms when the weights load (a square Conv1D weight left untransposed is an error).

    Raises (validation): a malformed placeholder, different placeholders on the two sides, a prefix
    rule with one side not ending in ``.``; more than 100,000 entries, 256 pattern entries or 256
    globs; a side or glob over 1,024 characters; an invalid transform or more than 256 of them.
    """

    path: Optional[str] = None
    prefix: str = ""
    map: Annotated[dict[WeightName, FileWeightName], BeforeValidator(_check_weight_map),
                   AfterValidator(_check_weight_rules)] = {}
    ignore: Annotated[list[Annotated[str, AfterValidator(_check_ignore_glob)]],
                      Field(max_length=MAX_WEIGHT_IGNORE)] = []
    transforms: Annotated[list[WeightTransform], Field(max_length=MAX_WEIGHT_TRANSFORMS)] = []
    """The file's tensors transposed, split, sliced, reshaped or concatenated before the names bind
    (:class:`WeightTransform`, :mod:`core.weight_transforms`), in order."""
    layout: Annotated[dict[Annotated[str, AfterValidator(_check_ignore_glob)], Literal["in_out", "out_in"]],
                      Field(max_length=MAX_WEIGHT_IGNORE)] = {}
    """How the file stores its 2-D weights, by glob over its tensor names: ``in_out`` (GPT-2's Conv1D: each
    must be transposed by a transform) or ``out_in`` (as ``Linear`` holds them: none may be). A square matrix
    cannot tell its layout by its shape; this is where a forgotten transpose is caught."""


class Recipe(StrictModel):
    """A validated recipe. ``source`` gives the file positions of its fields for error messages.

    ``dtype`` casts every floating-point parameter when ``quantization`` sets no model dtype
    (``none``); a quantization with a ``model_dtype`` (every preset but ``none``) decides the dtype of
    parameters, scales and floating-point inputs instead, as MLC-LLM's ``q4f16_1`` does.
    """

    name: str
    description: str = ""
    vars: dict[Identifier, Any] = {}
    blocks: dict[BlockName, BlockDef] = {}
    model: ModelDef
    functions: Annotated[dict[Identifier, FunctionEntry], Field(min_length=1),
                         BeforeValidator(_check_function_count)]
    dtype: Optional[Literal["float16", "bfloat16", "float32", "float64"]] = None
    quantization: Quantization = "none"
    weights: Optional[WeightsDef] = None
    matmul_precision: MatmulPrecision = "highest"
    """The internal precision float32 matmuls may use (PyTorch's ``torch.set_float32_matmul_precision``):
    ``highest`` multiplies in float32; ``high`` lets the GEMM take each float32 operand as the sum of two
    bfloat16 numbers (three bfloat16 products, about 16 significant bits; relative error of a sum about
    5e-6 against 1e-7), ``medium`` as one bfloat16 (about 1e-2). Only CPUs with Intel AMX tiles run those
    faster; elsewhere every setting computes in float32. Row counts at the GEMV's (small batches, decode)
    stay float32 whatever the setting. bfloat16 weights with bfloat16 activations run on the tiles at every
    setting (their products are exact)."""
    tensor_parallel_shards: Annotated[int, Field(ge=1, le=MAX_TENSOR_PARALLEL_SHARDS)] = 1
    """Workers (ranks) the model is split across, tensor-parallel (Megatron-LM style; MLC-LLM's
    ``tensor_parallel_shards``): attention heads and the layers marked ``tensor_parallel: column / row``
    split, everything else (embeddings, norms, ``lm_head``) is replicated. Above 1 the build runs under a
    launcher (``mpirun -n N build ...``), one process per shard."""

    _source: Optional[SourceMap] = PrivateAttr(default=None)

    @property
    def function_defs(self) -> dict[str, FunctionDef]:
        """Every function in the long form (a short-form entry is its inputs, with the model's forward)."""
        return {name: f if isinstance(f, FunctionDef) else FunctionDef(inputs=f) for name, f in self.functions.items()}

    @property
    def quantization_spec(self) -> QuantizationSpec:
        """:attr:`quantization` as a full spec (a preset name resolved with :func:`resolve_quantization`)."""
        return resolve_quantization(self.quantization)

    @property
    def source(self) -> SourceMap:
        """Source positions of this recipe's fields (an empty map if it was not loaded from YAML)."""
        if self._source is None:
            self._source = SourceMap("<recipe>")
        return self._source


def _rebuild_layer_models() -> None:
    """Rebuild the validators (and JSON schemas) of the models holding layer entries for the layer types
    registered now (:func:`schemas.layers.register_layer_model` calls it)."""
    global LayerDef
    LayerDef = layer_union()
    for model in (BlockDef, ModelDef):
        model.model_fields["layers"].annotation = dict[Identifier, LayerDef]
        model.model_rebuild(force=True)
    Recipe.model_rebuild(force=True)


on_layer_types_changed(_rebuild_layer_models)
