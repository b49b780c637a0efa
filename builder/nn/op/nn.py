"""Neural-network ops: normalizations, softmax, convolutions, pooling, interpolation, attention, timestep
embeddings."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.block_builder import BlockBuilder
from ...ir.op import resolve_reshape
from ...ir.op.common import fmt_shape, norm_axis
from ..core import Tensor, get_default_dtype, wrap_nested
from .creation import zeros
from .linear_algebra import matmul
from .manipulation import permute_dims
from .common import int_list, op_call, pair, recipe_function


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5, name: str = "layer_norm") -> Tensor:
    """Layer normalization over the last ``len(normalized_shape)`` dims (Ba et al. 2016):
    ``(x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance, as PyTorch.
    Missing ``weight`` / ``bias`` default to ones / zeros constants.
    """
    if isinstance(normalized_shape, int):
        normalized_shape = [normalized_shape]
    axes = list(range(-len(normalized_shape), 0))
    w = weight._expr if weight is not None else rx.Constant(np.ones(normalized_shape), x.dtype)
    b = bias._expr if bias is not None else rx.Constant(np.zeros(normalized_shape), x.dtype)
    return wrap_nested(op_call("nn.layer_norm", [x._expr, w, b], axes=axes, epsilon=float(eps),
                             center=True, scale=True), name)


def rms_norm(x: Tensor, weight: Tensor, axes: int | Sequence[int], epsilon: float = 1e-5,
             name: str = "rms_norm") -> Tensor:
    """RMS normalization (Zhang & Sennrich 2019): ``x / sqrt(mean(x**2, axes) + epsilon) * weight``."""
    if isinstance(axes, int):
        axes = [axes]
    return wrap_nested(op_call("nn.rms_norm", [x._expr, weight._expr], axes=list(axes),
                             epsilon=float(epsilon)), name)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None, bias: Tensor | None,
               eps: float = 1e-5, channel_axis: int = 1, axes: Sequence[int] | None = None,
               name: str = "group_norm") -> Tensor:
    """Group normalization (Wu & He 2018; ``torch.nn.GroupNorm``)::

        y = (x - mean) / sqrt(var + eps) * weight[c] + bias[c]

    with mean and biased variance over the channels of each of ``num_groups`` groups (along
    ``channel_axis``) and over ``axes`` (default: every dim after the first two). ``weight`` /
    ``bias`` have shape (C,); None means ones / zeros constants. Raises ValueError when C is not
    divisible by ``num_groups`` or ``channel_axis`` is out of range, TypeError for a non-int axis.
    """
    if axes is None:
        axes = list(range(2, x.ndim))
    chans = [x.shape[norm_axis(channel_axis, x.ndim, "group_norm")]]
    w = weight._expr if weight is not None else rx.Constant(np.ones(chans), x.dtype)
    b = bias._expr if bias is not None else rx.Constant(np.zeros(chans), x.dtype)
    return wrap_nested(op_call("nn.group_norm", [x._expr, w, b], num_groups=int(num_groups),
                             channel_axis=int(channel_axis), axes=[int(a) for a in axes],
                             epsilon=float(eps), center=True, scale=True), name)


def softmax(x: Tensor, axis: int = -1, name: str = "softmax") -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (numerically stable)."""
    return wrap_nested(op_call("nn.softmax", [x._expr], axis=axis), name)


def log_softmax(x: Tensor, axis: int = -1, name: str = "log_softmax") -> Tensor:
    """``log(softmax(x))`` along ``axis`` as ``x - logsumexp(x)`` (:func:`~builder.nn.op.logsumexp`,
    max-shifted: finite where the softmax itself underflows to 0, as PyTorch's and onnxruntime's
    kernels are). Float ``x`` -> same shape and dtype. Raises ValueError for an axis out of range."""
    from .reduction import logsumexp

    return wrap_nested(op_call("subtract", [x._expr, logsumexp(x, axis, keepdims=True)._expr]), name)


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1,
           name: str = "conv1d") -> Tensor:
    """1-D convolution, NCW data and OIW weight (PyTorch ``Conv1d`` semantics, cross-correlation).

    ``x`` (N, C, W), ``weight`` (O, C / groups, K) -> (N, O, (W + 2p - d(K-1) - 1) // s + 1);
    ``bias`` (O,) is added through a reshape to (1, O, 1), as TVM does.
    """
    strides = [stride] if isinstance(stride, int) else list(stride)
    dil = [dilation] if isinstance(dilation, int) else list(dilation)
    out: rx.Expr = op_call("nn.conv1d", [x._expr, weight._expr], strides=strides, padding=pair(padding),
                         dilation=dil, groups=groups, data_layout="NCW", kernel_layout="OIW",
                         out_layout="NCW", out_dtype="void")
    if bias is not None:
        shape = resolve_reshape(tuple(bias.shape), [1, -1, 1])
        out = op_call("add", [out, op_call("reshape", [bias._expr, rx.ShapeExpr(shape)])])
    return wrap_nested(out, name)


def conv1d_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                     output_padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                     groups: int = 1, name: str = "conv1d_transpose") -> Tensor:
    """1-D transposed convolution, NCW data and IOW weight (``torch.nn.ConvTranspose1d``,
    https://pytorch.org/docs/stable/generated/torch.nn.ConvTranspose1d.html)::

        out[n, g*Og + o, s*stride + k*dilation - pad_lo] += x[n, g*Cg + c, s] * w[g*Cg + c, o, k]

    ``x`` (N, C_in, W), ``weight`` (C_in, C_out / groups, K) -> (N, C_out, W_out) with
    ``W_out = (W - 1) * stride - pad_lo - pad_hi + dilation * (K - 1) + output_padding + 1``.
    ``padding`` is ``p`` or ``(lo, hi)``; ``bias`` (C_out,) is added through a reshape to
    (1, C_out, 1), as TVM does. Raises ValueError for mismatched channels, a non-divisible
    ``groups`` or ``output_padding`` not smaller than the stride or the dilation.
    """
    op = "conv1d_transpose"
    out: rx.Expr = op_call("nn.conv1d_transpose", [x._expr, weight._expr],
                         strides=int_list(stride, 1, "stride", op),
                         padding=int_list(padding, 2, "padding", op),
                         output_padding=int_list(output_padding, 1, "output_padding", op),
                         dilation=int_list(dilation, 1, "dilation", op), groups=int(groups),
                         data_layout="NCW", kernel_layout="IOW", out_layout="NCW", out_dtype="void")
    if bias is not None:
        shape = resolve_reshape(tuple(bias.shape), [1, -1, 1])
        out = op_call("add", [out, op_call("reshape", [bias._expr, rx.ShapeExpr(shape)])])
    return wrap_nested(out, name)


def conv2d_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                     output_padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                     groups: int = 1, name: str = "conv2d_transpose") -> Tensor:
    """2-D transposed convolution, NCHW data and IOHW weight (``torch.nn.ConvTranspose2d``,
    https://pytorch.org/docs/stable/generated/torch.nn.ConvTranspose2d.html)::

        oH = (H - 1) * sH - top - bottom + dH * (kH - 1) + output_padding_h + 1     (likewise oW)

    ``x`` (N, C, H, W), ``weight`` (C, O / groups, kH, kW) -> (N, O, oH, oW). ``padding``: an int,
    ``(pH, pW)`` or ``(top, left, bottom, right)``; ``stride`` / ``output_padding`` / ``dilation``: an
    int or ``(h, w)``. ``bias`` (O,) is added through a reshape to (1, O, 1, 1). Raises ValueError for
    mismatched channels, a non-divisible ``groups`` or an ``output_padding`` not smaller than the
    stride or the dilation.
    """
    op = "conv2d_transpose"
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    pads = pads * 2 if len(pads) == 2 else pads
    out: rx.Expr = op_call("nn.conv2d_transpose", [x._expr, weight._expr],
                           strides=int_list(stride, 2, "stride", op), padding=int_list(pads, 4, "padding", op),
                           output_padding=int_list(output_padding, 2, "output_padding", op),
                           dilation=int_list(dilation, 2, "dilation", op), groups=int(groups),
                           data_layout="NCHW", kernel_layout="IOHW", out_layout="NCHW", out_dtype="void")
    if bias is not None:
        shape = resolve_reshape(tuple(bias.shape), [1, -1, 1, 1])
        out = op_call("add", [out, op_call("reshape", [bias._expr, rx.ShapeExpr(shape)])])
    return wrap_nested(out, name)


def _conv2d_padding(padding, weight: Tensor, dilation: list[int], strides: list[int]) -> list[int]:
    """TVM's 4-value padding ``[top, left, bottom, right]`` from an int, ``(pH, pW)``, 4 ints, or
    PyTorch's ``"valid"`` / ``"same"`` (stride 1; the odd extra pad goes bottom / right)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0, 0, 0, 0]
        if padding != "same":
            raise ValueError(f"conv2d: padding string must be 'valid' or 'same', got {padding!r}")
        if strides != [1, 1]:
            raise ValueError(f"conv2d: padding='same' needs stride 1, got stride {strides}")
        pads = []
        for k, d in zip(weight.shape[2:], dilation):
            if not isinstance(k, int):
                raise ValueError("conv2d: padding='same' needs a static kernel size")
            pads.append(d * (k - 1))
        return [pads[0] // 2, pads[1] // 2, pads[0] - pads[0] // 2, pads[1] - pads[1] // 2]
    if isinstance(padding, (int, np.integer)):
        return [int(padding)] * 4
    vals = [int(p) for p in padding]
    if len(vals) == 1:
        return vals * 4
    if len(vals) == 2:
        return vals * 2
    if len(vals) == 4:
        return vals
    raise ValueError(f"conv2d: padding must be an int, 2 or 4 ints, 'valid' or 'same', got {padding!r}")


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1, name: str = "conv2d") -> Tensor:
    """2-D convolution, NCHW data and OIHW weight (``torch.nn.Conv2d`` semantics,
    https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html; a cross-correlation).

    ``x`` (N, C, H, W), ``weight`` (O, C / groups, kH, kW) -> (N, O, oH, oW) with
    ``oH = (H + top + bottom - dH * (kH - 1) - 1) // sH + 1`` (likewise oW). ``stride`` /
    ``dilation``: an int or ``(h, w)``; ``padding``: an int, ``(pH, pW)``, ``(top, left, bottom,
    right)``, ``"valid"`` or ``"same"``. ``bias`` (O,) is added through a reshape to
    (1, O, 1, 1), as TVM does. Raises ValueError for mismatched channels or groups.
    """
    strides = int_list(stride, 2, "stride", "conv2d")
    dil = int_list(dilation, 2, "dilation", "conv2d")
    out: rx.Expr = op_call("nn.conv2d", [x._expr, weight._expr], strides=strides,
                         padding=_conv2d_padding(padding, weight, dil, strides), dilation=dil,
                         groups=int(groups), data_layout="NCHW", kernel_layout="OIHW",
                         out_layout="NCHW", out_dtype="void")
    if bias is not None:
        shape = resolve_reshape(tuple(bias.shape), [1, -1, 1, 1])
        out = op_call("add", [out, op_call("reshape", [bias._expr, rx.ShapeExpr(shape)])])
    return wrap_nested(out, name)


def _pool_padding(padding, nsp: int, opname: str) -> list[int]:
    """TVM's pooling padding ``(lo..., hi...)`` from an int, one int per spatial dim (both sides,
    PyTorch) or ``2 * nsp`` ints (ONNX's ``pads`` order, the same)."""
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        return [int(padding)] * (2 * nsp)
    vals = list(padding)
    if len(vals) == 2 * nsp:
        return int_list(vals, 2 * nsp, "padding", opname)
    return int_list(vals, nsp, "padding", opname) * 2


def _pool(kind: str, nsp: int, x: Tensor, kernel_size, stride, padding, dilation, ceil_mode: bool,
          count_include_pad: bool, name: str) -> Tensor:
    opname = f"{kind}_pool{nsp}d"
    if x.ndim != nsp + 2:
        raise ValueError(f"{opname}: input must be {nsp + 2}-D (N, C, {'L' if nsp == 1 else 'H, W'}), got "
                         f"{fmt_shape(x.shape)}")
    ks = int_list(kernel_size, nsp, "kernel_size", opname)
    ss = ks if stride is None or (isinstance(stride, (list, tuple)) and not stride) \
        else int_list(stride, nsp, "stride", opname)
    attrs = {"pool_size": ks, "strides": ss, "padding": _pool_padding(padding, nsp, opname),
             "dilation": int_list(dilation, nsp, "dilation", opname), "ceil_mode": bool(ceil_mode),
             "count_include_pad": bool(count_include_pad), "layout": "NCW" if nsp == 1 else "NCHW",
             "out_layout": "NCW" if nsp == 1 else "NCHW"}
    return wrap_nested(op_call(f"nn.{opname}", [x._expr], **attrs), name)


def max_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               name: str = "max_pool1d") -> Tensor:
    """1-D max pooling of ``x`` (N, C, L) (``torch.nn.functional.max_pool1d``): the maximum of each
    window of ``kernel_size`` taps ``dilation`` apart, every ``stride`` (default ``kernel_size``)
    positions; ``padding`` positions on each side (or ``(lo, hi)``) are never the maximum.
    ``oL = floor_or_ceil((L + lo + hi - dilation * (kernel_size - 1) - 1) / stride) + 1``
    (:func:`builder.ir.op.pool_out_dim`). Raises ValueError for bad sizes or an empty output."""
    return _pool("max", 1, x, kernel_size, stride, padding, dilation, ceil_mode, True, name)


def max_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               name: str = "max_pool2d") -> Tensor:
    """2-D max pooling of ``x`` (N, C, H, W) (``torch.nn.functional.max_pool2d``): as
    :func:`max_pool1d` per spatial dim; sizes are an int or ``(h, w)``, ``padding`` an int,
    ``(pH, pW)`` or ``(top, left, bottom, right)``. Raises ValueError for bad sizes or an empty
    output."""
    return _pool("max", 2, x, kernel_size, stride, padding, dilation, ceil_mode, True, name)


def avg_pool1d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               name: str = "avg_pool1d") -> Tensor:
    """1-D average pooling of float ``x`` (N, C, L) (``torch.nn.functional.avg_pool1d``): each
    window's sum divided by its taps inside the padded input (``count_include_pad``, PyTorch's
    default) or inside the data (:func:`builder.te.topi.pool`). Output length as
    :func:`max_pool1d`. Raises ValueError / TypeError for bad sizes or a non-float dtype."""
    return _pool("avg", 1, x, kernel_size, stride, padding, 1, ceil_mode, count_include_pad, name)


def avg_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               name: str = "avg_pool2d") -> Tensor:
    """2-D average pooling of float ``x`` (N, C, H, W) (``torch.nn.functional.avg_pool2d``), as
    :func:`avg_pool1d` per spatial dim. Raises ValueError / TypeError for bad sizes or a non-float
    dtype."""
    return _pool("avg", 2, x, kernel_size, stride, padding, 1, ceil_mode, count_include_pad, name)


def _adaptive(nsp: int, x: Tensor, output_size, name: str) -> Tensor:
    opname = f"adaptive_avg_pool{nsp}d"
    if x.ndim != nsp + 2:
        raise ValueError(f"{opname}: input must be {nsp + 2}-D, got {fmt_shape(x.shape)}")
    sizes = list(output_size) if isinstance(output_size, (list, tuple)) else [output_size] * nsp
    if len(sizes) != nsp or not all(s is None or (isinstance(s, (int, np.integer)) and not isinstance(s, bool))
                                    for s in sizes):
        raise ValueError(f"{opname}: output_size must be an int or {nsp} ints (None keeps a dim), got "
                         f"{output_size!r}")
    layout = "NCW" if nsp == 1 else "NCHW"
    return wrap_nested(op_call(f"nn.{opname}", [x._expr], output_size=[None if s is None else int(s) for s in sizes],
                               layout=layout, out_layout=layout), name)


def adaptive_avg_pool1d(x: Tensor, output_size: int | Sequence[int], name: str = "adaptive_avg_pool1d") -> Tensor:
    """Adaptive average pooling of float ``x`` (N, C, L) to (N, C, output_size)
    (``torch.nn.functional.adaptive_avg_pool1d``; windows ``[floor(i*L/O), ceil((i+1)*L/O))``,
    :func:`builder.te.topi.adaptive_avg_pool`). Raises ValueError / TypeError for a bad size or a
    non-float dtype."""
    return _adaptive(1, x, output_size, name)


def adaptive_avg_pool2d(x: Tensor, output_size: int | Sequence[int | None],
                        name: str = "adaptive_avg_pool2d") -> Tensor:
    """Adaptive average pooling of float ``x`` (N, C, H, W) to (N, C, oH, oW)
    (``torch.nn.functional.adaptive_avg_pool2d``; ``output_size`` an int or ``(oH, oW)``, None
    keeps that dim). Raises ValueError / TypeError for a bad size or a non-float dtype."""
    return _adaptive(2, x, output_size, name)


def _scaled_dim(d, factor: float):
    """``floor(d * factor)`` for a static dim; ``d * factor`` for a symbolic dim and an
    integer factor. Raises ValueError otherwise."""
    if isinstance(d, int):
        return int(math.floor(d * factor))
    if float(factor).is_integer():
        return E.simplify(d * int(factor))
    raise ValueError(f"interpolate: cannot scale the symbolic dim {d} by the non-integer factor "
                     f"{factor}; give size= instead")


def interpolate(x: Tensor, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool | None = None, coordinate_transformation_mode: str | None = None,
                rounding_method: str | None = None, cubic_alpha: float = -0.75, cubic_exclude: bool = False,
                name: str = "interpolate") -> Tensor:
    """Resize the two spatial dims of an NCHW tensor (``torch.nn.functional.interpolate``),
    emitted as ``R.image.resize2d``.

    Exactly one of ``size`` (an int or ``(oH, oW)``) and ``scale_factor`` (output dim =
    ``floor(dim * factor)``; symbolic dims need integer factors) is given. Modes:

    * ``"nearest"``: ``src = floor(dst * in / out)`` (coordinate mode ``asymmetric``, rounding
      ``floor``: PyTorch's nearest; TVM emits rounding ``round`` here, which picks other pixels
      when upsampling);
    * ``"linear"`` / ``"bilinear"``: ``half_pixel`` coordinates (``align_corners=False``, the
      default) or ``align_corners``, with edge clamping, as PyTorch.

    * ``"bicubic"``: the same coordinates, the 4 x 4 neighbours weighed by the cubic convolution
      kernel with ``a = cubic_alpha`` (Keys 1981; -0.75 as PyTorch and ONNX ``Resize``), edge pixels
      repeated past the border; ``cubic_exclude``: taps outside the image weigh 0 and the others are
      renormalized (ONNX ``exclude_outside``).

    * ``"nearest-exact"``: ``src = floor((dst + 0.5) * in / out)`` (``half_pixel`` coordinates,
      rounding ``round_prefer_ceil``; PyTorch's and scikit-image's nearest).

    ``coordinate_transformation_mode`` / ``rounding_method`` override the mode's (ONNX ``Resize``'s
    names: ``asymmetric``, ``half_pixel``, ``pytorch_half_pixel``, ``align_corners``; ``round``,
    ``floor``, ``ceil``, ``round_prefer_floor``, ``round_prefer_ceil``). Coordinates use the in / out
    size ratio (as PyTorch with ``size=`` or an exact factor).
    Raises ValueError for other modes, both / neither of size and scale_factor, or
    ``align_corners`` with nearest; ValueError for ``recompute_scale_factor`` /
    ``antialias``.
    """
    if recompute_scale_factor is not None:
        raise ValueError("interpolate: recompute_scale_factor is not supported (as in TVM)")
    if antialias is not None:
        raise ValueError("interpolate: antialias is not supported (as in TVM)")
    if x.ndim != 4:
        raise ValueError(f"interpolate: input must be 4-D (N, C, H, W), got shape "
                         f"{tuple(str(d) for d in x.shape)}")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        out = [size, size] if isinstance(size, (int, E.PrimExpr)) else list(size)
        if len(out) != 2:
            raise ValueError(f"interpolate: size must be an int or 2 values, got {size!r}")
    else:
        factors = ([scale_factor] * 2 if isinstance(scale_factor, (int, float))
                   else list(scale_factor))
        if len(factors) != 2:
            raise ValueError(f"interpolate: scale_factor must be a number or 2 numbers, got "
                             f"{scale_factor!r}")
        out = [_scaled_dim(d, f) for d, f in zip(x.shape[2:], factors)]
    if mode in ("nearest", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("interpolate: align_corners can only be set with the linear modes")
        method, coord, rounding = ("nearest_neighbor", "asymmetric", "floor") if mode == "nearest" else (
            "nearest_neighbor", "half_pixel", "round_prefer_ceil")
    elif mode in ("linear", "bilinear", "bicubic"):
        method, rounding = "cubic" if mode == "bicubic" else "linear", "round"
        coord = "align_corners" if align_corners else "half_pixel"
    else:
        raise ValueError(f"interpolate: mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear' or "
                         f"'bicubic', got "
                         f"{mode!r}")
    coords = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners")
    roundings = ("round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")
    if coordinate_transformation_mode is not None:
        if coordinate_transformation_mode not in coords:
            raise ValueError(f"interpolate: coordinate_transformation_mode must be one of {coords}, got "
                             f"{coordinate_transformation_mode!r}")
        coord = coordinate_transformation_mode
    if rounding_method is not None:
        if rounding_method not in roundings:
            raise ValueError(f"interpolate: rounding_method must be one of {roundings}, got {rounding_method!r}")
        rounding = rounding_method
    roi = [E.FloatImm(0.0, "float32")] * 4
    return wrap_nested(op_call("image.resize2d", [x._expr, rx.ShapeExpr(out)], roi=roi,
                             layout="NCHW", method=method, coordinate_transformation_mode=coord,
                             rounding_method=rounding,
                             cubic_alpha=float(cubic_alpha) if method == "cubic" else -0.5,   # (TVM's default)
                             cubic_exclude=int(bool(cubic_exclude)) if method == "cubic" else 0,
                             extrapolation_value=0.0, out_dtype="void"), name)


_CAUSAL_MASKS = ("TopLeft", "BottomRight")


def _attention_bias(attn_mask: Tensor, query: Tensor) -> rx.Expr:
    """``attn_mask`` as TVM's additive 4-D bias: a bool mask (True = attend) becomes 0 / -inf in
    query's dtype, a float mask of query's dtype is used as it is; 1- to 3-D masks get leading 1s
    (numpy / PyTorch broadcasting)."""
    op = "scaled_dot_product_attention"
    if attn_mask.ndim > 4 or attn_mask.ndim == 0:
        raise ValueError(f"{op}: attn_mask must have 1 to 4 dims broadcastable to (batch, num_heads, "
                         f"seq_q, seq_kv), got shape {tuple(str(d) for d in attn_mask.shape)}")
    if attn_mask.dtype == "bool":
        dt = query.dtype
        bias: rx.Expr = op_call("where", [attn_mask._expr, rx.Constant(np.asarray(0.0), dt),
                                          rx.Constant(np.asarray(-np.inf), dt)])
    elif attn_mask.dtype == query.dtype:
        bias = attn_mask._expr
    else:
        raise TypeError(f"{op}: attn_mask must be bool or have query's dtype {query.dtype}, got "
                        f"{attn_mask.dtype}")
    if attn_mask.ndim < 4:
        bias = op_call("expand_dims", [bias], axis=list(range(4 - attn_mask.ndim)))
    return bias


def attention_var_len(query: Tensor, key: Tensor, value: Tensor, seqstart: Tensor, scale: float | None = None,
                      causal_mask: str | None = None, name: str = "attention_var_len") -> Tensor:
    """Attention within each of several sequences packed one after another (FlashAttention-2's varlen
    attention, Dao 2023, ``cu_seqlens``; TVM's ``R.nn.attention_var_len``)::

        out[t, h, :] = sum_j softmax_j(scale * q[t, h, :] . k[j, h', :]) v[j, h', :]
                       over the tokens j of t's sequence (causal: j <= t)

    ``query`` (T, H, D), ``key`` (T, H_kv, D), ``value`` (T, H_kv, D_v) -> (T, H, D_v); ``seqstart``
    (B + 1,) int32 / int64: sequence ``b`` is the rows ``seqstart[b]`` to ``seqstart[b + 1] - 1``
    (``seqstart[0] = 0``, non-decreasing, ``seqstart[B] = T``; other values are an error when the kernel
    runs). ``scale`` defaults to ``1 / sqrt(D)``; ``causal_mask`` None or ``"TopLeft"``. A padded batch
    packed by :func:`unpad_input` costs the attention of its real tokens only. Raises ValueError /
    TypeError for shapes, dtypes or a mask that do not fit."""
    if causal_mask not in (None, "TopLeft"):
        raise ValueError(f"attention_var_len: causal_mask must be None or 'TopLeft', got {causal_mask!r}")
    return wrap_nested(op_call("nn.attention_var_len", [query._expr, key._expr, value._expr, seqstart._expr],
                               scale=None if scale is None else float(scale), causal_mask=causal_mask), name)


def paged_attention(query: Tensor, k_pool: Tensor, v_pool: Tensor, block_table: Tensor, lengths: Tensor,
                    attn_mask: Tensor | None = None, scale: float | None = None, causal_mask: str | None = None,
                    window_size: int | None = None, logit_softcap: float | None = None,
                    name: str = "paged_attention") -> Tensor:
    """Attention of a call's new queries over the keys a paged KV cache holds, read from its blocks in place
    (vLLM's PagedAttention, Kwon et al. 2023; TVM's ``PagedKVCache``), emitted as
    ``R.nn.paged_attention(q, k_pool, v_pool, block_table, lengths[, bias])``::

        p = lengths[b] - S_q + i                            (query i's position)
        key j of row b = k_pool[block_table[b, j // BS], j % BS],   0 <= j < lengths[b]
        out[b, i, h, :] = sum_j softmax_j(scale * q[b, i, h, :] . key j [+ mask]) value j   over j <= p (causal)

    ``query`` (B, S_q, H, D); ``k_pool`` / ``v_pool`` (num_blocks, BS, H_kv, D / D_v), one layer's blocks,
    and ``block_table`` (B, max_blocks), ``lengths`` (B,) int32 / int64, all as
    :func:`kv_cache_append` hands them over (the new tokens' keys already in the blocks) -> (B, S_q, H,
    D_v). ``causal_mask`` None (every key of the row) or ``"BottomRight"``; ``window_size``,
    ``logit_softcap`` and ``scale`` as in :func:`scaled_dot_product_attention`; ``attn_mask`` (bool: True
    attends, or query's float dtype, added) broadcastable to (B, H, S_q, S_kv), column ``j`` the key at
    position ``j`` (S_kv the most keys a row holds, ``total_seq_len``, or 1). A length outside ``[S_q,
    max_blocks * BS]`` (or above the mask's S_kv) and a block id outside the pool are errors when the code
    runs, never reads out of bounds. Raises ValueError / TypeError for shapes, dtypes, a mask, window or cap
    that do not fit."""
    if causal_mask not in (None, "BottomRight"):
        raise ValueError(f"paged_attention: causal_mask must be None or 'BottomRight', got {causal_mask!r}")
    args = [query._expr, k_pool._expr, v_pool._expr, block_table._expr, lengths._expr]
    if attn_mask is not None:
        args.append(_attention_bias(attn_mask, query))
    sc = None if scale is None else E.FloatImm(float(scale), "float32")
    extra = {} if logit_softcap is None else {"logit_softcap": float(logit_softcap)}
    return wrap_nested(op_call("nn.paged_attention", args, scale=sc, causal_mask=causal_mask,
                               window_size=window_size, **extra), name)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, is_causal: bool | None = False,
                                 scale: float | None = None,
                                 name: str = "scaled_dot_product_attention", *,
                                 causal_mask: str | None = None, window_size: int | None = None,
                                 logit_softcap: float | None = None) -> Tensor:
    """Scaled dot-product attention (Vaswani et al. 2017) in TVM's layout, emitted as
    ``R.nn.attention(q, k, v[, bias])``::

        s[b, h, i, j] = scale * q[b, i, h, :] . k[b, j, h', :] + mask[b, h, i, j]
        out[b, i, h, :] = sum_j softmax_j(s[b, h, i, j]) v[b, j, h', :]

    ``query`` (B, S_q, H, D), ``key`` (B, S_kv, H_kv, D), ``value`` (B, S_kv, H_kv, D_v) ->
    (B, S_q, H, D_v); ``h' = h // (H / H_kv)`` (grouped-query attention when H_kv < H).
    ``scale`` defaults to ``1 / sqrt(D)``.

    ``attn_mask`` follows ``torch.nn.functional.scaled_dot_product_attention``: its shape
    broadcasts to (B, H, S_q, S_kv) (PyTorch's score layout, not the BSNH layout of q: a padding
    mask is (B, 1, 1, S_kv); 1- to 3-D masks get leading 1s); a bool mask keeps the keys where it
    is True (it becomes an additive 0 / -inf mask of query's dtype), a float mask of query's
    dtype is added to the scores. A query row whose keys are all masked gives zeros, as PyTorch
    >= 2.5 (``_safe_softmax`` in its math attention, pytorch/pytorch#131060; older PyTorch gave
    NaN); a float mask using a finite lowest value instead of -inf does not count as masking.

    ``is_causal`` masks keys ``j > i`` (PyTorch's ``is_causal``, TVM's
    ``causal_mask="TopLeft"``); ``causal_mask`` names TVM's alignment instead: ``"TopLeft"`` or
    ``"BottomRight"`` (key ``j`` is visible to query ``i`` when ``j <= i + S_kv - S_q``: new
    queries attending to a cache of past and new keys). Both mask kinds may be combined with
    ``attn_mask``. ``window_size`` ``W`` (with a causal mask) keeps only the ``W`` keys ending at the
    causal bound, the query's own included (HF's ``sliding_window``: ``i - W < j <= i`` top-left);
    ``logit_softcap`` ``c`` replaces the scaled scores by ``c * tanh(s / c)`` before the mask (Gemma 2's
    ``attn_logit_softcapping``). Raises ValueError for ``is_causal`` together with ``causal_mask``, an
    unknown ``causal_mask``, a window without a causal mask, a window or cap that is not positive, a
    mask that does not broadcast, and mismatched shapes; TypeError for a mask dtype other than bool or
    query's, and mismatched dtypes.
    """
    op = "scaled_dot_product_attention"
    if causal_mask is not None:
        if is_causal:
            raise ValueError(f"{op}: give either is_causal=True (top-left) or causal_mask, not both")
        if causal_mask not in _CAUSAL_MASKS:
            raise ValueError(f"{op}: causal_mask must be None, 'TopLeft' or 'BottomRight', got {causal_mask!r}")
    elif is_causal:
        causal_mask = "TopLeft"
    args = [query._expr, key._expr, value._expr]
    if attn_mask is not None:
        args.append(_attention_bias(attn_mask, query))
    sc = None if scale is None else E.FloatImm(float(scale), "float32")
    extra = {} if logit_softcap is None else {"logit_softcap": float(logit_softcap)}
    return wrap_nested(op_call("nn.attention", args, scale=sc, causal_mask=causal_mask, window_size=window_size,
                               **extra), name)


@recipe_function
def get_timestep_embedding(x: Tensor, embedding_dim: int, flip_sin_to_cos: bool = False,
                           downscale_freq_shift: float = 1, scale: float = 1,
                           max_period: int = 10000,
                           name: str = "get_timestep_embedding") -> Tensor:
    """Sinusoidal timestep embedding (Ho et al. 2020, DDPM; diffusers'
    ``get_timestep_embedding``): with ``half = embedding_dim // 2``::

        freq[j] = exp(-log(max_period) * j / (half - downscale_freq_shift)),   j < half
        emb[n]  = concat(sin(scale * x[n] * freq), cos(scale * x[n] * freq))

    (cos first when ``flip_sin_to_cos``), zero-padded by one column when ``embedding_dim`` is odd,
    computed in float32 and converted to the default dtype. ``x`` (N,) -> (N, embedding_dim).
    Emitted as TVM does (astype, expand_dims, arange, multiply, divide, exp, sin, cos, concat,
    nn.pad): it needs those manipulation ops registered. Raises ValueError for a non-1-D ``x``.
    """
    if x.ndim != 1:
        raise ValueError(f"get_timestep_embedding: x must be 1-D (N,), got shape "
                         f"{tuple(str(d) for d in x.shape)}")
    half = embedding_dim // 2
    f32 = "float32"
    t = op_call("astype", [x._expr], dtype=f32)
    ar = op_call("arange", [rx.PrimValue(0), rx.PrimValue(half), rx.PrimValue(1)], dtype=f32)
    exponent = op_call("multiply", [rx.const(-math.log(max_period), f32), ar])
    exponent = op_call("divide", [exponent, rx.const(half - downscale_freq_shift, f32)])
    freq = op_call("exp", [exponent])
    emb = op_call("multiply", [op_call("expand_dims", [t], axis=[1]),
                             op_call("expand_dims", [freq], axis=[0])])
    if scale != 1:
        emb = op_call("multiply", [rx.const(scale, f32), emb])
    emb = BlockBuilder.current().emit(emb)  # read twice (sin and cos): bind it once
    parts = [op_call("cos", [emb]), op_call("sin", [emb])]
    if not flip_sin_to_cos:
        parts.reverse()
    emb = op_call("concat", [rx.Tuple(parts)], axis=-1)
    if embedding_dim % 2 == 1:
        emb = op_call("nn.pad", [emb], pad_width=[0, 0, 0, 1], pad_mode="constant", pad_value=0.0)
    return wrap_nested(op_call("astype", [emb], dtype=get_default_dtype()), name)


def _check_float(x: Tensor, opname: str, what: str = "x") -> None:
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"{opname}: {what} must be a floating-point tensor, got {x.dtype}")


@recipe_function
def normalize(x: Tensor, p: float = 2.0, axis: int = -1, eps: float = 1e-12, name: str = "normalize") -> Tensor:
    """``x / max(||x||_p, eps)`` along ``axis`` (``torch.nn.functional.normalize``,
    https://pytorch.org/docs/stable/generated/torch.nn.functional.normalize.html), composed of
    ``abs`` / ``multiply`` / ``power``, ``sum`` (or ``max`` for ``p = inf``), ``sqrt``, ``maximum``
    and ``divide`` (so it fuses)::

        ||x||_p = (sum_axis |x|^p)^(1/p)          (p = 2: sqrt(sum x*x); p = 1: sum |x|; inf: max |x|)

    ``x`` any float tensor -> same shape and dtype (16-bit floats: the sum accumulates in float32,
    the rest is in ``x``'s dtype, as PyTorch). Raises TypeError for a non-float ``x`` or ``p``,
    ValueError for ``p <= 0`` or an axis out of range.
    """
    _check_float(x, "normalize")
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise TypeError(f"normalize: p must be a number, got {p!r}")
    if not p > 0:
        raise ValueError(f"normalize: p must be > 0, got {p}")
    ax = [int(axis)]
    dt = x.dtype
    xe = x._expr
    if p == 2:
        norm = op_call("sqrt", [op_call("sum", [op_call("multiply", [xe, xe])], axis=ax, keepdims=True)])
    elif p == 1:
        norm = op_call("sum", [op_call("abs", [xe])], axis=ax, keepdims=True)
    elif math.isinf(p):
        norm = op_call("max", [op_call("abs", [xe])], axis=ax, keepdims=True)
    else:
        powered = op_call("power", [op_call("abs", [xe]), rx.const(float(p), dt)])
        norm = op_call("power", [op_call("sum", [powered], axis=ax, keepdims=True), rx.const(1.0 / p, dt)])
    denom = op_call("maximum", [norm, rx.const(float(eps), dt)])
    return wrap_nested(op_call("divide", [xe, denom]), name)


def _scalar(x: Tensor, v: float) -> rx.Expr:
    return rx.const(float(v), x.dtype)


def _clip(x: Tensor, lo: float | None, hi: float | None) -> rx.Expr:
    e = x._expr
    if lo is not None:
        e = op_call("maximum", [e, _scalar(x, lo)])
    if hi is not None:
        e = op_call("minimum", [e, _scalar(x, hi)])
    return e


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, name: str = "hardtanh") -> Tensor:
    """``clip(x, min_val, max_val)`` (``torch.nn.functional.hardtanh``; ``relu6`` is ``(0, 6)``). Raises
    TypeError for a non-float ``x``."""
    _check_float(x, "hardtanh")
    return wrap_nested(_clip(x, min_val, max_val), name)


def hardsigmoid(x: Tensor, alpha: float = 1.0 / 6.0, beta: float = 0.5, name: str = "hardsigmoid") -> Tensor:
    """``clip(alpha * x + beta, 0, 1)``: PyTorch's defaults (``alpha = 1/6``, Howard et al. 2019); ONNX's
    ``HardSigmoid`` defaults are ``alpha = 0.2``. Raises TypeError for a non-float ``x``."""
    _check_float(x, "hardsigmoid")
    lin = op_call("add", [op_call("multiply", [x._expr, _scalar(x, alpha)]), _scalar(x, beta)])
    return wrap_nested(_clip(Tensor(_expr=lin), 0.0, 1.0), name)


def hardswish(x: Tensor, name: str = "hardswish") -> Tensor:
    """``x * hardsigmoid(x)`` (MobileNetV3, Howard et al. 2019). Raises TypeError for a non-float ``x``."""
    return wrap_nested(op_call("multiply", [x._expr, hardsigmoid(x)._expr]), name)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, name: str = "leaky_relu") -> Tensor:
    """``x`` where ``x > 0``, else ``negative_slope * x`` (NaN stays NaN). Raises TypeError for a
    non-float ``x``."""
    _check_float(x, "leaky_relu")
    pos = op_call("greater", [x._expr, _scalar(x, 0.0)])
    return wrap_nested(op_call("where", [pos, x._expr, op_call("multiply", [x._expr, _scalar(x, negative_slope)])]),
                       name)


def elu(x: Tensor, alpha: float = 1.0, scale: float = 1.0, name: str = "elu") -> Tensor:
    """``scale * (x if x > 0 else alpha * (exp(x) - 1))`` (Clevert et al. 2016; SELU is ``alpha =
    1.6732632423543772``, ``scale = 1.0507009873554805``, Klambauer et al. 2017). ``exp(x) - 1`` is not
    ``expm1``: for |x| < 1e-4 the absolute error is about 1e-7. Raises TypeError for a non-float ``x``."""
    _check_float(x, "elu")
    pos = op_call("greater", [x._expr, _scalar(x, 0.0)])
    neg = op_call("multiply", [op_call("subtract", [op_call("exp", [x._expr]), _scalar(x, 1.0)]), _scalar(x, alpha)])
    out = op_call("where", [pos, x._expr, neg])
    if scale != 1.0:
        out = op_call("multiply", [out, _scalar(x, scale)])
    return wrap_nested(out, name)


def celu(x: Tensor, alpha: float = 1.0, name: str = "celu") -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (Barron 2017): :func:`elu` of ``x / alpha`` times
    ``alpha`` where ``x <= 0``. Raises TypeError for a non-float ``x``, ValueError for ``alpha == 0``."""
    _check_float(x, "celu")
    if float(alpha) == 0.0:
        raise ValueError("celu: alpha must not be 0")
    neg = op_call("multiply", [elu(Tensor(_expr=op_call("divide", [x._expr, _scalar(x, alpha)])))._expr,
                               _scalar(x, alpha)])
    pos = op_call("greater", [x._expr, _scalar(x, 0.0)])
    return wrap_nested(op_call("where", [pos, x._expr, neg]), name)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0, name: str = "softplus") -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` where ``beta * x > threshold`` (PyTorch's; ONNX's
    ``Softplus`` is beta 1 with no threshold, the same values to float32 precision). Raises TypeError for a
    non-float ``x``."""
    _check_float(x, "softplus")
    bx = op_call("multiply", [x._expr, _scalar(x, beta)]) if beta != 1.0 else x._expr
    soft = op_call("log", [op_call("add", [op_call("exp", [bx]), _scalar(x, 1.0)])])
    if beta != 1.0:
        soft = op_call("divide", [soft, _scalar(x, beta)])
    big = op_call("greater", [bx, _scalar(x, threshold)])
    return wrap_nested(op_call("where", [big, x._expr, soft]), name)


def softsign(x: Tensor, name: str = "softsign") -> Tensor:
    """``x / (1 + |x|)``. Raises TypeError for a non-float ``x``."""
    _check_float(x, "softsign")
    return wrap_nested(op_call("divide", [x._expr, op_call("add", [op_call("abs", [x._expr]), _scalar(x, 1.0)])]),
                       name)


def mish(x: Tensor, name: str = "mish") -> Tensor:
    """``x * tanh(softplus(x))`` (Misra 2019). Raises TypeError for a non-float ``x``."""
    return wrap_nested(op_call("multiply", [x._expr, op_call("tanh", [softplus(x)._expr])]), name)


@recipe_function
def batch_norm(x: Tensor, running_mean: Tensor, running_var: Tensor, weight: Tensor | None = None,
               bias: Tensor | None = None, axis: int = 1, eps: float = 1e-5, name: str = "batch_norm") -> Tensor:
    """Batch normalization with running statistics (inference; Ioffe & Szegedy 2015,
    ``torch.nn.BatchNorm2d`` in eval mode, ONNX ``BatchNormalization`` with ``training_mode=0``)::

        y = (x - running_mean) * (weight / sqrt(running_var + eps)) + bias      along ``axis``

    ``x`` float (N, C, ...) (``axis`` the channel dim, default 1), the others (C,) of the same
    dtype; missing ``weight`` / ``bias`` are 1 / 0. Emitted as reshapes to (1, C, 1, ...) and
    elementwise ops, so it fuses into the producer's or the consumer's loop. Raises TypeError for a
    non-float ``x``, ValueError for an axis out of range or statistics that are not (C,).
    """
    _check_float(x, "batch_norm")
    ax = norm_axis(int(axis), x.ndim, "batch_norm")
    c = x.shape[ax]
    shape = [1] * x.ndim
    shape[ax] = c

    def per_channel(v: Tensor | None, what: str):
        if v is None:
            return None
        if v.ndim != 1 or (isinstance(v.shape[0], int) and isinstance(c, int) and v.shape[0] != c):
            raise ValueError(f"batch_norm: {what} must have shape ({c},), got {fmt_shape(v.shape)}")
        if v.dtype != x.dtype:
            raise TypeError(f"batch_norm: {what} dtype {v.dtype} differs from x's {x.dtype}")
        return op_call("reshape", [v._expr, rx.ShapeExpr(shape)])

    mean, var = per_channel(running_mean, "running_mean"), per_channel(running_var, "running_var")
    w, b = per_channel(weight, "weight"), per_channel(bias, "bias")
    scale = op_call("rsqrt", [op_call("add", [var, rx.const(float(eps), x.dtype)])])
    if w is not None:
        scale = op_call("multiply", [scale, w])
    out = op_call("multiply", [op_call("subtract", [x._expr, mean]), scale])
    if b is not None:
        out = op_call("add", [out, b])
    return wrap_nested(out, name)


@recipe_function
def mean_pooling(token_embeddings: Tensor, attention_mask: Tensor, name: str = "mean_pooling") -> Tensor:
    """Mean of the token embeddings over the tokens the mask keeps (sentence-transformers'
    ``mean_pooling``, https://www.sbert.net/examples/sentence_transformer/applications/computing-embeddings)::

        out[b, :] = sum_s x[b, s, :] * m[b, s] / max(sum_s m[b, s], 1e-9)

    ``token_embeddings`` (batch, seq, hidden) float; ``attention_mask`` (batch, seq) of bool, int
    or float (converted to the embeddings' dtype) -> (batch, hidden). Composed of ``astype``,
    ``expand_dims``, ``multiply``, ``sum``, ``maximum`` and ``divide``. A row whose mask is all
    zeros gives zeros (0 / 1e-9; in float16, where 1e-9 is 0, NaN as in PyTorch). Raises
    TypeError for non-float embeddings, ValueError for other ranks or mismatched (batch, seq).
    """
    op = "mean_pooling"
    x, m = token_embeddings, attention_mask
    _check_float(x, op, "token_embeddings")
    if x.ndim != 3 or m.ndim != 2:
        raise ValueError(f"{op}: token_embeddings must be (batch, seq, hidden) and attention_mask (batch, seq), "
                         f"got shapes {fmt_shape(x.shape)} and {fmt_shape(m.shape)}")
    for i, what in ((0, "batch"), (1, "seq")):
        a, b = x.shape[i], m.shape[i]
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ValueError(f"{op}: the {what} of token_embeddings {fmt_shape(x.shape)} is {a} but "
                             f"that of attention_mask {fmt_shape(m.shape)} is {b}")
    dt = x.dtype
    mask = m._expr if m.dtype == dt else op_call("astype", [m._expr], dtype=dt)
    mask = wrap_nested(op_call("expand_dims", [mask], axis=[-1]), name + "_mask")._expr   # read twice: bind once
    summed = op_call("sum", [op_call("multiply", [x._expr, mask])], axis=[1], keepdims=False)
    count = op_call("maximum", [op_call("sum", [mask], axis=[1], keepdims=False), rx.const(1e-9, dt)])
    return wrap_nested(op_call("divide", [summed, count]), name)


def rnn_recurrence(xw: Tensor, r: Tensor, rb: Tensor, h0: Tensor, c0: Tensor | None = None, cell: str = "lstm",
                   reverse: bool = False, linear_before_reset: bool = False, name: str = "rnn"):
    """One direction of a recurrent layer over inputs already projected (``xw = x @ W^T + W_bias``, (S, B,
    G * H)): ``R.nn.rnn(xw, r, rb, h0[, c0], cell=..., reverse=..., linear_before_reset=...)``, the tuple
    ``(y (S, B, H), h_last (B, H)[, c_last (B, H)])``. ``cell`` ``"lstm"`` (G = 4, gates i, o, f, c, needs
    ``c0``), ``"gru"`` (G = 3, z, r, h; ``linear_before_reset`` as PyTorch's GRU), ``"rnn"`` (G = 1, tanh) or
    ``"rnn_relu"`` (G = 1, ReLU);
    ``r`` (G * H, H) and ``rb`` (G * H,) the recurrent weight and bias in that gate order (ONNX's); ``reverse``
    runs from the last step to the first (``y`` stays in input order). Formulas and sources:
    :mod:`builder.te.topi.recurrent`. Raises ValueError / TypeError for shapes or dtypes that do not fit."""
    args = [xw._expr, r._expr, rb._expr, h0._expr] + ([c0._expr] if c0 is not None else [])
    return wrap_nested(op_call("nn.rnn", args, cell=cell, reverse=bool(reverse),
                               linear_before_reset=bool(linear_before_reset)), name)


def recurrent_layer(x: Tensor, w: Tensor, r: Tensor, wb: Tensor | None, rb: Tensor | None, h0: Tensor,
                    c0: Tensor | None = None, cell: str = "lstm", reverse: bool = False,
                    linear_before_reset: bool = False, name: str = "recurrent"):
    """One direction of an LSTM / GRU / RNN layer: the input projection ``x @ w^T + wb`` of every step as one
    matmul (``x`` (S, B, I), ``w`` (G * H, I): the linear kernels), then :func:`rnn_recurrence` (``r`` (G * H,
    H), ``rb`` (G * H,); a missing bias is zeros). Gates in ONNX's order (see :func:`rnn_recurrence`).
    Returns ``(y (S, B, H), h_last (B, H)[, c_last (B, H)])``."""
    xw = matmul(x, permute_dims(w, [1, 0]))
    if wb is not None:
        xw = xw + wb
    if rb is None:
        rb = zeros([r.shape[0]], dtype=r.dtype)
    return rnn_recurrence(xw, r, rb, h0, c0, cell=cell, reverse=reverse, linear_before_reset=linear_before_reset,
                          name=name)
