"""Struct info: the static type-and-shape annotation carried by every graph-level value.

Mirrors TVM Relax: ``TensorStructInfo(shape, dtype)`` (shape: tuple of ``int`` or int64
``PrimExpr``, or ``None`` when only ``ndim`` is known), ``TupleStructInfo(fields)``,
``ObjectStructInfo()``, ``ShapeStructInfo(values)`` and ``PrimStructInfo(dtype)``.
"""
from __future__ import annotations

import abc
from typing import Sequence

from core.dtypes import DTYPES

from . import expr as E

__all__ = [
    "StructInfo", "TensorStructInfo", "TupleStructInfo", "ObjectStructInfo", "ShapeStructInfo",
    "PrimStructInfo", "normalize_dim", "dims_equal", "sym_vars", "DTYPES",
]

def normalize_dim(d) -> int | E.PrimExpr:
    """A shape dim as stored: a Python ``int`` for constants, an int64 ``PrimExpr`` otherwise.

    Raises TypeError for other types and ValueError for negative ints.
    """
    if isinstance(d, bool):
        raise TypeError(f"a shape dim cannot be a bool ({d!r})")
    if isinstance(d, int):
        if d < 0:
            raise ValueError(f"a shape dim must be >= 0, got {d}")
        return d
    if isinstance(d, E.IntImm):
        return d.value
    if isinstance(d, E.PrimExpr):
        if not E.is_int_dtype(d.dtype):
            raise TypeError(f"a shape dim must be an integer expression, got {d.dtype} {d}")
        d = E.simplify(d)
        return d.value if isinstance(d, E.IntImm) else d
    try:
        import numpy as np

        if isinstance(d, np.integer):
            return normalize_dim(int(d))
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"invalid shape dim {d!r} of type {type(d).__name__}")


def sym_vars(sinfo: "StructInfo", out: list | None = None) -> list:
    """The symbolic variables in the shapes of ``sinfo`` (tensors, shapes, tuples of them), each
    once, in order of first appearance. Appends to ``out`` when given and returns it."""
    out = [] if out is None else out
    if isinstance(sinfo, TupleStructInfo):
        for f in sinfo.fields:
            sym_vars(f, out)
        return out
    dims = getattr(sinfo, "shape", None) if isinstance(sinfo, TensorStructInfo) else \
        getattr(sinfo, "values", None) if isinstance(sinfo, ShapeStructInfo) else None
    for d in dims or ():
        if not isinstance(d, int):
            for v in E.free_vars(d):
                if all(v is not u for u in out):
                    out.append(v)
    return out


def dims_equal(a, b) -> bool:
    """True if two dims are provably equal (ints or int64 expressions)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return E.prove_equal(a, b)


def _same_dims(a: tuple | None, b: tuple | None) -> bool:
    """Two dim tuples of one ndim (``None``: not known) are the same: both unknown, or both known
    with provably equal dims."""
    if a is None or b is None:
        return a is b
    return all(dims_equal(x, y) for x, y in zip(a, b))


class StructInfo(abc.ABC):
    """Base class of struct info."""

    @abc.abstractmethod
    def same_as(self, other: "StructInfo") -> bool:
        """Structural equality (shape dims compared with :func:`dims_equal`)."""


class ObjectStructInfo(StructInfo):
    """Any runtime object (``R.Object``), e.g. the IO effect token."""

    def same_as(self, other: StructInfo) -> bool:
        """True when ``other`` is an ``R.Object`` too."""
        return isinstance(other, ObjectStructInfo)

    def __repr__(self) -> str:
        return "R.Object"


class PrimStructInfo(StructInfo):
    """A scalar of ``dtype`` (``R.Prim("int64")``), optionally with a known value."""

    def __init__(self, dtype: str = "int64", value: E.PrimExpr | None = None) -> None:
        self.dtype = dtype
        self.value = value

    def same_as(self, other: StructInfo) -> bool:
        """True when ``other`` is a scalar of the same dtype (a known value is not compared)."""
        return isinstance(other, PrimStructInfo) and other.dtype == self.dtype

    def __repr__(self) -> str:
        return f'R.Prim("{self.dtype}")'


class ShapeStructInfo(StructInfo):
    """A shape value (``R.Shape([...])``) with known dims ``values`` (or only ``ndim``)."""

    def __init__(self, values: Sequence | None = None, ndim: int = -1) -> None:
        self.values = None if values is None else tuple(normalize_dim(v) for v in values)
        self.ndim = len(self.values) if self.values is not None else ndim

    def same_as(self, other: StructInfo) -> bool:
        """True when ``other`` is a shape value of the same ndim whose dims are both unknown or pairwise equal
        (:func:`dims_equal`: symbolic dims compared after simplification)."""
        return (isinstance(other, ShapeStructInfo) and other.ndim == self.ndim
                and _same_dims(self.values, other.values))

    def __repr__(self) -> str:
        return f"R.Shape({list(self.values) if self.values is not None else self.ndim})"


class TensorStructInfo(StructInfo):
    """A tensor of ``dtype`` with ``shape`` (tuple of int / int64 PrimExpr) or unknown shape.

    ``TensorStructInfo((n, 4096), "float16")``. ``ndim`` is ``len(shape)`` when the shape is
    known, else the given ``ndim`` (-1: unknown). Raises ValueError for an unknown dtype.
    """

    def __init__(self, shape: Sequence | None = None, dtype: str = "float32", ndim: int = -1) -> None:
        if dtype not in DTYPES and dtype != "void":
            raise ValueError(f"unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
        self.shape = None if shape is None else tuple(normalize_dim(d) for d in shape)
        self.dtype = dtype
        self.ndim = len(self.shape) if self.shape is not None else ndim

    def same_as(self, other: StructInfo) -> bool:
        """True when ``other`` is a tensor of the same dtype and ndim whose shape is unknown on both sides or
        equal dim by dim (:func:`dims_equal`)."""
        return (isinstance(other, TensorStructInfo) and other.dtype == self.dtype and other.ndim == self.ndim
                and _same_dims(self.shape, other.shape))

    def __repr__(self) -> str:
        return f'R.Tensor({self.shape}, dtype="{self.dtype}")'


class TupleStructInfo(StructInfo):
    """A tuple of values, each with its own struct info (``R.Tuple(...)``)."""

    def __init__(self, fields: Sequence[StructInfo]) -> None:
        self.fields = tuple(fields)

    def same_as(self, other: StructInfo) -> bool:
        """True when ``other`` is a tuple of as many fields, each :meth:`StructInfo.same_as` this one's."""
        return (
            isinstance(other, TupleStructInfo)
            and len(other.fields) == len(self.fields)
            and all(a.same_as(b) for a, b in zip(self.fields, other.fields))
        )

    def __repr__(self) -> str:
        return f"R.Tuple({', '.join(map(repr, self.fields))})"
