"""Tensor manipulation: reshape, permute, gather, concatenate / split, add / remove / broadcast dims,
repeat, pad, triangular masks."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.op import resolve_reshape
from ..core import Tensor, wrap_nested
from .common import axis_list, check_ndim, describe, op_call, shape_dims, short


def permute_dims(x: Tensor, axes: Sequence[int] | None = None, name: str | None = None) -> Tensor:
    """Permute dimensions (``numpy.transpose``); ``axes=None`` reverses them. Raises TypeError when
    ``axes`` is not None or a list / tuple (of ints: the op's shape rule checks them)."""
    if axes is not None and not isinstance(axes, (list, tuple)):
        raise TypeError(f"permute_dims: axes must be a list of ints or None, got {describe(axes)}")
    return wrap_nested(op_call("permute_dims", [x._expr], axes=None if axes is None else list(axes)),
                       name or "permute_dims")


def reshape(x: Tensor, shape: Sequence, name: str = "reshape") -> Tensor:
    """Reshape (row-major); one ``-1`` is inferred, symbolic dims allowed.

    Raises TypeError when ``shape`` is not a sequence of ints / int64 PrimExprs, ValueError for a
    negative dim other than ``-1``, more than :data:`~schemas.limits.MAX_NDIM` dims, or element counts
    that cannot match."""
    if isinstance(shape, (int, str, E.PrimExpr, Tensor)) or not isinstance(shape, Sequence):
        raise TypeError(f"reshape: shape must be a list of dims, got {type(shape).__name__}")
    check_ndim(len(shape), "reshape")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer, E.PrimExpr)):
            raise TypeError(f"reshape: invalid dim {short(d)} in the shape (ints or symbolic int64 dims)")
        if isinstance(d, (int, np.integer)) and d < -1:
            raise ValueError(f"reshape: negative dim {d} in the shape (only -1, inferred, may be negative)")
    dims = resolve_reshape(tuple(x.shape), list(shape))
    return wrap_nested(op_call("reshape", [x._expr, rx.ShapeExpr(dims)]), name)


def take(x: Tensor, indices: Tensor, axis: int | None = None, name: str = "take") -> Tensor:
    """Gather ``x`` along ``axis`` at integer ``indices`` (``numpy.take``; out-of-range indices are
    an error the caller must avoid: mode "fast" does no clipping)."""
    return wrap_nested(op_call("take", [x._expr, indices._expr], axis=0 if axis is None else axis,
                             mode="fast"), name)


def concat(x: Sequence[Tensor], dim: int, name: str = "concat") -> Tensor:
    """Concatenate tensors along ``dim`` (``numpy.concatenate``): ``R.concat((a, b), axis=dim)``.

    All tensors need the same dtype and rank and equal dims outside ``dim`` (symbolic dims
    allowed); the result's ``dim`` is the sum. Raises TypeError / ValueError naming the
    mismatching elements.
    """
    exprs = [t._expr for t in x]
    return wrap_nested(op_call("concat", [rx.Tuple(exprs)], axis=int(dim)), name)


def split(ary: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0,
          name: str = "split") -> tuple[Tensor, ...]:
    """Split ``ary`` along ``axis``: ``R.split(x, indices_or_sections=..., axis=...)``.

    An int ``n`` gives ``n`` pieces of ``ceil(d / n)`` (the last one takes the rest, as TVM and
    ``torch.chunk``); a list of indices cuts before each index (``numpy.split``). Returns a
    tuple of Tensors (bindings ``split``, ``split_0``, ``split_1``, ...).
    """
    ios = (int(indices_or_sections) if isinstance(indices_or_sections, (int, np.integer))
           else [int(i) for i in indices_or_sections])
    return wrap_nested(op_call("split", [ary._expr], indices_or_sections=ios, axis=int(axis)), name)


def chunk(x: Tensor, chunks: int, dim: int = 0, name: str = "chunk") -> tuple[Tensor, ...]:
    """``chunks`` pieces of ``x`` along ``dim``: ``R.split(x, indices_or_sections=chunks, axis=dim)``
    (each ``ceil(d / chunks)`` long, the last one shorter)."""
    return wrap_nested(op_call("split", [x._expr], indices_or_sections=int(chunks), axis=int(dim)),
                       name)


def unsqueeze(x: Tensor, dim: int, name: str = "unsqueeze") -> Tensor:
    """Insert a size-1 axis at ``dim`` (negative counts from the end of the result):
    ``R.expand_dims(x, axis=[dim])``."""
    return wrap_nested(op_call("expand_dims", [x._expr], axis=[int(dim)]), name)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = -1, name: str = "squeeze") -> Tensor:
    """Remove size-1 axes: ``R.squeeze(x, axis=[...])``; ``axis=None`` removes every static
    size-1 dim. Raises ValueError when a given axis has a static size other than 1."""
    return wrap_nested(op_call("squeeze", [x._expr], axis=axis_list(axis)), name)


def broadcast_to(x: Tensor, shape: Sequence, name: str = "broadcast_to") -> Tensor:
    """Broadcast ``x`` to ``shape`` (numpy rules): ``R.broadcast_to(x, R.shape([...]))``.
    Raises ValueError when a dim of ``x`` is neither 1 nor the target dim."""
    return wrap_nested(op_call("broadcast_to", [x._expr, rx.ShapeExpr(shape_dims(shape, "broadcast_to"))]),
                       name)


def repeat(x: Tensor, repeats: int, axis: int | None = None, name: str = "repeat") -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``); ``axis=None``
    repeats the flattened tensor: ``R.repeat(x, repeats=r, axis=a)``."""
    return wrap_nested(op_call("repeat", [x._expr], repeats=int(repeats),
                             axis=None if axis is None else int(axis)), name)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0,
        name: str = "pad") -> Tensor:
    """Pad ``x``; ``pad`` is ``[before_0, after_0, before_1, after_1, ...]`` from axis 0 (TVM's
    order, unlike ``torch.nn.functional.pad``). ``mode``: ``"constant"`` (fill ``value``),
    ``"edge"`` (repeat the border element) or ``"reflect"`` (mirror without the border, as
    ``numpy.pad``): ``R.nn.pad(x, pad_width=[...], pad_value=v, pad_mode=mode)``."""
    return wrap_nested(op_call("nn.pad", [x._expr], pad_width=[int(p) for p in pad],
                             pad_value=float(value), pad_mode=mode), name)


def triu(x: Tensor, diagonal: int = 0, name: str = "triu") -> Tensor:
    """Upper triangle of the last two dims (``numpy.triu``): elements with ``j - i < diagonal``
    become 0: ``R.triu(x, R.prim_value(diagonal))``. Raises ValueError for ndim < 2."""
    return wrap_nested(op_call("triu", [x._expr, rx.PrimValue(diagonal, "int64")]), name)


def tril(x: Tensor, diagonal: int = 0, name: str = "tril") -> Tensor:
    """Lower triangle of the last two dims (``numpy.tril``): elements with ``j - i > diagonal``
    become 0: ``R.tril(x, R.prim_value(diagonal))``. Raises ValueError for ndim < 2."""
    return wrap_nested(op_call("tril", [x._expr, rx.PrimValue(diagonal, "int64")]), name)
