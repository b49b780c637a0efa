"""Convolutions: conv1d (NCW / OIW), conv2d (NCHW / OIHW), conv1d_transpose (NCW / IOW), with PyTorch's
semantics (cross-correlation, groups, dilation, padding).
"""
from __future__ import annotations

import builtins

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr, promote_dtype
from ...ir.op import conv_out_dim
from ...ir.op.common import fmt_shape, static_int
from .. import tensor as _te
from ..tensor import Tensor
from .common import accumulator_dtype, cast_value, output_dtype, two_stage_compute

__all__ = ["conv1d", "conv1d_im2col", "conv1d_transpose", "conv1d_transpose_col2im", "conv2d", "conv2d_im2col",
           "conv2d_transpose", "conv2d_transpose_col2im", "depthwise_conv2d_nhwc"]


def _one(v, what: str) -> int:
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise ValueError(f"conv1d: {what} must have one value, got {v!r}")
        v = v[0]
    return int(v)


def _int_list(v, n: int, what: str, opname: str) -> list[int]:
    """``v`` (an int or ``n`` ints; a 1-list repeats) as ``n`` Python ints."""
    if isinstance(v, (list, tuple)):
        vals = [int(a) for a in v]
        if len(vals) == 1:
            vals = vals * n
    else:
        vals = [int(v)] * n
    if len(vals) != n:
        raise ValueError(f"{opname}: {what} must have {n} values, got {v!r}")
    return vals


def _conv1d_params(strides, padding, dilation, opname: str = "conv1d") -> tuple[int, int, int, int]:
    """``(stride, pad_lo, pad_hi, dilation)`` of a 1-D convolution from its attributes: ``strides`` /
    ``dilation`` an int or a 1-tuple, ``padding`` an int, ``(p,)`` or ``(lo, hi)``. Raises ValueError
    for other forms, a stride or dilation below 1 or a negative padding."""
    s = _one(strides, "strides")
    d = _one(dilation, "dilation")
    if isinstance(padding, (list, tuple)):
        if len(padding) == 1:
            lo = hi = int(padding[0])
        elif len(padding) == 2:
            lo, hi = int(padding[0]), int(padding[1])
        else:
            raise ValueError(f"{opname}: padding must be p, (p,) or (lo, hi), got {padding!r}")
    else:
        lo = hi = int(padding)
    if s < 1 or d < 1 or lo < 0 or hi < 0:
        raise ValueError(f"{opname}: invalid strides={strides} dilation={dilation} padding={padding}")
    return s, lo, hi, d


def _conv2d_params(strides, padding, dilation, opname: str) -> tuple[list[int], list[int], list[int]]:
    """``((sH, sW), (dH, dW), (top, left, bottom, right))`` of a 2-D convolution from its attributes:
    ``strides`` / ``dilation`` an int or ``(h, w)``, ``padding`` an int, ``(pH, pW)`` or 4 ints. Raises
    ValueError for other forms, a stride or dilation below 1 or a negative padding."""
    ss = _int_list(strides, 2, "strides", opname)
    ds = _int_list(dilation, 2, "dilation", opname)
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    if len(pads) == 2:
        pads = pads * 2
    ps = _int_list(pads, 4, "padding", opname)
    if builtins.min(ss + ds) < 1 or builtins.min(ps) < 0:
        raise ValueError(f"{opname}: invalid strides={strides} dilation={dilation} padding={padding}")
    return ss, ds, ps


def _transpose_channels(x: Tensor, w: Tensor, g: int, opname: str):
    """``(C / groups, O)`` of a transposed convolution (data (N, C, ...), weight (C, O / groups, ...)),
    after checking that the channels match and divide by ``groups`` (ValueError otherwise)."""
    c, ci, og = x.shape[1], w.shape[0], w.shape[1]
    sc, sci = static_int(c), static_int(ci)
    if sc is not None and sci is not None and sc != sci:
        raise ValueError(f"{opname}: data {fmt_shape(x.shape)} has {sc} channels but weight "
                         f"{fmt_shape(w.shape)} expects {sci}")
    if sc is not None and sc % g:
        raise ValueError(f"{opname}: {sc} input channels are not divisible by groups={g}")
    return (E.simplify(c // g) if g > 1 else c), E.simplify(og * g)


def _span_checks(width, k, lo: int, hi: int, d: int, opname: str) -> dict | None:
    """The dilated kernel must fit in the padded input (PyTorch raises "Kernel size can't be greater
    than actual input size"): raises ValueError here when both are static, else returns the
    ``mb.assert_le`` attribute that checks it when the code runs (None when nothing is left to check)."""
    span, padded = E.simplify(E.convert(k - 1) * d + 1), E.simplify(E.convert(width) + (lo + hi))
    if isinstance(span, E.IntImm) and isinstance(padded, E.IntImm):
        if span.value > padded.value:
            raise ValueError(f"{opname}: the input of length {width} (padded to {padded.value}) is shorter than "
                             f"the dilated kernel ({span.value} = dilation {d} x (kernel {k} - 1) + 1)")
        return None
    return {"mb.assert_le": [(span, padded, "the padded input is shorter than the dilated kernel")]}


def _in_bounds(pos: PrimExpr, size: PrimExpr, check_lo: bool, check_hi: bool) -> list[PrimExpr]:
    """The conditions that a read at ``pos`` of a padded dim of ``size`` is inside the data:
    ``pos >= 0`` when the low side is padded, ``pos < size`` when the high side is."""
    conds = []
    if check_lo:
        conds.append(E.GE(pos, E.IntImm(0, "int64")))
    if check_hi:
        conds.append(E.LT(pos, size))
    return conds


def conv1d(x: Tensor, w: Tensor, strides=1, padding=0, dilation=1, groups: int = 1,
           out_dtype: str | None = None) -> Tensor:
    """1-D convolution, NCW data and OIW weight (``torch.nn.Conv1d``,
    https://pytorch.org/docs/stable/generated/torch.nn.Conv1d.html; a cross-correlation)::

        out[n, o, t] = sum_{c, k} x_pad[n, g*C/G + c, t*stride + k*dilation] * w[o, c, k]
        g = o // (O / G),   W_out = (W + lo + hi - dilation*(K - 1) - 1) // stride + 1

    ``padding`` is an int, ``(p,)`` or ``(lo, hi)``; zero padding is applied inline with
    ``if_then_else`` on the bounds. ``strides`` / ``dilation`` are ints or 1-tuples. Precision
    as in :func:`matmul` (16-bit floats accumulate in float32, then a cast stage). Raises
    ValueError for non-3-D operands or channel counts that do not match ``groups``.
    """
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError(f"conv1d: data and weight must be 3-D (NCW / OIW), got "
                         f"{fmt_shape(x.shape)} and {fmt_shape(w.shape)}")
    s, lo, hi, d = _conv1d_params(strides, padding, dilation)
    g = int(groups)
    if g < 1:
        raise ValueError(f"conv1d: invalid groups={groups}")
    n, c, width = x.shape
    o, cg, k = w.shape
    sc, scg, so = static_int(c), static_int(cg), static_int(o)
    if sc is not None and scg is not None and sc != scg * g:
        raise ValueError(f"conv1d: data has {sc} channels but weight {fmt_shape(w.shape)} with "
                         f"groups={g} expects {scg * g}")
    if so is not None and so % g:
        raise ValueError(f"conv1d: {so} output channels are not divisible by groups={g}")
    out_w = conv_out_dim(width, k, s, lo, hi, d)
    checks = _span_checks(width, k, lo, hi, d, "conv1d")
    in_dtype = promote_dtype(x.dtype, w.dtype)
    odt = output_dtype(in_dtype, out_dtype)
    acc = accumulator_dtype(in_dtype, odt)
    o_per_g = E.simplify(o // g) if g > 1 else o

    def fbody(nn, oc, t):
        rc = _te.reduce_axis((0, cg), name="rc")
        rk = _te.reduce_axis((0, k), name="rk")
        pos = t * s + rk.var * d - lo if lo else t * s + rk.var * d
        chan = rc.var if g == 1 else (oc // o_per_g) * cg + rc.var
        v = cast_value(x[nn, chan, pos], acc)
        conds = _in_bounds(pos, width, lo > 0, hi > 0)
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.const(0, acc))
        return _te.sum(v * cast_value(w[oc, rc.var, rk.var], acc), axis=[rc, rk])

    return two_stage_compute((n, o, out_w), fbody, acc, odt, "conv1d_ncw", attrs=checks)


def conv2d(x: Tensor, w: Tensor, strides=1, padding=0, dilation=1, groups: int = 1,
           out_dtype: str | None = None) -> Tensor:
    """2-D convolution, NCHW data and OIHW weight (``torch.nn.Conv2d``,
    https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html; a cross-correlation)::

        out[n, o, y, x] = sum_{c, ky, kx} x_pad[n, g*C/G + c, y*sH + ky*dH, x*sW + kx*dW]
                                          * w[o, c, ky, kx],        g = o // (O / G)
        oH = (H + top + bottom - dH*(kH - 1) - 1) // sH + 1   (likewise oW)

    ``padding``: an int, ``(pH, pW)`` or ``(top, left, bottom, right)``; zero padding is read
    inline through ``if_then_else`` on the bounds. ``strides`` / ``dilation``: an int or
    ``(h, w)``. Precision as :func:`conv1d` (16-bit floats accumulate in float32, then a cast
    stage). Raises ValueError for non-4-D operands or channel counts that do not match ``groups``.
    """
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d: data and weight must be 4-D (NCHW / OIHW), got "
                         f"{fmt_shape(x.shape)} and {fmt_shape(w.shape)}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = _conv2d_params(strides, padding, dilation, "conv2d")
    g = int(groups)
    if g < 1:
        raise ValueError(f"conv2d: invalid groups={groups}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sc, scg, so = static_int(c), static_int(cg), static_int(o)
    if sc is not None and scg is not None and sc != scg * g:
        raise ValueError(f"conv2d: data {fmt_shape(x.shape)} has {sc} channels but weight "
                         f"{fmt_shape(w.shape)} with groups={g} expects {scg * g}")
    if so is not None and so % g:
        raise ValueError(f"conv2d: {so} output channels are not divisible by groups={g}")
    oh = conv_out_dim(h, kh, sh, pt, pb, dh)
    ow = conv_out_dim(wd, kw, sw, pl, pr, dw)
    in_dtype = promote_dtype(x.dtype, w.dtype)
    odt = output_dtype(in_dtype, out_dtype)
    acc = accumulator_dtype(in_dtype, odt)
    o_per_g = E.simplify(o // g) if g > 1 else o

    def fbody(nn, oc, yy, xx):
        rc = _te.reduce_axis((0, cg), name="rc")
        ry = _te.reduce_axis((0, kh), name="ry")
        rx = _te.reduce_axis((0, kw), name="rx")
        py = (yy * sh if sh != 1 else yy) + (ry.var * dh if dh != 1 else ry.var) - pt
        px = (xx * sw if sw != 1 else xx) + (rx.var * dw if dw != 1 else rx.var) - pl
        py, px = E.simplify(py), E.simplify(px)
        chan = rc.var if g == 1 else (oc // o_per_g) * cg + rc.var
        v = cast_value(x[nn, chan, py, px], acc)
        conds = _in_bounds(py, h, pt > 0, pb > 0) + _in_bounds(px, wd, pl > 0, pr > 0)
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.const(0, acc))
        return _te.sum(v * cast_value(w[oc, rc.var, ry.var, rx.var], acc), axis=[rc, ry, rx])

    return two_stage_compute((n, o, oh, ow), fbody, acc, odt, "conv2d_nchw")


def conv1d_transpose(x: Tensor, w: Tensor, strides=1, padding=0, output_padding=0, dilation=1,
                     groups: int = 1, out_dtype: str | None = None) -> Tensor:
    """1-D transposed convolution, NCW data and IOW weight (``torch.nn.ConvTranspose1d``,
    https://pytorch.org/docs/stable/generated/torch.nn.ConvTranspose1d.html), written as a
    gather over the input::

        out[n, g*Og + o, t] = sum_{c, k} x[n, g*Cg + c, q] * w[g*Cg + c, o, k]
            where t + lo - k*dilation = q*stride with 0 <= q < W   (other terms are zero)
        W_out = (W - 1)*stride - lo - hi + dilation*(K - 1) + output_padding + 1

    ``x`` (N, C, W), ``w`` (C, Og, K), ``Cg = C / groups``; ``padding`` is ``p`` or
    ``(lo, hi)``. Precision as :func:`conv1d`. Raises ValueError for non-3-D operands or
    mismatched channels.
    """
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError(f"conv1d_transpose: data and weight must be 3-D (NCW / IOW), got "
                         f"{fmt_shape(x.shape)} and {fmt_shape(w.shape)}")
    (s,) = _int_list(strides, 1, "strides", "conv1d_transpose")
    (d,) = _int_list(dilation, 1, "dilation", "conv1d_transpose")
    (opad,) = _int_list(output_padding, 1, "output_padding", "conv1d_transpose")
    lo, hi = _int_list(padding, 2, "padding", "conv1d_transpose")
    g = int(groups)
    if builtins.min(s, d, g) < 1 or builtins.min(lo, hi, opad) < 0:
        raise ValueError(f"conv1d_transpose: invalid strides={strides} dilation={dilation} "
                         f"groups={groups} padding={padding} output_padding={output_padding}")
    n, c, width = x.shape
    _, og, k = w.shape
    cg, out_c = _transpose_channels(x, w, g, "conv1d_transpose")
    out_w = E.simplify((width - 1) * s + (k - 1) * d + (opad + 1 - lo - hi))
    in_dtype = promote_dtype(x.dtype, w.dtype)
    odt = output_dtype(in_dtype, out_dtype)
    acc = accumulator_dtype(in_dtype, odt)

    def fbody(nn, oc, t):
        rc = _te.reduce_axis((0, cg), name="rc")
        rk = _te.reduce_axis((0, k), name="rk")
        num = E.simplify(t + lo - (rk.var * d if d != 1 else rk.var))
        if s == 1:
            q = num
            conds = [E.GE(num, E.IntImm(0, "int64")), E.LT(num, width)]
        else:
            q = num // s
            conds = [E.GE(num, E.IntImm(0, "int64")),
                     E.EQ(num % s, E.IntImm(0, "int64")), E.LT(q, width)]
        chan = rc.var if g == 1 else (oc // og) * cg + rc.var
        oc_l = oc if g == 1 else oc % og
        v = cast_value(x[nn, chan, q], acc) * cast_value(w[chan, oc_l, rk.var], acc)
        return _te.sum(tir.if_then_else(tir.all(*conds), v, E.const(0, acc)), axis=[rc, rk])

    return two_stage_compute((n, out_c, out_w), fbody, acc, odt, "conv1d_transpose_ncw")


def conv2d_transpose(x: Tensor, w: Tensor, strides=1, padding=0, output_padding=0, dilation=1,
                     groups: int = 1, out_dtype: str | None = None) -> Tensor:
    """2-D transposed convolution, NCHW data and IOHW weight (``torch.nn.ConvTranspose2d``,
    https://pytorch.org/docs/stable/generated/torch.nn.ConvTranspose2d.html): :func:`conv1d_transpose`'s
    gather over the input per spatial dim::

        out[n, g*Og + o, y, x] = sum_{c, ky, kx} x[n, g*Cg + c, qy, qx] * w[g*Cg + c, o, ky, kx]
            where y + top - ky*dH = qy*sH, x + left - kx*dW = qx*sW, 0 <= qy < H, 0 <= qx < W
        oH = (H - 1)*sH - top - bottom + dH*(kH - 1) + output_padding_h + 1      (likewise oW)

    ``padding``: an int, ``(pH, pW)`` or ``(top, left, bottom, right)``; ``strides`` / ``dilation`` /
    ``output_padding``: an int or ``(h, w)``. Precision as :func:`conv2d`. Raises ValueError for non-4-D
    operands, mismatched channels or invalid attributes."""
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d_transpose: data and weight must be 4-D (NCHW / IOHW), got "
                         f"{fmt_shape(x.shape)} and {fmt_shape(w.shape)}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = _conv2d_params(strides, padding, dilation, "conv2d_transpose")
    oph, opw = _int_list(output_padding, 2, "output_padding", "conv2d_transpose")
    g = int(groups)
    if g < 1 or builtins.min(oph, opw) < 0:
        raise ValueError(f"conv2d_transpose: invalid groups={groups} output_padding={output_padding}")
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg, out_c = _transpose_channels(x, w, g, "conv2d_transpose")
    oh = E.simplify((h - 1) * sh + (kh - 1) * dh + (oph + 1 - pt - pb))
    ow = E.simplify((wd - 1) * sw + (kw - 1) * dw + (opw + 1 - pl - pr))
    in_dtype = promote_dtype(x.dtype, w.dtype)
    odt = output_dtype(in_dtype, out_dtype)
    acc = accumulator_dtype(in_dtype, odt)

    def source(t, lo, r, d, s, size):
        num = E.simplify(t + lo - (r * d if d != 1 else r))
        if s == 1:
            return num, [E.GE(num, E.IntImm(0, "int64")), E.LT(num, size)]
        q = num // s
        return q, [E.GE(num, E.IntImm(0, "int64")), E.EQ(num % s, E.IntImm(0, "int64")), E.LT(q, size)]

    def fbody(nn, oc, yy, xx):
        rc = _te.reduce_axis((0, cg), name="rc")
        ry = _te.reduce_axis((0, kh), name="ry")
        rx = _te.reduce_axis((0, kw), name="rx")
        qy, cy = source(yy, pt, ry.var, dh, sh, h)
        qx, cx = source(xx, pl, rx.var, dw, sw, wd)
        chan = rc.var if g == 1 else (oc // og) * cg + rc.var
        oc_l = oc if g == 1 else oc % og
        v = cast_value(x[nn, chan, qy, qx], acc) * cast_value(w[chan, oc_l, ry.var, rx.var], acc)
        return _te.sum(tir.if_then_else(tir.all(*(cy + cx)), v, E.const(0, acc)), axis=[rc, ry, rx])

    return two_stage_compute((n, out_c, oh, ow), fbody, acc, odt, "conv2d_transpose_nchw")


def conv1d_im2col(x: Tensor, kernel_size: int, strides=1, padding=0, dilation=1,
                  layout: str = "NCW") -> Tensor:
    """The columns (im2col) of a 1-D convolution with groups 1, so that the convolution is one
    GEMM (the lowering of Chellapilla et al., "High Performance Convolutional Neural Networks for
    Document Processing", 2006; what PyTorch's CPU slow path and onnxruntime do)::

        col[n, t, c, k] = x_pad[n, c, t*stride + k*dilation]      (zero in the padding)
        conv1d(x, w)[n, o, t] = sum_{c, k} col[n, t, c, k] * w[o, c, k]

    so ``reshape(col, (N, W_out, C*K)) @ reshape(w, (O, C*K)).T`` is the convolution in NWC
    layout, with the weight used as stored (OIW, no copy). ``x`` is ``(N, C, W)`` (``layout``
    ``"NCW"``) or ``(N, W, C)`` (``"NWC"``, read as its transpose: the output of a previous
    GEMM-lowered convolution needs no transpose); any dtype, copied unchanged. The schedule fuses
    the batch and row loops into one parallel loop (:func:`builder.codegen.schedule.mark_parallel`),
    so the copy runs in parallel for batch 1 too. ``W_out`` and the attributes are as
    :func:`conv1d`'s (padding ``p``, ``(p,)`` or ``(lo, hi)``).

    Returns a ``(N, W_out, C, K)`` tensor. Raises ValueError for a non-3-D ``x``, a bad layout,
    ``kernel_size`` below 1, invalid attributes, or a dilated kernel longer than the padded
    input (checked when the code runs for a symbolic length).
    """
    if x.ndim != 3:
        raise ValueError(f"conv1d_im2col: data must be 3-D, got {fmt_shape(x.shape)}")
    if layout not in ("NCW", "NWC"):
        raise ValueError(f"conv1d_im2col: layout must be NCW or NWC, got {layout!r}")
    k = int(kernel_size)
    if k < 1:
        raise ValueError(f"conv1d_im2col: kernel_size must be at least 1, got {kernel_size}")
    s, lo, hi, d = _conv1d_params(strides, padding, dilation, "conv1d_im2col")
    if layout == "NCW":
        n, c, width = x.shape
    else:
        n, width, c = x.shape
    out_w = conv_out_dim(width, k, s, lo, hi, d)
    checks = _span_checks(width, k, lo, hi, d, "conv1d_im2col")

    def fbody(nn, t, cc, kk):
        pos = E.simplify(t * s + kk * d - lo)
        v = x[nn, cc, pos] if layout == "NCW" else x[nn, pos, cc]
        conds = _in_bounds(pos, width, lo > 0, hi > 0)
        return tir.if_then_else(tir.all(*conds), v, E.const(0, x.dtype)) if conds else v

    return _te.compute((n, out_w, c, E.IntImm(k, "int64")), fbody, name="conv1d_im2col", attrs=checks)


def conv2d_im2col(x: Tensor, kernel_size, strides=1, padding=0, dilation=1, layout: str = "NCHW",
                  col_order: str = "CHW") -> Tensor:
    """The columns (im2col) of a 2-D convolution with groups 1 (as :func:`conv1d_im2col`, per spatial
    dim; Chellapilla et al. 2006)::

        col[n, y, x, c, ky, kx] = x_pad[n, c, y*sH + ky*dH, x*sW + kx*dW]      (zero in the padding)
        conv2d(x, w)[n, o, y, x] = sum_{c, ky, kx} col[n, y, x, c, ky, kx] * w[o, c, ky, kx]

    so ``reshape(col, (N, oH*oW, C*kH*kW)) @ reshape(w, (O, C*kH*kW)).T`` is the convolution in NHWC
    layout with the weight as stored (OIHW). ``x`` is ``(N, C, H, W)`` (``layout`` ``"NCHW"``) or
    ``(N, H, W, C)`` (``"NHWC"``, the output of a previous GEMM-lowered convolution, read without a
    transpose); any dtype, copied unchanged. ``kernel_size`` / ``strides`` / ``dilation``: an int or
    ``(h, w)``; ``padding``: an int, ``(pH, pW)`` or ``(top, left, bottom, right)``. Output dims as
    :func:`conv2d`'s. ``col_order="HWC"`` puts the channels innermost, ``(N, oH, oW, kH, kW, C)``: from
    NHWC data each tap is one contiguous run of C values (a vector copy; the weight must then be
    ``(O, kH, kW, C)``).

    Returns a ``(N, oH, oW, C, kH, kW)`` tensor (``"HWC"``: ``(N, oH, oW, kH, kW, C)``). Raises
    ValueError for a non-4-D ``x``, a bad layout or column order,
    invalid attributes, or a dilated kernel larger than the padded input (checked when the code runs
    for symbolic sizes).
    """
    if x.ndim != 4:
        raise ValueError(f"conv2d_im2col: data must be 4-D, got {fmt_shape(x.shape)}")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"conv2d_im2col: layout must be NCHW or NHWC, got {layout!r}")
    if col_order not in ("CHW", "HWC"):
        raise ValueError(f"conv2d_im2col: col_order must be CHW or HWC, got {col_order!r}")
    kh, kw = _int_list(kernel_size, 2, "kernel_size", "conv2d_im2col")
    if builtins.min(kh, kw) < 1:
        raise ValueError(f"conv2d_im2col: invalid kernel_size={kernel_size}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = _conv2d_params(strides, padding, dilation, "conv2d_im2col")
    if layout == "NCHW":
        n, c, h, wd = x.shape
    else:
        n, h, wd, c = x.shape
    oh, ow = conv_out_dim(h, kh, sh, pt, pb, dh), conv_out_dim(wd, kw, sw, pl, pr, dw)
    checks: dict = {}
    for size, k, lo, hi, d in ((h, kh, pt, pb, dh), (wd, kw, pl, pr, dw)):
        got = _span_checks(size, k, lo, hi, d, "conv2d_im2col")
        if got:
            checks.setdefault("mb.assert_le", []).extend(got["mb.assert_le"])

    def tap(nn, yy, xx, cc, ky, kx):
        py = E.simplify(yy * sh + ky * dh - pt)
        px = E.simplify(xx * sw + kx * dw - pl)
        v = x[nn, cc, py, px] if layout == "NCHW" else x[nn, py, px, cc]
        conds = _in_bounds(py, h, pt > 0, pb > 0) + _in_bounds(px, wd, pl > 0, pr > 0)
        return tir.if_then_else(tir.all(*conds), v, E.const(0, x.dtype)) if conds else v

    kh_, kw_ = E.IntImm(kh, "int64"), E.IntImm(kw, "int64")
    if col_order == "HWC":
        return _te.compute((n, oh, ow, kh_, kw_, c), lambda nn, yy, xx, ky, kx, cc: tap(nn, yy, xx, cc, ky, kx),
                           name="conv2d_im2col", attrs=checks or None)
    return _te.compute((n, oh, ow, c, kh_, kw_), tap, name="conv2d_im2col", attrs=checks or None)


def depthwise_conv2d_nhwc(x: Tensor, w: Tensor, kernel_size, strides=1, padding=0, dilation=1,
                          out_dtype: str | None = None) -> Tensor:
    """Depthwise 2-D convolution (``groups = channels``, one filter per channel; MobileNet's) on
    channels-last data::

        out[n, y, x, c] = sum_{ky, kx} x_pad[n, y*sH + ky*dH, x*sW + kx*dW, c] * w[ky * kW + kx, c]

    ``x`` (N, H, W, C), ``w`` (kH * kW, C) (the OIHW weight (C, 1, kH, kW) reshaped and transposed, so
    that both read C contiguous values per tap: the loop over channels is innermost and vectorizes).
    Zero padding is read inline; 16-bit floats accumulate in float32. Attributes as :func:`conv2d`'s.
    Returns (N, oH, oW, C). Raises ValueError for operands of the wrong rank, a weight that does not
    fit, or invalid attributes."""
    if x.ndim != 4 or w.ndim != 2:
        raise ValueError(f"depthwise_conv2d_nhwc: data must be 4-D (NHWC) and weight 2-D (taps, C), got "
                         f"{fmt_shape(x.shape)} and {fmt_shape(w.shape)}")
    kh, kw = _int_list(kernel_size, 2, "kernel_size", "depthwise_conv2d_nhwc")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = _conv2d_params(strides, padding, dilation, "depthwise_conv2d_nhwc")
    n, h, wd, c = x.shape
    if static_int(w.shape[0]) not in (None, kh * kw) or static_int(c) != static_int(w.shape[1]):
        raise ValueError(f"depthwise_conv2d_nhwc: weight {fmt_shape(w.shape)} does not fit {kh} x {kw} taps of "
                         f"{fmt_shape(x.shape)}")
    oh, ow = conv_out_dim(h, kh, sh, pt, pb, dh), conv_out_dim(wd, kw, sw, pl, pr, dw)
    in_dtype = promote_dtype(x.dtype, w.dtype)
    odt = output_dtype(in_dtype, out_dtype)
    acc = accumulator_dtype(in_dtype, odt)

    def fbody(nn, yy, xx, cc):
        ry = _te.reduce_axis((0, kh), name="ry")
        rx = _te.reduce_axis((0, kw), name="rx")
        py = E.simplify((yy * sh if sh != 1 else yy) + (ry.var * dh if dh != 1 else ry.var) - pt)
        px = E.simplify((xx * sw if sw != 1 else xx) + (rx.var * dw if dw != 1 else rx.var) - pl)
        v = cast_value(x[nn, py, px, cc], acc)
        conds = _in_bounds(py, h, pt > 0, pb > 0) + _in_bounds(px, wd, pl > 0, pr > 0)
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.const(0, acc))
        return _te.sum(v * cast_value(w[ry.var * kw + rx.var, cc], acc), axis=[ry, rx])

    return two_stage_compute((n, oh, ow, c), fbody, acc, odt, "depthwise_conv2d_nhwc")


def conv2d_transpose_col2im(cols: Tensor, out_channels, kernel_size, out_size=None, strides=1, padding=0, dilation=1,
                            out_dtype: str | None = None, output_padding=(0, 0)) -> Tensor:
    """The overlap-add (col2im) that finishes a 2-D transposed convolution computed as a GEMM (groups 1;
    :func:`conv1d_transpose_col2im` per spatial dim): with ``cols[n, qy, qx, (o*kH + ky)*kW + kx] =
    sum_c x[n, c, qy, qx] * w[c, o, ky, kx]`` (``x_nhwc @ reshape(w, (C, O*kH*kW))``)::

        out[n, o, y, x] = sum_{ky, kx} cols[n, qy, qx, (o*kH + ky)*kW + kx]
            where y + top - ky*dH = qy*sH, x + left - kx*dW = qx*sW, inside the input

    which is :func:`conv2d_transpose` (``out_size`` = ``(oH, oW)``, output padding included; None: from the
    input size, ``(H - 1) * s - pads + d * (k - 1) + output_padding + 1`` per dim, so that a kernel whose
    input size is an expression of the graph's dims still binds its output's from its input). ``cols``
    float32 or the data's dtype; 16-bit floats sum in float32, converted to ``out_dtype`` (default ``cols``'
    dtype) at the end. Returns (N, O, oH, oW). Raises ValueError for a non-4-D ``cols``, a last dim that is
    not ``O * kH * kW`` or invalid attributes."""
    if cols.ndim != 4:
        raise ValueError(f"conv2d_transpose_col2im: cols must be 4-D (N, H, W, O*kH*kW), got {fmt_shape(cols.shape)}")
    kh, kw = _int_list(kernel_size, 2, "kernel_size", "conv2d_transpose_col2im")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = _conv2d_params(strides, padding, dilation, "conv2d_transpose_col2im")
    n, h, wd, ok = cols.shape
    o = E.convert(out_channels)
    sok, so = static_int(ok), static_int(o)
    if builtins.min(kh, kw) < 1 or (sok is not None and so is not None and sok != so * kh * kw):
        raise ValueError(f"conv2d_transpose_col2im: cols {fmt_shape(cols.shape)} do not hold {out_channels} "
                         f"channels x kernel {kernel_size}")
    odt = output_dtype(cols.dtype, out_dtype)
    acc = "float32" if cols.dtype in ("float16", "bfloat16", "float32") else cols.dtype
    if out_size is None:
        oph, opw = _int_list(output_padding, 2, "output_padding", "conv2d_transpose_col2im")
        out_size = (E.simplify((E.convert(h) - 1) * sh + (dh * (kh - 1) + oph + 1 - pt - pb)),
                    E.simplify((E.convert(wd) - 1) * sw + (dw * (kw - 1) + opw + 1 - pl - pr)))
    oh, ow = (E.convert(v) for v in out_size)

    def source(t, lo, k, d, s, size):
        num = E.simplify(t + (lo - k * d))
        if s == 1:
            return num, [E.GE(num, E.IntImm(0, "int64")), E.LT(num, size)]
        q = num // s
        return q, [E.GE(num, E.IntImm(0, "int64")), E.EQ(num % s, E.IntImm(0, "int64")), E.LT(q, size)]

    def fbody(nn, oc, yy, xx):
        total = None
        for ky in range(kh):      # kH x kW terms, unrolled: the taps that land on (y, x)
            qy, cy = source(yy, pt, ky, dh, sh, h)
            for kx in range(kw):
                qx, cx = source(xx, pl, kx, dw, sw, wd)
                v = tir.if_then_else(tir.all(*(cy + cx)), cast_value(cols[nn, qy, qx, (oc * kh + ky) * kw + kx], acc),
                                     E.const(0, acc))
                total = v if total is None else total + v
        return cast_value(total, odt)

    return _te.compute((n, o, oh, ow), fbody, name="conv2d_transpose_col2im")


def conv1d_transpose_col2im(cols: Tensor, out_channels, kernel_size: int, out_width=None, strides=1, padding=0,
                            dilation=1, out_dtype: str | None = None, output_padding: int = 0) -> Tensor:
    """The overlap-add (col2im) that finishes a 1-D transposed convolution computed as a GEMM
    (groups 1; the lowering of Caffe's ``Deconvolution`` layer and PyTorch's CPU
    ``slow_conv_transpose``): with ``cols[n, q, o*K + k] = sum_c x[n, c, q] * w[c, o, k]``
    (``x @ reshape(w, (C, O*K))``, shape ``(N, W, O*K)``)::

        out[n, o, t] = sum_k cols[n, q, o*K + k]   where t + lo - k*dilation = q*stride, 0 <= q < W

    which is :func:`conv1d_transpose` (``W_out = out_width``, output padding included, the
    attributes as there; None: ``(W - 1) * stride - pads + dilation * (K - 1) + output_padding + 1``, in
    terms of the input's width, which the kernel binds from its input). ``cols`` is float32 (the GEMM's
    accumulator precision) or the data's dtype; the sum runs in float32 for 16-bit floats and is
    converted to ``out_dtype`` (default ``cols``' dtype) at the end. The rows are one flattened ``N * O`` axis (parallel for batch 1).

    Returns ``(N * O, W_out)``: reshape it to ``(N, O, W_out)``. Raises ValueError for a
    non-3-D ``cols``, a last dim that is not ``O * K`` or invalid attributes.
    """
    if cols.ndim != 3:
        raise ValueError(f"conv1d_transpose_col2im: cols must be 3-D (N, W, O*K), got {fmt_shape(cols.shape)}")
    k = int(kernel_size)
    s, lo, hi, d = _conv1d_params(strides, padding, dilation, "conv1d_transpose_col2im")
    n, width, ok = cols.shape
    if out_width is None:
        out_width = E.simplify((E.convert(width) - 1) * s + (d * (k - 1) + int(output_padding) + 1 - lo - hi))
    o = E.convert(out_channels)
    sok, so = static_int(ok), static_int(o)
    if k < 1 or (sok is not None and so is not None and sok != so * k):
        raise ValueError(f"conv1d_transpose_col2im: cols {fmt_shape(cols.shape)} do not hold "
                         f"{out_channels} channels x kernel {kernel_size}")
    odt = output_dtype(cols.dtype, out_dtype)
    acc = "float32" if cols.dtype in ("float16", "bfloat16", "float32") else cols.dtype
    rows = E.simplify(E.convert(n) * o)

    def fbody(r, t):
        nn, oc = (r // o, r % o) if static_int(n) != 1 else (E.IntImm(0, "int64"), r)
        total = None
        for kk in range(k):   # K terms, unrolled: the taps that land on t
            num = E.simplify(t + (lo - kk * d))
            if s == 1:
                q, conds = num, [E.GE(num, E.IntImm(0, "int64")), E.LT(num, width)]
            else:
                q = num // s
                conds = [E.GE(num, E.IntImm(0, "int64")), E.EQ(num % s, E.IntImm(0, "int64")), E.LT(q, width)]
            v = tir.if_then_else(tir.all(*conds), cast_value(cols[nn, q, oc * k + kk], acc), E.const(0, acc))
            total = v if total is None else total + v
        return cast_value(total, odt)

    return _te.compute((rows, E.convert(out_width)), fbody, name="conv1d_transpose_col2im")
