"""Reductions along axes: sum, mean, max, min, prod, argmax / argmin, and the cumulative sum PrimFunc.
"""
from __future__ import annotations


from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from ...ir.op.reduction import reduced_shape
from .. import tensor as _te
from ..tensor import Tensor
from .common import (
    cast_value, compute_dtype, element_count, full_index, normalize_axes, normalize_axis, reduce_axes, shape_product,
    two_stage_compute, zero_index,
)

__all__ = ["argmax", "argmin", "max", "mean", "min", "prod", "scan_prim_func", "sum"]


def _reduce(x: Tensor, axis, keepdims: bool, reducer, name: str, acc_dtype: str,
            out_dtype: str, fepilogue=None) -> Tensor:
    axes = normalize_axes(axis, x.ndim, name)
    shape = reduced_shape(x.shape, axes, keepdims)

    def fbody(*idx):
        rv = reduce_axes(x.shape, axes)
        return reducer(cast_value(x[full_index(idx, axes, x.ndim, rv, keepdims)], acc_dtype), axis=rv)

    epi = None if fepilogue is None else (lambda v, idx: fepilogue(v, axes))
    return two_stage_compute(shape, fbody, acc_dtype, out_dtype, name, epi)


def sum(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Sum over ``axis`` (int, list or None = all; negative allowed) (``numpy.sum``).

    16-bit floats accumulate in float32 (then a cast stage); bools are summed as int64; other
    dtypes accumulate in their own dtype (TVM's ``topi.sum``)."""
    out = "int64" if x.dtype == "bool" else x.dtype
    return _reduce(x, axis, keepdims, _te.sum, "T_sum", compute_dtype(out), out)


def mean(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over ``axis`` (``numpy.mean``): the sum (float32 for 16-bit floats) divided
    by the number of reduced elements, in an epilogue stage. Integer inputs keep their dtype and
    divide truncating toward zero (TVM's ``topi.mean``)."""
    acc = compute_dtype(x.dtype)

    def epi(v, axes):
        n = shape_product([x.shape[a] for a in axes])
        return v / (element_count([n], acc) if E.is_float_dtype(acc) else n.astype(acc))

    return _reduce(x, axis, keepdims, _te.sum, "T_mean", acc, x.dtype, epi)


def max(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Maximum over ``axis`` (``numpy.max``); identity is the dtype's lowest finite value."""
    return _reduce(x, axis, keepdims, _te.max, "T_max", compute_dtype(x.dtype), x.dtype)


def min(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Minimum over ``axis`` (``numpy.min``); identity is the dtype's highest finite value."""
    return _reduce(x, axis, keepdims, _te.min, "T_min", compute_dtype(x.dtype), x.dtype)


def prod(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - op name
    """Product over ``axis`` (``numpy.prod``, keeping the dtype; 16-bit floats in float32)."""
    return _reduce(x, axis, keepdims, _te.prod, "T_prod", compute_dtype(x.dtype), x.dtype)


def _arg_reduce(x: Tensor, axis, keepdims: bool, largest: bool) -> Tensor:
    """The index pass of :func:`argmax` / :func:`argmin` (see there for the rule on NaN)."""
    name = "T_argmax" if largest else "T_argmin"
    if axis is not None and not isinstance(axis, int):
        raise TypeError(f"{name[2:]}: axis must be an int or None, got {axis!r}")
    axes = normalize_axes(axis, x.ndim, name[2:])
    acc = compute_dtype(x.dtype)
    shape = reduced_shape(x.shape, axes, keepdims)
    nd = x.ndim
    reducer = _te.max if largest else _te.min
    has_nan = E.is_float_dtype(acc)
    n = shape_product([x.shape[a] for a in axes])   # elements per reduced row

    def fext(*idx):
        rv = reduce_axes(x.shape, axes)
        return reducer(cast_value(x[full_index(idx, axes, nd, rv, keepdims)], acc), axis=rv)

    ext = _te.compute(shape, fext, name=name + "_" + ("max" if largest else "min"))

    def fidx(*idx):
        rv = reduce_axes(x.shape, axes)
        flat: PrimExpr = zero_index()
        for a, r in zip(axes, rv):
            flat = flat * x.shape[a] + r.var
        v = cast_value(x[full_index(idx, axes, nd, rv, keepdims)], acc)
        big = tir.max_value("int64")
        if not has_nan:
            return _te.min(E.Select(E.EQ(v, ext[idx]), flat, big), axis=rv)
        # A NaN ranks before every extreme: its key is its index, an extreme's is index + n, so the
        # smallest key is the first NaN when the row holds one, whatever the extreme pass made of
        # the NaN (propagated or skipped), and the first extreme otherwise.
        key = E.Select(E.EQ(v, ext[idx]), flat + n, big)
        return _te.min(E.Select(E.NE(v, v), flat, key), axis=rv)

    if not has_nan:
        return _te.compute(shape, fidx, name=name)

    def unkey(k, idx):
        return E.Select(E.And(E.GE(k, n), E.LT(k, n + n)), k - n, k)

    return two_stage_compute(shape, fidx, "int64", "int64", name, unkey)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the maximum along ``axis`` of ``x`` (any float or int dtype; ``axis`` an int or
    None for the flat index of the whole tensor; ``keepdims`` keeps the reduced axis as size 1).

    Follows ``numpy.argmax`` (also PyTorch's and onnxruntime's ArgMax): the first index on ties, and
    in a row holding NaN the index of its first NaN (NaN counts as the largest and smallest value).
    Passes: the maximum (``T_argmax_max``, float32 for 16-bit floats); the smallest key, where a
    NaN's key is its index and a maximum's is its index + the row length (``T_argmax_acc``); the key
    back to an index (``T_argmax``). Integer inputs skip the NaN keys (two passes). Raises TypeError
    for an axis that is not an int or None, ValueError for one out of range."""
    return _arg_reduce(x, axis, keepdims, True)


def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int64) of the minimum along ``axis`` (``numpy.argmin``: first on ties, first NaN of a
    row holding one; see :func:`argmax`)."""
    return _arg_reduce(x, axis, keepdims, False)


def scan_prim_func(x: Tensor, axis: int | None = None, dtype: str | None = None,
                   exclusive: bool = False, kind: str = "sum", name: str | None = None) -> tir.PrimFunc:
    """A PrimFunc ``(x, T_cum<kind>)`` computing the cumulative sum (``kind="sum"``, ``numpy.cumsum``) or
    product (``"prod"``, ``numpy.cumprod``) of placeholder ``x`` along ``axis`` (``axis=None`` scans the
    flattened tensor into a 1-D result).

    A scan is not a tensor expression, so the loops are written directly (already lowered,
    as TVM's ``topi.cumsum`` / ``topi.cumprod`` build them with the IR builder): for every position
    outside ``axis`` a running sum / product in a one-element accumulator (float32 for 16-bit floats,
    else the result dtype; starting at 0 / 1) walks the axis serially and stores ``acc`` after
    combining the element (``exclusive=True``: before). ``dtype`` (default ``x.dtype``) is the result
    dtype. Raises ValueError for another ``kind``.
    """
    if kind not in ("sum", "prod"):
        raise ValueError(f"scan: kind must be 'sum' or 'prod', got {kind!r}")
    name = name or f"cum{kind}"
    odt = dtype if dtype not in (None, "void") else x.dtype
    acc_dt = compute_dtype(odt) if odt != "bool" else "int64"
    nd = x.ndim
    total = shape_product(x.shape)
    if axis is None:
        out = tir.Buffer(f"T_cum{kind}", [total], odt)
        outer_dims: list[int] = []
        scan_dims = list(range(nd))
    else:
        ax = normalize_axis(axis, nd, name)
        out = tir.Buffer(f"T_cum{kind}", x.shape, odt)
        outer_dims = [d for d in range(nd) if d != ax]
        scan_dims = [ax]
    acc = tir.Buffer("acc", [1], acc_dt)
    zero_i = zero_index()
    ivars = [E.Var(f"i{d}", "int64") for d in range(nd)]

    def out_index() -> list[PrimExpr]:
        if axis is not None:
            return list(ivars)
        flat: PrimExpr = zero_index()
        for d in range(nd):
            flat = flat * x.shape[d] + ivars[d]
        return [flat]

    v = cast_value(x.buffer[tuple(ivars)], acc_dt)
    cur = tir.BufferLoad(acc, [zero_i])
    store_out = tir.BufferStore(out, cast_value(cur, odt), out_index())
    add = tir.BufferStore(acc, cur + v if kind == "sum" else cur * v, [zero_i])
    body: tir.Stmt = tir.SeqStmt([store_out, add] if exclusive else [add, store_out])
    for d in reversed(scan_dims):
        body = tir.For(ivars[d], 0, x.shape[d], "serial", body)
    body = tir.SeqStmt([tir.BufferStore(acc, E.const(0 if kind == "sum" else 1, acc_dt), [zero_i]), body])
    for d in reversed(outer_dims):
        body = tir.For(ivars[d], 0, x.shape[d], "serial", body)
    func = tir.PrimFunc([x.buffer, out], tir.Allocate(acc, body),
                        {"global_symbol": name, "tir.noalias": True}, name)
    tir.verify(func)
    return func
