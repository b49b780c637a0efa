"""Pydantic models of a recipe. All are strict: unknown keys and wrongly typed values are errors."""

from __future__ import annotations

import keyword
import re
from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator
from pydantic_core import PydanticCustomError

from .source import SourceMap

DType = Literal[
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64",
]
"""A tensor element type name."""

DTYPES: tuple[str, ...] = get_args(DType)
"""All valid :data:`DType` names."""

QUANTIZATION_PRESETS: tuple[str, ...] = ("none",)
"""Valid values of :attr:`Recipe.quantization`."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_identifier(value: str) -> str:
    if not _IDENTIFIER.fullmatch(value) or keyword.iskeyword(value):
        raise PydanticCustomError(
            "identifier", "{value} is not a valid name: use letters, digits and '_', not starting with a digit,"
            " and not a Python keyword", {"value": repr(value)})
    return value


def _check_dim(value: Any) -> Any:
    is_size = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if not is_size and not (isinstance(value, str) and _IDENTIFIER.fullmatch(value)):
        raise PydanticCustomError(
            "dim", "expected a non-negative integer or a symbolic dimension name (an identifier), got {value}",
            {"value": repr(value)})
    return value


def _check_axes(value: Any) -> Any:
    def is_int(item: Any) -> bool:
        return isinstance(item, int) and not isinstance(item, bool)

    if not is_int(value) and not (isinstance(value, list) and all(map(is_int, value))):
        raise PydanticCustomError("axes", "expected an integer axis or a list of integer axes, got {value}",
                                  {"value": repr(value)})
    return value


Identifier = Annotated[str, AfterValidator(_check_identifier)]
"""A name usable in the forward expression (``[A-Za-z_][A-Za-z0-9_]*``, not a Python keyword)."""

Dim = Annotated[Union[int, str], BeforeValidator(_check_dim)]
"""A tensor dimension: a non-negative size, or the name of a symbolic dimension such as ``batch_size``."""

Axes = Annotated[Union[int, list[int]], BeforeValidator(_check_axes)]
"""One axis or a list of axes."""


class StrictModel(BaseModel):
    """Base of all recipe models: unknown keys are errors and values are not coerced (an int is still a float)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Linear(StrictModel):
    """Fully connected layer ``x @ weight.T + bias`` (``tvm.relax.frontend.nn.Linear``)."""

    type: Literal["Linear"] = "Linear"
    in_features: Dim
    out_features: Dim
    bias: bool = True
    dtype: Optional[DType] = None
    out_dtype: Optional[DType] = None


class LayerNorm(StrictModel):
    """Layer normalisation over the last axis (``tvm.relax.frontend.nn.LayerNorm``)."""

    type: Literal["LayerNorm"] = "LayerNorm"
    normalized_shape: int
    eps: float = 1e-5
    elementwise_affine: bool = True
    dtype: Optional[DType] = None


class RMSNorm(StrictModel):
    """Root-mean-square normalisation (``tvm.relax.frontend.nn.RMSNorm``)."""

    type: Literal["RMSNorm"] = "RMSNorm"
    hidden_size: int
    axes: Axes = -1
    epsilon: float = 1e-5
    bias: bool = False
    dtype: Optional[DType] = None


class Conv1D(StrictModel):
    """1-D convolution over ``(batch, channels, length)`` input (``tvm.relax.frontend.nn.Conv1D``)."""

    type: Literal["Conv1D"] = "Conv1D"
    in_channels: int
    out_channels: int
    kernel_size: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1
    bias: bool = True
    dtype: Optional[DType] = None


class Embedding(StrictModel):
    """Lookup table of ``num`` vectors of size ``dim`` (``tvm.relax.frontend.nn.Embedding``)."""

    type: Literal["Embedding"] = "Embedding"
    num: Dim
    dim: Dim
    dtype: Optional[DType] = None


class ReLU(StrictModel):
    """Rectified linear unit activation."""

    type: Literal["ReLU"] = "ReLU"


class SiLU(StrictModel):
    """Sigmoid linear unit activation ``x * sigmoid(x)``."""

    type: Literal["SiLU"] = "SiLU"


class GELU(StrictModel):
    """Gaussian error linear unit activation."""

    type: Literal["GELU"] = "GELU"


LAYER_TYPES: dict[str, type[StrictModel]] = {
    cls.model_fields["type"].default: cls for cls in (Linear, LayerNorm, RMSNorm, Conv1D, Embedding, ReLU, SiLU, GELU)
}
"""Layer models by their ``type`` name."""

LayerDef = Annotated[
    Union[Linear, LayerNorm, RMSNorm, Conv1D, Embedding, ReLU, SiLU, GELU], Field(discriminator="type")
]
"""One layer of :attr:`ModelDef.layers`, chosen by its ``type`` key."""


class ModelDef(StrictModel):
    """The network: named layers (parameters) and the forward computation as Python-syntax text."""

    layers: dict[Identifier, LayerDef] = {}
    forward: str


class InputSpec(StrictModel):
    """One input tensor of an exported function: its shape (sizes or symbolic names) and element type."""

    shape: list[Dim]
    dtype: DType


class WeightsDef(StrictModel):
    """Where the weights come from: a file, a name prefix in it, and renames (our name -> name in the file)."""

    path: Optional[str] = None
    prefix: str = ""
    map: dict[str, str] = {}


class Recipe(StrictModel):
    """A validated recipe. ``source`` gives the file positions of its fields for error messages."""

    name: str
    description: str = ""
    vars: dict[Identifier, Any] = {}
    model: ModelDef
    functions: Annotated[dict[Identifier, dict[Identifier, InputSpec]], Field(min_length=1)]
    dtype: Optional[DType] = None
    quantization: str = "none"
    weights: Optional[WeightsDef] = None

    _source: Optional[SourceMap] = PrivateAttr(default=None)

    @field_validator("quantization")
    @classmethod
    def _known_quantization(cls, value: str) -> str:
        if value not in QUANTIZATION_PRESETS:
            raise PydanticCustomError("quantization", "unknown quantization preset {value}; valid presets: {valid}",
                                      {"value": repr(value), "valid": ", ".join(QUANTIZATION_PRESETS)})
        return value

    @property
    def source(self) -> SourceMap:
        """Source positions of this recipe's fields (an empty map if it was not loaded from YAML)."""
        if self._source is None:
            self._source = SourceMap("<recipe>")
        return self._source
