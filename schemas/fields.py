"""The field types every recipe model uses: dtype names, identifiers, dimensions, axes and
:class:`StrictModel`, the base of all models (:mod:`schemas.layers` and :mod:`schemas.models` build on them).

Raises (validation, as ``PydanticCustomError``): a name that is not an identifier, a dim that is neither a
size in ``[0, 2**40]`` nor a symbolic name, an axis outside ``[-MAX_NDIM, MAX_NDIM)``.
"""

from __future__ import annotations

import keyword
import re
from typing import Annotated, Any, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from core.dtypes import DTYPES, DType  # noqa: F401 (re-exported: the one dtype table)
from core.limits import MAX_DIM, MAX_NDIM
from core.messages import shorten

__all__ = ["DType", "DTYPES", "Identifier", "Dim", "Axes", "StrictModel", "is_identifier"]


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_identifier(value: Any) -> bool:
    """Whether ``value`` is a name recipes accept: an ASCII identifier (``[A-Za-z_][A-Za-z0-9_]*``) that is
    not a Python keyword (layer, input, function and variable names, and ``name=`` hints in forward)."""
    return isinstance(value, str) and bool(_IDENTIFIER.fullmatch(value)) and not keyword.iskeyword(value)


def _check_identifier(value: str) -> str:
    if not is_identifier(value):
        raise PydanticCustomError(
            "identifier", "{value} is not a valid name: use letters, digits and '_', not starting with a digit,"
            " and not a Python keyword", {"value": shorten(value)})
    return value


def _check_dim(value: Any) -> Any:
    is_size = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if not is_size and not (isinstance(value, str) and _IDENTIFIER.fullmatch(value)):
        raise PydanticCustomError(
            "dim", "expected a non-negative integer or a symbolic dimension name (an identifier), got {value}",
            {"value": shorten(value)})
    if is_size and value > MAX_DIM:
        raise PydanticCustomError("dim", "a size must be at most 2**40 ({limit}), got {value}",
                                  {"limit": MAX_DIM, "value": shorten(value)})
    return value



def _check_axes(value: Any) -> Any:
    def is_int(item: Any) -> bool:
        return isinstance(item, int) and not isinstance(item, bool)

    if not is_int(value) and not (isinstance(value, list) and all(map(is_int, value))):
        raise PydanticCustomError("axes", "expected an integer axis or a list of integer axes, got {value}",
                                  {"value": shorten(value)})
    for axis in value if isinstance(value, list) else [value]:
        if not -MAX_NDIM <= axis < MAX_NDIM:
            raise PydanticCustomError("axes", "axis {axis} is out of range: a tensor has at most {limit} dims",
                                      {"axis": shorten(axis), "limit": MAX_NDIM})
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
