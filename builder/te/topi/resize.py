"""``resize2d``: nearest / linear / cubic resizing of the two spatial dims (``torch.nn.functional.interpolate``).
"""
from __future__ import annotations


from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from ...ir.op.common import fmt_shape
from .. import tensor as _te
from ..tensor import Tensor
from .common import cast_value, output_dtype

__all__ = ["cubic_weights", "resize2d"]


def _round_index(v: PrimExpr, rounding: str) -> PrimExpr:
    if rounding == "round":
        return tir.round(v)
    if rounding == "floor":
        return tir.floor(v)
    if rounding == "ceil":
        return tir.ceil(v)
    if rounding == "round_prefer_ceil":
        return tir.floor(v + 0.5)
    if rounding == "round_prefer_floor":
        return tir.ceil(v - 0.5)
    raise ValueError(f"resize2d: unknown rounding_method {rounding!r}")


def cubic_weights(t: PrimExpr, alpha: float) -> list[PrimExpr]:
    """The four weights of the cubic convolution kernel (Keys, "Cubic convolution interpolation for
    digital image processing", IEEE TASSP 1981) for the taps at offsets -1, 0, 1, 2 from the floor of
    a source coordinate whose fraction is ``t`` (in [0, 1)); ``alpha`` is the kernel's ``a`` (PyTorch
    and ONNX use -0.75, TVM's default -0.5). ``W(d) = ((a + 2)|d| - (a + 3))|d|^2 + 1`` for ``|d| <= 1``,
    ``a|d|^3 - 5a|d|^2 + 8a|d| - 4a`` for ``1 < |d| < 2``; the four sum to 1."""
    a = alpha

    def near(d):   # |d| <= 1
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0

    def far(d):    # 1 < |d| < 2
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a

    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def resize2d(x: Tensor, size, layout: str = "NCHW", method: str = "linear",
             coordinate_transformation_mode: str = "half_pixel", rounding_method: str = "round",
             cubic_alpha: float = -0.75, cubic_exclude: int = 0, out_dtype: str | None = None) -> Tensor:
    """Resize the spatial dims (``size`` = (oH, oW)) of an NCHW / NHWC image (ONNX ``Resize``
    semantics, https://onnx.ai/onnx/operators/onnx__Resize.html). Per axis, with
    ``r = in / out``, the source coordinate of output index ``i`` is

    * ``asymmetric``: ``i * r``;  ``half_pixel``: ``(i + 0.5) * r - 0.5``;
    * ``align_corners``: ``i * (in - 1) / (out - 1)`` (0 when ``out == 1``);
    * ``pytorch_half_pixel``: ``half_pixel``, but 0 when ``out == 1`` (what ``torch.onnx`` writes for
      PyTorch's linear modes).

    ``nearest_neighbor`` reads the pixel at the rounded coordinate (``rounding_method``; the
    asymmetric / floor case is the exact integer ``(i * in) // out``, PyTorch's nearest).
    ``linear`` interpolates the 2 x 2 neighbours of the coordinate (clamped to >= 0 for
    half_pixel, as PyTorch) with indices clamped to the image. ``cubic`` weighs the 4 x 4 neighbours
    (offsets -1 .. 2 from the floor of the unclamped coordinate) with :func:`cubic_weights` of
    ``cubic_alpha``, reading clamped indices (edge replication: PyTorch's bicubic, ONNX's reference);
    with ``cubic_exclude`` the taps outside the image get weight 0 and the rest are renormalized (ONNX
    ``exclude_outside``). Coordinates and weights are
    float32 (float64 for float64 data); the result is converted to ``out_dtype`` (default: the
    input dtype). Raises ValueError for other layouts, methods or modes.
    """
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"resize2d: layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if method not in ("nearest_neighbor", "linear", "cubic"):
        raise ValueError(f"resize2d: method {method!r} is not supported (nearest_neighbor, linear, cubic)")
    mode = coordinate_transformation_mode
    if mode not in ("asymmetric", "half_pixel", "align_corners", "pytorch_half_pixel"):
        raise ValueError(f"resize2d: coordinate_transformation_mode {mode!r} is not supported "
                         "(asymmetric, half_pixel, align_corners, pytorch_half_pixel)")
    if x.ndim != 4:
        raise ValueError(f"resize2d: data must be 4-D, got {fmt_shape(x.shape)}")
    oh, ow = [E.convert(s).astype("int64") for s in size]
    ha, wa = (2, 3) if layout == "NCHW" else (1, 2)
    in_h, in_w = x.shape[ha], x.shape[wa]
    shape = list(x.shape)
    shape[ha], shape[wa] = oh, ow
    cd = "float64" if x.dtype == "float64" else "float32"
    odt = output_dtype(x.dtype, out_dtype)
    zero = E.IntImm(0, "int64")

    def fl(v) -> PrimExpr:
        return E.convert(v).astype(cd)

    def src(i, n_in, n_out) -> PrimExpr:
        if mode == "align_corners":
            ratio = (fl(n_in) - 1.0) / tir.maximum(fl(n_out) - 1.0, E.const(1.0, cd))
            return fl(i) * ratio
        ratio = fl(n_in) / fl(n_out)
        if mode == "asymmetric":
            return fl(i) * ratio
        half = (fl(i) + 0.5) * ratio - 0.5
        if mode == "pytorch_half_pixel":
            return E.Select(E.GT(E.convert(n_out), E.IntImm(1, "int64")), half, E.const(0.0, cd))
        return half

    def clamp(i, n_in) -> PrimExpr:
        return tir.minimum(tir.maximum(i, zero), n_in - 1)

    def load(idx, yi, xi):
        full = list(idx)
        full[ha], full[wa] = yi, xi
        return cast_value(x[tuple(full)], cd)

    if method == "nearest_neighbor":
        def nearest(i, n_in, n_out):
            if mode == "asymmetric" and rounding_method == "floor":
                return (i * n_in) // n_out
            return clamp(_round_index(src(i, n_in, n_out), rounding_method).astype("int64"), n_in)

        def f(*idx):
            return cast_value(load(idx, nearest(idx[ha], in_h, oh), nearest(idx[wa], in_w, ow)), odt)
    elif method == "cubic":
        def taps(i, n_in, n_out):
            c = src(i, n_in, n_out)
            c0 = tir.floor(c)
            i0 = c0.astype("int64")
            ws = cubic_weights(c - c0, float(cubic_alpha))
            idx = [i0 + (k - 1) for k in range(4)]
            if cubic_exclude:
                inside = [E.And(E.GE(j, zero), E.LT(j, n_in)) for j in idx]
                ws = [E.Select(ok, w, E.const(0.0, cd)) for ok, w in zip(inside, ws)]
                total = ws[0] + ws[1] + ws[2] + ws[3]
                ws = [w / total for w in ws]
            return [clamp(j, n_in) for j in idx], ws

        def f(*idx):
            ys, wy = taps(idx[ha], in_h, oh)
            xs, wx = taps(idx[wa], in_w, ow)
            acc = None
            for yi, w_y in zip(ys, wy):
                row = None
                for xi, w_x in zip(xs, wx):
                    term = load(idx, yi, xi) * w_x
                    row = term if row is None else row + term
                acc = row * w_y if acc is None else acc + row * w_y
            return cast_value(acc, odt)
    else:
        def coord(i, n_in, n_out):
            c = src(i, n_in, n_out)
            if mode in ("half_pixel", "pytorch_half_pixel"):
                c = tir.maximum(c, E.const(0.0, cd))
            c0 = tir.floor(c)
            i0 = c0.astype("int64")
            return clamp(i0, n_in), clamp(i0 + 1, n_in), c - c0

        def f(*idx):
            y0, y1, ly = coord(idx[ha], in_h, oh)
            x0, x1, lx = coord(idx[wa], in_w, ow)
            top = load(idx, y0, x0) * (1.0 - lx) + load(idx, y0, x1) * lx
            bottom = load(idx, y1, x0) * (1.0 - lx) + load(idx, y1, x1) * lx
            return cast_value(top * (1.0 - ly) + bottom * ly, odt)

    return _te.compute(shape, f, name="resize")
