"""Sorting along an axis: ``sort`` / ``argsort`` / ``topk`` (``torch.sort`` / ``argsort`` / ``topk``, ONNX
``TopK``, ``numpy.sort`` / ``argsort`` with ``kind="stable"``) as one PrimFunc builder.

A sort is not a tensor expression, so the loops are written directly (TVM's ``topi.sort`` is an extern
call; ours is plain TIR): per line along the axis a bottom-up merge sort of the positions ``0 .. n-1``
(von Neumann's merge sort, Knuth TAOCP vol. 3 section 5.2.4: runs of width 1, 2, 4, ... merged in
``ceil(log2 n)`` passes; O(n log n) comparisons, two int64 work arrays of ``n``). The merge takes the
left run's element unless the right one sorts strictly before it, so equal values keep their original
order (stable, as ``numpy`` / ``torch.sort(stable=True)`` / ONNX ``TopK`` ask: the lower index first).
NaN sorts after every number ascending and before every number descending (PyTorch and numpy: NaN is
the largest). The first ``k`` positions give the values and the indices.
"""
from __future__ import annotations

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from ..tensor import Tensor
from .common import normalize_axis

__all__ = ["sort_prim_func"]


def _before(u: PrimExpr, v: PrimExpr, descending: bool, is_float: bool) -> PrimExpr:
    """Whether value ``u`` sorts strictly before ``v`` (NaN the largest)."""
    if not is_float:
        return E.GT(u, v) if descending else E.LT(u, v)
    u_nan, v_nan = E.NE(u, u), E.NE(v, v)
    if descending:
        return E.Or(E.And(u_nan, E.Not(v_nan)), E.GT(u, v))
    return E.Or(E.And(v_nan, E.Not(u_nan)), E.LT(u, v))


def sort_prim_func(x: Tensor, axis: int = -1, descending: bool = False, k=None, values: bool = True,
                   indices: bool = True, index_dtype: str = "int64", name: str = "sort") -> tir.PrimFunc:
    """A PrimFunc ``(x, [values], [indices])``: along ``axis`` the first ``k`` elements of ``x`` in sorted
    order (ascending, or descending) and / or their positions (``index_dtype``); ``k`` None sorts the whole
    axis (``sort`` / ``argsort``), an int or symbolic int64 ``k`` gives ``topk``. ``k`` larger than the axis
    is an error when the code runs (a static one when the PrimFunc is made: ValueError). Raises ValueError
    for an axis out of range or neither output asked for."""
    if not (values or indices):
        raise ValueError("sort: ask for the values, the indices or both")
    ax = normalize_axis(axis, x.ndim, "sort")
    n = E.convert(x.shape[ax]).astype("int64")
    kk = n if k is None else E.convert(k).astype("int64")
    if isinstance(kk, E.IntImm) and isinstance(E.simplify(n), E.IntImm) and kk.value > E.simplify(n).value:
        raise ValueError(f"topk: k = {kk.value} is larger than the axis ({E.simplify(n).value})")
    if isinstance(kk, E.IntImm) and kk.value < 0:
        raise ValueError(f"topk: k must be >= 0, got {kk.value}")
    out_shape = list(x.shape)
    out_shape[ax] = kk if k is not None else x.shape[ax]
    outs = []
    if values:
        outs.append(tir.Buffer("T_sort_values" if k is None else "T_topk_values", out_shape, x.dtype))
    if indices:
        outs.append(tir.Buffer("T_sort_indices" if k is None else "T_topk_indices", out_shape, index_dtype))
    i64 = lambda v: E.IntImm(v, "int64")  # noqa: E731
    zero = i64(0)
    pos_a = tir.Buffer("sort_pos", [n], "int64")
    pos_b = tir.Buffer("sort_merged", [n], "int64")
    width = tir.Buffer("sort_width", [1], "int64")
    left = tir.Buffer("sort_left", [1], "int64")
    right = tir.Buffer("sort_right", [1], "int64")
    is_float = E.is_float_dtype(x.dtype)
    outer = [E.Var(f"o{d}", "int64") for d in range(x.ndim)]

    def key(pos: PrimExpr) -> PrimExpr:
        idx = list(outer)
        idx[ax] = pos
        return x.buffer[tuple(idx)]

    def load(buf, i):
        return tir.BufferLoad(buf, [i])

    def store(buf, v, i):
        return tir.BufferStore(buf, v, [i])

    t, blk, p = (E.Var(v, "int64") for v in ("t", "blk", "p"))
    w, lo, mid, hi, li, ri = (E.Var(v, "int64") for v in ("w", "lo", "mid", "hi", "li", "ri"))
    last = n - 1
    take_right = E.And(E.LT(ri, hi), E.Or(E.GE(li, mid), _before(key(load(pos_a, tir.minimum(ri, last))),
                                                                  key(load(pos_a, tir.minimum(li, last))),
                                                                  descending, is_float)))
    step = tir.LetStmt(li, load(left, zero), tir.LetStmt(ri, load(right, zero), tir.IfThenElse(
        take_right,
        tir.SeqStmt([store(pos_b, load(pos_a, ri), t), store(right, ri + 1, zero)]),
        tir.SeqStmt([store(pos_b, load(pos_a, li), t), store(left, li + 1, zero)]))))
    merge = tir.LetStmt(lo, blk * (w * 2), tir.LetStmt(mid, tir.minimum(lo + w, n), tir.LetStmt(
        hi, tir.minimum(lo + w * 2, n), tir.SeqStmt([
            store(left, lo, zero), store(right, mid, zero), tir.For(t, lo, hi - lo, "serial", step)]))))
    one_pass = tir.LetStmt(w, load(width, zero), tir.IfThenElse(E.LT(w, n), tir.SeqStmt([
        tir.For(blk, 0, (n + w * 2 - 1) // (w * 2), "serial", merge),
        tir.For(t, 0, n, "serial", store(pos_a, load(pos_b, t), t)),
        store(width, w * 2, zero)])))
    results = []
    at = list(outer)
    at[ax] = t
    if values:
        results.append(tir.BufferStore(outs[0], key(load(pos_a, t)), at))
    if indices:
        results.append(tir.BufferStore(outs[-1], load(pos_a, t).astype(index_dtype), at))
    line = tir.SeqStmt([
        tir.For(t, 0, n, "serial", store(pos_a, t, t)),
        store(width, i64(1), zero),
        tir.For(p, 0, 63, "serial", one_pass),
        tir.For(t, 0, kk, "serial", tir.SeqStmt(results))])
    body: tir.Stmt = line
    for d in reversed(range(x.ndim)):
        if d != ax:
            body = tir.For(outer[d], 0, x.shape[d], "serial", body)
    if k is not None and not (isinstance(kk, E.IntImm) and isinstance(E.simplify(n), E.IntImm)):
        check = tir.Evaluate(E.Call("int64", "assert_le", [kk, n, E.StringImm("topk: k is larger than the axis")]))
        body = tir.SeqStmt([check, body])
    for buf in (right, left, width, pos_b, pos_a):
        body = tir.Allocate(buf, body)
    func = tir.PrimFunc([x.buffer] + outs, body, {"global_symbol": name, "tir.noalias": True}, name)
    tir.verify(func)
    return func
