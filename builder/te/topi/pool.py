"""Pooling: max / average pooling over the spatial dims of NCW / NCHW data (``torch.nn.MaxPool1d`` /
``MaxPool2d``, ``AvgPool1d`` / ``AvgPool2d``, ONNX ``MaxPool`` / ``AveragePool``) and adaptive
average pooling (``torch.nn.AdaptiveAvgPool1d`` / ``2d``, ONNX ``GlobalAveragePool``).

Windows are read inline with ``if_then_else`` on the bounds (no padded copy): max pooling ignores
positions outside the data (PyTorch's implicit ``-inf`` padding; the identity here is the dtype's
lowest finite value, as TVM's topi), average pooling sums the positions inside and divides by the
count PyTorch uses (see :func:`pool`).
"""
from __future__ import annotations

import builtins
from typing import Sequence

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from ...ir.op import pool_out_dim
from ...ir.op.common import fmt_shape, static_int
from .. import tensor as _te
from ..tensor import Tensor
from .common import accumulator_dtype, cast_value, output_dtype, two_stage_compute, upcast

__all__ = ["pool", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d"]

_I64 = "int64"
_MAX_UNCLIPPED_TAPS = 16
"""A window dim of at most this many taps over a symbolic input length loops over all of them; a longer
one only over the taps that can land in the data (``min(k, ceil(L / d))``)."""


def _ints(v, n: int, what: str, opname: str) -> list[int]:
    vals = list(v) if isinstance(v, (list, tuple)) else [v]
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise ValueError(f"{opname}: {what} must be an int or {n} ints, got {v!r}")
    return [int(a) for a in vals]


def _ceil_div(a: PrimExpr, d: int) -> PrimExpr:
    """``ceil(a / d)`` for an int64 expression ``a`` (any sign; ``//`` is floor division) and ``d > 0``."""
    return a if d == 1 else (a + (d - 1)) // d


def _taps(start: PrimExpr, lo, hi, k: int, d: int) -> PrimExpr:
    """How many of the window taps ``start + i*d`` (``0 <= i < k``) fall in ``[lo, hi)``."""
    first = tir.maximum(_ceil_div(E.convert(lo) - start, d), E.IntImm(0, _I64))
    last = tir.minimum(_ceil_div(E.convert(hi) - start, d), E.IntImm(k, _I64))
    return tir.maximum(last - first, E.IntImm(0, _I64))


def _spatial_axes(x: Tensor, layout: str | None, opname: str) -> list[int]:
    """The spatial axes of ``x`` in ``layout`` (channels first ``NCW`` / ``NCHW`` / ``NCDHW``, the
    default, or channels last ``NWC`` / ``NHWC`` / ``NDHWC``)."""
    nsp = x.ndim - 2
    first, last = "NC" + "DHW"[3 - nsp:], "N" + "DHW"[3 - nsp:] + "C"
    if layout in (None, first):
        return list(range(2, x.ndim))
    if layout == last:
        return list(range(1, x.ndim - 1))
    raise ValueError(f"{opname}: layout must be {first} or {last} for a {x.ndim}-D input, got {layout!r}")


def pool(x: Tensor, kind: str, pool_size, strides=None, padding=0, dilation=1, ceil_mode: bool = False,
         count_include_pad: bool = True, out_dtype: str | None = None, layout: str | None = None) -> Tensor:
    """Max (``kind="max"``) or average (``kind="avg"``) pooling of ``x`` (N, C, *spatial), 1-3
    spatial dims, with PyTorch's semantics
    (https://pytorch.org/docs/stable/generated/torch.nn.MaxPool2d.html, ``AvgPool2d``)::

        start_i = o_i * stride_i - pad_lo_i;  taps start_i + r_i * dilation_i, 0 <= r_i < k_i
        max:  out[n, c, o] = max over taps inside the data of x[n, c, tap]
        avg:  out[n, c, o] = (sum over taps inside the data of x[n, c, tap]) / count
        count = prod_i (taps in [-pad_lo_i, L_i + pad_hi_i))   with count_include_pad
                prod_i (taps in [0, L_i))                        without

    (PyTorch's ``avg_pool2d`` divisor: padding counts, the part of a ``ceil_mode`` window past the
    padded input does not). Output lengths: :func:`builder.ir.op.pool_out_dim`.

    ``pool_size`` / ``strides`` (default: ``pool_size``) / ``dilation``: an int or one per spatial
    dim; ``padding``: an int, one per spatial dim (both sides), or ``(lo..., hi...)`` (TVM's
    order, 2 per dim). ``layout``: channels first (default) or last (``NHWC``: the spatial dims are
    1..n, what a GEMM-lowered convolution produces). Average pooling accumulates 16-bit floats in
    float32 and divides there. A window dim longer than the input loops over the taps that can land in
    the data only (``min(k, ceil(L / d))``; see :data:`_MAX_UNCLIPPED_TAPS`). Raises ValueError for a
    bad layout, a kind other than max / avg, average pooling of a non-float dtype, bad sizes, or an
    output dim below 1.
    """
    if kind not in ("max", "avg"):
        raise ValueError(f"pool: kind must be 'max' or 'avg', got {kind!r}")
    opname = f"{kind}_pool{x.ndim - 2}d"
    nsp = x.ndim - 2
    if not 1 <= nsp <= 3:
        raise ValueError(f"{opname}: data must be (N, C, *spatial) with 1-3 spatial dims, got {fmt_shape(x.shape)}")
    if kind == "avg" and not E.is_float_dtype(x.dtype):
        raise ValueError(f"{opname}: average pooling needs a float dtype, got {x.dtype}")
    ks = _ints(pool_size, nsp, "pool_size", opname)
    ss = ks if strides is None else _ints(strides, nsp, "strides", opname)
    ds = _ints(dilation, nsp, "dilation", opname)
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    if len(pads) in (1, nsp) and len(pads) != 2 * nsp:
        pads = _ints(pads, nsp, "padding", opname) * 2
    pads = _ints(pads, 2 * nsp, "padding", opname)
    lo, hi = pads[:nsp], pads[nsp:]
    if builtins.min(ks + ss + ds) < 1 or builtins.min(pads) < 0:
        raise ValueError(f"{opname}: invalid pool_size={pool_size} strides={strides} dilation={dilation} "
                         f"padding={padding}")
    axes_sp = _spatial_axes(x, layout, opname)
    spatial = [x.shape[a] for a in axes_sp]
    outs = [pool_out_dim(L, k, s, pl, ph, d, ceil_mode) for L, k, s, pl, ph, d in zip(spatial, ks, ss, lo, hi, ds)]
    for o in outs:
        so = static_int(o)
        if so is not None and so < 1:
            raise ValueError(f"{opname}: the output of {fmt_shape(x.shape)} would have a dim of {so}; "
                             f"the window {ks} (dilation {ds}) is larger than the padded input")
    shape = list(x.shape)
    for a, o in zip(axes_sp, outs):
        shape[a] = o

    def at(idx, pos):
        full = list(idx)
        for a, p in zip(axes_sp, pos):
            full[a] = p
        return x[tuple(full)]

    def sp(idx):
        return [idx[a] for a in axes_sp]

    # positions past the data's end are possible with padding on the high side or a ceil_mode window
    check_hi = [ph > 0 or ceil_mode for ph in hi]
    # the taps of a window that can land in the data: at most ceil(L / d) of them, so a window far larger
    # than the input (an attribute, untrusted in a recipe) costs what the input holds, not k; a clipped
    # dim starts its taps at the first one inside the data. Static small windows keep extent k.
    extents, clipped = [], []
    for L, k, d in zip(spatial, ks, ds):
        sl = static_int(L)
        if sl is not None:
            ext = builtins.min(k, -(-sl // d))
        elif k > _MAX_UNCLIPPED_TAPS:
            ext = tir.minimum(E.IntImm(k, _I64), _ceil_div(E.convert(L), d))
        else:
            ext = k
        extents.append(ext)
        clipped.append(static_int(ext) != k)

    def taps(idx, rs):
        starts = [E.simplify(o * s - pl) for o, s, pl in zip(sp(idx), ss, lo)]
        conds, pos = [], []
        for st, r, d, L, k, pl, ch, cl in zip(starts, rs, ds, spatial, ks, lo, check_hi, clipped):
            tap = r.var
            if cl:
                tap = E.simplify(tir.maximum(_ceil_div(-st, d), E.IntImm(0, _I64)) + r.var)
                conds.append(E.LT(tap, E.IntImm(k, _I64)))
            p = E.simplify(st + (tap * d if d != 1 else tap))
            pos.append(p)
            if pl > 0:
                conds.append(E.GE(p, E.IntImm(0, _I64)))
            if ch or cl:
                conds.append(E.LT(p, E.convert(L)))
        return pos, conds

    def axes():
        return [_te.reduce_axis((0, e), name=f"r{i}") for i, e in enumerate(extents)]

    if kind == "max":
        odt = output_dtype(x.dtype, out_dtype)

        def fmax(*idx):
            rs = axes()
            pos, conds = taps(idx, rs)
            v = upcast(at(idx, pos))
            if conds:
                v = tir.if_then_else(tir.all(*conds), v, tir.min_value(v.dtype))
            return _te.max(v, axis=rs)

        acc = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype     # upcast's dtype
        return two_stage_compute(shape, fmax, acc, odt, "pool_max")

    odt = output_dtype(x.dtype, out_dtype)
    acc = accumulator_dtype(x.dtype, odt)

    def fsum(*idx):
        rs = axes()
        pos, conds = taps(idx, rs)
        v = cast_value(at(idx, pos), acc)
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.const(0, acc))
        return _te.sum(v, axis=rs)

    def fdiv(v, idx):
        count = None
        for o, L, k, s, d, pl, ph in zip(sp(idx), spatial, ks, ss, ds, lo, hi):
            start = E.simplify(o * s - pl)
            lo_b, hi_b = (-pl, E.simplify(E.convert(L) + ph)) if count_include_pad else (0, L)
            n = _taps(start, lo_b, hi_b, k, d)
            count = n if count is None else count * n
        return v / count.astype(acc)

    return two_stage_compute(shape, fsum, acc, odt, "pool_avg", fepilogue=fdiv)


def max_pool1d(x: Tensor, pool_size, strides=None, padding=0, dilation=1, ceil_mode: bool = False) -> Tensor:
    """:func:`pool` with ``kind="max"`` on NCW data."""
    _rank(x, 3, "max_pool1d")
    return pool(x, "max", pool_size, strides, padding, dilation, ceil_mode)


def max_pool2d(x: Tensor, pool_size, strides=None, padding=0, dilation=1, ceil_mode: bool = False) -> Tensor:
    """:func:`pool` with ``kind="max"`` on NCHW data."""
    _rank(x, 4, "max_pool2d")
    return pool(x, "max", pool_size, strides, padding, dilation, ceil_mode)


def avg_pool1d(x: Tensor, pool_size, strides=None, padding=0, dilation=1, ceil_mode: bool = False,
               count_include_pad: bool = True, out_dtype: str | None = None) -> Tensor:
    """:func:`pool` with ``kind="avg"`` on NCW data."""
    _rank(x, 3, "avg_pool1d")
    return pool(x, "avg", pool_size, strides, padding, dilation, ceil_mode, count_include_pad, out_dtype)


def avg_pool2d(x: Tensor, pool_size, strides=None, padding=0, dilation=1, ceil_mode: bool = False,
               count_include_pad: bool = True, out_dtype: str | None = None) -> Tensor:
    """:func:`pool` with ``kind="avg"`` on NCHW data."""
    _rank(x, 4, "avg_pool2d")
    return pool(x, "avg", pool_size, strides, padding, dilation, ceil_mode, count_include_pad, out_dtype)


def _rank(x: Tensor, n: int, opname: str) -> None:
    if x.ndim != n:
        raise ValueError(f"{opname}: data must be {n}-D, got {fmt_shape(x.shape)}")


def adaptive_avg_pool(x: Tensor, output_size: Sequence, out_dtype: str | None = None,
                      layout: str | None = None) -> Tensor:
    """Adaptive average pooling of ``x`` (N, C, *spatial) to ``output_size`` (one static size per
    spatial dim; ``None`` keeps that dim), PyTorch's windows
    (https://pytorch.org/docs/stable/generated/torch.nn.AdaptiveAvgPool2d.html, ATen's
    ``start_index`` / ``end_index``)::

        start_i = floor(o_i * L_i / O_i),  end_i = ceil((o_i + 1) * L_i / O_i)
        out[n, c, o] = mean of x[n, c, start .. end)

    The reduction runs over the longest window (static input dims: the exact maximum; symbolic
    ones: ``ceil(L / O) + 1``) with the taps past ``end`` skipped. ``layout`` as :func:`pool`'s.
    16-bit floats accumulate in float32. Raises ValueError for a bad layout, a non-float dtype, a wrong
    number of sizes or a size below 1.
    """
    nsp = x.ndim - 2
    opname = f"adaptive_avg_pool{nsp}d"
    if not 1 <= nsp <= 3:
        raise ValueError(f"{opname}: data must be (N, C, *spatial) with 1-3 spatial dims, got {fmt_shape(x.shape)}")
    if not E.is_float_dtype(x.dtype):
        raise ValueError(f"{opname}: average pooling needs a float dtype, got {x.dtype}")
    sizes = list(output_size) if isinstance(output_size, (list, tuple)) else [output_size]
    if len(sizes) == 1:
        sizes = sizes * nsp
    if len(sizes) != nsp:
        raise ValueError(f"{opname}: output_size must have {nsp} values, got {output_size!r}")
    axes_sp = _spatial_axes(x, layout, opname)
    spatial = [x.shape[a] for a in axes_sp]
    outs = []
    for L, o in zip(spatial, sizes):
        if o is None:
            outs.append(L)
            continue
        if int(o) < 1:
            raise ValueError(f"{opname}: output_size must be >= 1, got {output_size!r}")
        outs.append(int(o))
    windows = []
    for L, o in zip(spatial, outs):
        sl, so = static_int(L), static_int(o)
        if sl is not None and so is not None:
            windows.append(builtins.max(-(-(i + 1) * sl // so) - (i * sl) // so for i in range(so)))
        elif so is not None:
            windows.append(E.simplify((E.convert(L) + (so - 1)) // so + 1))
        else:      # the output keeps a symbolic dim: window 1
            windows.append(1)
    odt = output_dtype(x.dtype, out_dtype)
    acc = accumulator_dtype(x.dtype, odt)
    shape = list(x.shape)
    for a, o in zip(axes_sp, outs):
        shape[a] = o

    def bounds(idx):
        out = []
        for o, L, O in zip([idx[a] for a in axes_sp], spatial, outs):
            L = E.convert(L)
            out.append((E.simplify(o * L // O), E.simplify((o * L + L + O - 1) // O)))
        return out

    def fsum(*idx):
        rs = [_te.reduce_axis((0, w), name=f"r{i}") for i, w in enumerate(windows)]
        bs = bounds(idx)
        pos = [E.simplify(st + r.var) for (st, _), r in zip(bs, rs)]
        conds = [E.LT(p, en) for p, (_, en), w in zip(pos, bs, windows) if static_int(w) != 1]
        full = list(idx)
        for a, p in zip(axes_sp, pos):
            full[a] = p
        v = cast_value(x[tuple(full)], acc)
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.const(0, acc))
        return _te.sum(v, axis=rs)

    def fdiv(v, idx):
        count = None
        for st, en in bounds(idx):
            n = E.simplify(en - st)
            count = n if count is None else count * n
        return v / count.astype(acc)

    return two_stage_compute(shape, fsum, acc, odt, "adaptive_pool_avg", fepilogue=fdiv)


def adaptive_avg_pool1d(x: Tensor, output_size, out_dtype: str | None = None) -> Tensor:
    """:func:`adaptive_avg_pool` of NCW data."""
    _rank(x, 3, "adaptive_avg_pool1d")
    return adaptive_avg_pool(x, output_size, out_dtype)


def adaptive_avg_pool2d(x: Tensor, output_size, out_dtype: str | None = None) -> Tensor:
    """:func:`adaptive_avg_pool` of NCHW data."""
    _rank(x, 4, "adaptive_avg_pool2d")
    return adaptive_avg_pool(x, output_size, out_dtype)
