"""Scatters: ``scatter_elements`` (``torch.Tensor.scatter`` / ``scatter_reduce``, ONNX ``ScatterElements``)
and ``scatter_nd`` (ONNX ``ScatterND``, what exporters write for an assignment into a slice) as PrimFuncs.

A scatter is not a tensor expression (several updates may write one element, in order), so the loops
are written directly, as TVM's ``topi.scatter_elements`` / ``scatter_nd`` build them with the IR
builder: the output starts as a copy of ``data``, then one serial pass over the updates in row-major
order applies ``reduction`` (``update``: the last write wins, as onnxruntime and PyTorch's CPU kernels
do for duplicates; ``add``, ``mul``, ``max``, ``min``). Every index read from ``indices`` is checked
when the code runs (a negative one counts from the end; outside ``[-dim, dim)`` the function returns
"index out of range", never a write out of bounds), and the dims of ``indices`` / ``updates`` that are
not known to fit are checked before the loops.
"""
from __future__ import annotations

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from ...ir.op.common import static_int
from ...ir.op.manipulation import SCATTER_REDUCTIONS
from ..tensor import Tensor
from .common import assert_dims_le, cast_value, compute_dtype, normalize_axis
from .transform import checked_index

__all__ = ["scatter_elements_prim_func", "scatter_nd_prim_func"]



def _combine(reduction: str, old: PrimExpr, new: PrimExpr, dtype: str) -> PrimExpr:
    """``old (reduction) new`` in ``dtype`` (16-bit floats computed in float32, then rounded)."""
    if reduction == "update":
        return new
    cd = compute_dtype(dtype)
    return cast_value(_reduce(reduction, cast_value(old, cd), cast_value(new, cd)), dtype)


def _reduce(reduction: str, old: PrimExpr, new: PrimExpr) -> PrimExpr:
    if reduction == "add":
        return old + new
    if reduction == "mul":
        return old * new
    if reduction == "max":
        return tir.maximum(old, new)
    if reduction == "min":
        return tir.minimum(old, new)
    raise ValueError(f"scatter: reduction must be one of {SCATTER_REDUCTIONS}, got {reduction!r}")


def _wrapped(j: PrimExpr, dim) -> PrimExpr:
    """An index read from ``indices``: negative counts from the end; checked to lie in ``[0, dim)``."""
    j = j.astype("int64")
    d = E.convert(dim).astype("int64")
    return checked_index(E.Select(E.LT(j, E.IntImm(0, "int64")), j + d, j), d)


def _loops(shape, body_of, names: str) -> tir.Stmt:
    ivars = [E.Var(f"{names}{d}", "int64") for d in range(len(shape))]
    body = body_of(ivars)
    for d in reversed(range(len(shape))):
        body = tir.For(ivars[d], 0, shape[d], "serial", body)
    return body


def _copy_then(x: Tensor, out: tir.Buffer, checks: list, scatter: tir.Stmt, params: list,
               name: str) -> tir.PrimFunc:
    copy = _loops(x.shape, lambda iv: tir.BufferStore(out, x.buffer[tuple(iv)], list(iv)), "c")
    func = tir.PrimFunc(params + [out], tir.SeqStmt(checks + [copy, scatter]),
                        {"global_symbol": name, "tir.noalias": True}, name)
    tir.verify(func)
    return func


def scatter_elements_prim_func(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0,
                               reduction: str = "update", name: str = "scatter_elements") -> tir.PrimFunc:
    """A PrimFunc ``(data, indices, updates, out)``: ``out = data``, then for every position ``i`` of
    ``indices`` (row-major) ``out[i with i[axis] = indices[i]] = reduction(that, updates[i])``.

    ``data``, ``indices`` (any integer dtype) and ``updates`` (``data``'s dtype) have the same rank; the
    indices may be smaller than the data in any dim, and than the updates (PyTorch's ``scatter``). Raises
    ValueError for an unknown reduction or an axis out of range."""
    if reduction not in SCATTER_REDUCTIONS:
        raise ValueError(f"scatter_elements: reduction must be one of {SCATTER_REDUCTIONS}, got {reduction!r}")
    ax = normalize_axis(axis, x.ndim, "scatter_elements")
    out = tir.Buffer("T_scatter_elements", x.shape, x.dtype)

    checks = assert_dims_le([(indices.shape[d], updates.shape[d]) for d in range(x.ndim)],
                        "scatter_elements: the indices are larger than the updates")
    checks += assert_dims_le([(indices.shape[d], x.shape[d]) for d in range(x.ndim) if d != ax],
                         "scatter_elements: the indices are larger than the data")

    def body(iv):
        at = [_wrapped(indices.buffer[tuple(iv)], x.shape[d]) if d == ax else iv[d] for d in range(x.ndim)]
        return tir.BufferStore(out, _combine(reduction, tir.BufferLoad(out, at), updates.buffer[tuple(iv)], x.dtype),
                               at)

    return _copy_then(x, out, checks, _loops(indices.shape, body, "i"),
                      [x.buffer, indices.buffer, updates.buffer], name)


def scatter_nd_prim_func(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "update",
                         name: str = "scatter_nd") -> tir.PrimFunc:
    """A PrimFunc ``(data, indices, updates, out)`` (ONNX ``ScatterND``): ``indices`` has shape
    ``(*J, q)`` with a static ``q <= data.ndim``, ``updates`` shape ``(*J, *data.shape[q:])``; ``out =
    data``, then for every ``j`` of ``J`` (row-major) the slice ``out[indices[j, 0], ...,
    indices[j, q - 1], ...] = reduction(that, updates[j, ...])``. Raises ValueError for an unknown
    reduction or a ``q`` that is not static or larger than the data's rank."""
    if reduction not in SCATTER_REDUCTIONS:
        raise ValueError(f"scatter_nd: reduction must be one of {SCATTER_REDUCTIONS}, got {reduction!r}")
    q = static_int(indices.shape[-1]) if indices.ndim else None
    if q is None or not 0 < q <= x.ndim:
        raise ValueError(f"scatter_nd: the last dim of the indices must be static and in [1, {x.ndim}]")
    nj = indices.ndim - 1
    if updates.ndim != nj + x.ndim - q:
        raise ValueError(f"scatter_nd: updates need rank {nj + x.ndim - q}, got {updates.ndim}")
    out = tir.Buffer("T_scatter_nd", x.shape, x.dtype)

    want = list(indices.shape[:-1]) + list(x.shape[q:])   # the updates' shape, both ways
    checks = assert_dims_le(list(zip(updates.shape, want)) + list(zip(want, updates.shape)),
                        "scatter_nd: the updates' shape is not the indices' leading dims then the data's last")

    def body(iv):   # iv runs over the updates' shape
        at = [_wrapped(indices.buffer[tuple(iv[:nj]) + (E.IntImm(k, "int64"),)], x.shape[k]) for k in range(q)]
        at += list(iv[nj:])
        return tir.BufferStore(out, _combine(reduction, tir.BufferLoad(out, at), updates.buffer[tuple(iv)], x.dtype),
                               at)

    return _copy_then(x, out, checks, _loops(updates.shape, body, "i"),
                      [x.buffer, indices.buffer, updates.buffer], name)
