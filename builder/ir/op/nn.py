"""Struct-info inference of neural-network ops: matmul, layer / rms / group norm, convolutions, resize2d, attention."""
from __future__ import annotations

from typing import Sequence

from .. import expr as E
from ..relax import Call, ShapeExpr
from ..struct_info import StructInfo, TensorStructInfo, TupleStructInfo, normalize_dim
from .common import (check_positive_out, check_same_dtype, definitely_different, fmt_shape, norm_axis,
    static_int, tensor_arg)
from .elementwise import broadcast_shapes


def infer_matmul(call: Call) -> StructInfo:
    """Struct info of ``R.matmul(a, b, out_dtype)`` (``numpy.matmul``): ``(*batch, M, K) @ (*batch, K, N)
    -> (*batch, M, N)`` with the batch dims broadcast; a 1-D ``a`` is a row (its M dropped from the
    result), a 1-D ``b`` a column (its N dropped). dtype: ``out_dtype`` when given (not ``"void"``),
    else the operands'. Raises TypeError when the operand dtypes differ, ValueError for a 0-d operand,
    reduction dims K that differ or batch dims that do not broadcast."""
    a, b = tensor_arg(call, 0, "lhs"), tensor_arg(call, 1, "rhs")
    out_dtype = call.attrs.get("out_dtype", "void")
    if a.dtype != b.dtype:
        raise TypeError(f"R.matmul: dtypes differ: lhs {a.dtype} vs rhs {b.dtype}")
    sa, sb = a.shape, b.shape
    if len(sa) == 0 or len(sb) == 0:
        raise ValueError("R.matmul: operands must have ndim >= 1")
    a2 = sa if len(sa) > 1 else (1,) + sa
    b2 = sb if len(sb) > 1 else sb + (1,)
    ka, kb = a2[-1], b2[-2]
    if definitely_different(ka, kb):
        raise ValueError(f"R.matmul: reduction dims differ: lhs {fmt_shape(sa)} has {ka}, "
                         f"rhs {fmt_shape(sb)} has {kb}")
    batch = broadcast_shapes(a2[:-2], b2[:-2], "R.matmul")
    out = list(batch)
    if len(sa) > 1:
        out.append(a2[-2])
    if len(sb) > 1:
        out.append(b2[-1])
    return TensorStructInfo(out, a.dtype if out_dtype in ("void", None) else out_dtype)


def check_norm_params(call: Call, x: TensorStructInfo, axes, names: Sequence[str]) -> None:
    """Check the parameter tensors of a normalization (arguments 1, 2, ... of ``call``, named ``names``:
    ``gamma`` / ``beta``, ``weight``): each has ``x``'s dtype and the shape of ``x``'s normalized dims
    ``axes`` (already normalized to ``[0, ndim)``). Raises ValueError for repeated axes or a shape
    mismatch, TypeError for a dtype mismatch, naming the op and the input's shape."""
    if len(set(axes)) != len(axes):
        raise ValueError(f"{call.op.name}: axes {list(call.attrs['axes'])} repeat a dim of input "
                         f"{fmt_shape(x.shape)}")
    expected = tuple(x.shape[a] for a in axes)
    for i, what in enumerate(names, start=1):
        p = tensor_arg(call, i, what)
        if p.dtype != x.dtype:
            raise TypeError(f"{call.op.name}: {what} dtype {p.dtype} differs from input dtype {x.dtype}")
        if len(p.shape) != len(expected) or any(definitely_different(a, b) for a, b in zip(p.shape, expected)):
            raise ValueError(f"{call.op.name}: {what} shape {fmt_shape(p.shape)} does not match the "
                             f"normalized dims {fmt_shape(expected)} of input {fmt_shape(x.shape)}")


def infer_layer_norm(call: Call) -> StructInfo:
    """Struct info of ``R.nn.layer_norm(data, gamma, beta, axes, epsilon, ...)`` (Ba et al. 2016): the
    input's shape and dtype; ``gamma`` and ``beta`` have the shape of the ``axes`` dims and the input's
    dtype. Raises ValueError / TypeError as :func:`check_norm_params`, and for an axis out of range."""
    x = tensor_arg(call, 0, "data")
    axes = [norm_axis(a, x.ndim, call.op.name) for a in call.attrs["axes"]]
    check_norm_params(call, x, axes, ("gamma", "beta"))
    return TensorStructInfo(x.shape, x.dtype)


def infer_rms_norm(call: Call) -> StructInfo:
    """Struct info of ``R.nn.rms_norm(data, weight, axes, epsilon)`` (Zhang & Sennrich 2019): the input's
    shape and dtype; ``weight`` has the shape of the ``axes`` dims and the input's dtype. Raises
    ValueError / TypeError as :func:`check_norm_params`, and for an axis out of range."""
    x = tensor_arg(call, 0, "data")
    axes = [norm_axis(a, x.ndim, call.op.name) for a in call.attrs["axes"]]
    check_norm_params(call, x, axes, ("weight",))
    return TensorStructInfo(x.shape, x.dtype)


def conv_out_dim(size, kernel, stride: int, pad_lo: int, pad_hi: int, dilation: int):
    """Output length of a convolution: ``(size + pads - dilation*(kernel-1) - 1) // stride + 1``
    (PyTorch ``Conv1d`` docs)."""
    if isinstance(size, int) and isinstance(kernel, int):
        return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1
    num = E.convert(size) + (pad_lo + pad_hi - 1) - (E.convert(kernel) - 1) * dilation
    return E.simplify(num // stride + 1)


def _conv_operands(call: Call, layouts: tuple[str, str, str]) -> tuple[TensorStructInfo, TensorStructInfo]:
    """The data and weight of a convolution call, after checking its layout attributes against the
    only ones supported (``layouts``: data, kernel, out), their ranks and equal dtypes."""
    x, w = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "weight")
    a = call.attrs
    got = (a.get("data_layout"), a.get("kernel_layout"), a.get("out_layout"))
    name = "R." + call.op.name.removeprefix("relax.")
    if got != layouts:
        raise ValueError(f"{name}: only data_layout='{layouts[0]}', kernel_layout='{layouts[1]}', "
                         f"out_layout='{layouts[2]}' are supported, got {got}")
    ndim = len(layouts[0])
    if x.ndim != ndim or w.ndim != ndim:
        raise ValueError(f"{name}: data and weight must be {ndim}-D ({layouts[0]} / {layouts[1]}), got "
                         f"{fmt_shape(x.shape)} and {fmt_shape(w.shape)}")
    check_same_dtype(call, x, w, "data", "weight")
    return x, w


def infer_conv1d(call: Call) -> StructInfo:
    """Struct info of ``R.nn.conv1d`` (NCW data (N, C, W), OIW weight (O, C / groups, K); TVM's attributes
    ``strides``, ``padding`` (left, right), ``dilation``, ``groups``, ``out_dtype``): (N, O, W_out) with
    W_out from :func:`conv_out_dim`. dtype: ``out_dtype`` when given, else the data's. Raises
    ValueError for other layouts or ranks, channels that do not match ``C / groups``, and an input
    (padded) shorter than the dilated kernel; TypeError when data and weight dtypes differ."""
    x, w = _conv_operands(call, ("NCW", "OIW", "NCW"))
    a = call.attrs
    groups = a["groups"]
    n, c, width = x.shape
    o, cg, k = w.shape
    if definitely_different(E.simplify(E.convert(c)), E.simplify(E.convert(cg) * groups)):
        raise ValueError(f"R.nn.conv1d: data has {c} channels but weight {fmt_shape(w.shape)} with "
                         f"groups={groups} expects {cg} x {groups}")
    out_w = conv_out_dim(width, k, a["strides"][0], a["padding"][0], a["padding"][1], a["dilation"][0])
    span = a["dilation"][0] * (k - 1) + 1 if isinstance(k, int) else None
    if isinstance(width, int) and span is not None and width + a["padding"][0] + a["padding"][1] < span:
        raise ValueError(f"the input of length {width} (padded to "
                         f"{width + a['padding'][0] + a['padding'][1]}) is shorter than the dilated kernel "
                         f"({span} = dilation {a['dilation'][0]} x (kernel {k} - 1) + 1)")
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo((n, o, out_w), x.dtype if out_dtype in ("void", None) else out_dtype)


def infer_conv2d(call: Call) -> StructInfo:
    """Struct info of ``R.nn.conv2d`` (NCHW data, OIHW weight (O, C / groups, kH, kW); ``strides``,
    ``padding`` (top, left, bottom, right), ``dilation``, ``groups``, ``out_dtype``): (N, O, H_out,
    W_out), each from :func:`conv_out_dim`. Raises ValueError for other layouts or ranks, channels
    that do not match, O not divisible by ``groups``, and an output dim below 1; TypeError when data
    and weight dtypes differ."""
    x, w = _conv_operands(call, ("NCHW", "OIHW", "NCHW"))
    a = call.attrs
    groups = a["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if definitely_different(E.simplify(E.convert(c)), E.simplify(E.convert(cg) * groups)):
        raise ValueError(f"R.nn.conv2d: data {fmt_shape(x.shape)} has {c} channels but weight "
                         f"{fmt_shape(w.shape)} with groups={groups} expects {cg} x {groups}")
    so = static_int(o)
    if so is not None and so % groups:
        raise ValueError(f"R.nn.conv2d: weight {fmt_shape(w.shape)} has {so} output channels, "
                         f"not divisible by groups={groups}")
    s, p, d = a["strides"], a["padding"], a["dilation"]
    oh = conv_out_dim(h, kh, s[0], p[0], p[2], d[0])
    ow = conv_out_dim(wd, kw, s[1], p[1], p[3], d[1])
    check_positive_out(call, oh, "height", x)
    check_positive_out(call, ow, "width", x)
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo((n, o, oh, ow), x.dtype if out_dtype in ("void", None) else out_dtype)


def exact_scaled_size(size, factor: float):
    """``size * factor`` when it is a whole number (a static size) or the factor is an integer (a symbolic
    size): the output size of an upsampling by a scale factor whose coordinates map by the factor, as
    PyTorch's ``interpolate(scale_factor=...)`` and ONNX ``Resize(scales=...)`` do, equal to the in / out
    ratio :func:`builder.nn.op.interpolate` uses only then. Raises ValueError otherwise (a fractional
    output size: give the size instead)."""
    f = float(factor)
    s = static_int(size)
    if s is not None:
        if not float(s * f).is_integer():
            raise ValueError(f"a scale of {f} of a dim of {s} gives a fractional size; give the output size instead")
        return int(s * f)
    if f.is_integer():
        return E.simplify(E.convert(size) * int(f))
    raise ValueError(f"a fractional scale {f} of the symbolic dim {size}; give the output size instead")


def pool_out_dim(size, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int, ceil_mode: bool):
    """Output length of a pooling window (PyTorch's ``pooling_output_shape``, ATen
    ``Pool.h``)::

        out = floor_or_ceil((size + pad_lo + pad_hi - dilation*(kernel-1) - 1) / stride) + 1
        with ceil_mode, minus one when the last window would start at or past size + pad_lo

    Raises ValueError for ``ceil_mode`` on a symbolic size (the correction is data dependent)."""
    span = dilation * (kernel - 1) + 1
    if static_int(size) is not None:
        size = static_int(size)
        num = size + pad_lo + pad_hi - span
        out = (num + (stride - 1 if ceil_mode else 0)) // stride + 1
        if ceil_mode and (out - 1) * stride >= size + pad_lo:
            out -= 1
        return out
    if ceil_mode:
        raise ValueError(f"pooling with ceil_mode needs a static input size, got {size}")
    return E.simplify((E.convert(size) + (pad_lo + pad_hi - span)) // stride + 1)


def _pool_layout(call: Call) -> tuple[TensorStructInfo, int, list[int]]:
    """The data of a pooling call, its spatial rank and spatial axes, after checking its layout
    attributes: channels first (NCW / NCHW, the default) or channels last (NWC / NHWC: what a
    GEMM-lowered convolution produces), ``out_layout`` the same."""
    x = tensor_arg(call, 0, "data")
    a = call.attrs
    op = call.op.name.removeprefix("relax.")
    nsp = 1 if op.endswith("1d") else 2
    first, last = ("NCW", "NWC") if nsp == 1 else ("NCHW", "NHWC")
    name = "R." + op
    layout = a.get("layout") or first
    if layout not in (first, last) or a.get("out_layout") not in (layout, None):
        raise ValueError(f"{name}: layout must be '{first}' or '{last}' with out_layout the same, got "
                         f"layout={a.get('layout')!r} out_layout={a.get('out_layout')!r}")
    if x.ndim != nsp + 2:
        raise ValueError(f"{name}: data must be {nsp + 2}-D ({layout}), got {fmt_shape(x.shape)}")
    return x, nsp, list(range(2, nsp + 2)) if layout == first else list(range(1, nsp + 1))


def _with_dims(x: TensorStructInfo, axes: list[int], dims: list) -> list:
    shape = list(x.shape)
    for a, d in zip(axes, dims):
        shape[a] = d
    return shape


def infer_pool(call: Call) -> StructInfo:
    """``R.nn.max_pool1d / 2d``, ``R.nn.avg_pool1d / 2d``: the spatial dims of the layout become
    :func:`pool_out_dim` each; ``padding`` is TVM's ``(lo..., hi...)``. Raises ValueError for another layout
    or rank, attribute lists of the wrong length, a pool size, stride or dilation below 1, negative padding or
    an output size below 1; TypeError for average pooling of a non-float tensor."""
    x, nsp, axes = _pool_layout(call)
    a = call.attrs
    name = "R." + call.op.name.removeprefix("relax.")
    ks, ss, ds, pads = (list(a[k]) for k in ("pool_size", "strides", "dilation", "padding"))
    if len(ks) != nsp or len(ss) != nsp or len(ds) != nsp or len(pads) != 2 * nsp:
        raise ValueError(f"{name}: pool_size / strides / dilation need {nsp} values and padding {2 * nsp}, got "
                         f"{ks}, {ss}, {ds}, {pads}")
    if min(ks + ss + ds) < 1 or min(pads) < 0:
        raise ValueError(f"{name}: invalid pool_size={ks} strides={ss} dilation={ds} padding={pads}")
    if "avg" in name and not E.is_float_dtype(x.dtype):
        raise TypeError(f"{name}: average pooling needs a float dtype, got {x.dtype}")
    outs = [pool_out_dim(x.shape[ax], k, s, pads[i], pads[nsp + i], d, bool(a.get("ceil_mode", False)))
            for i, (ax, k, s, d) in enumerate(zip(axes, ks, ss, ds))]
    for o in outs:
        check_positive_out(call, o, "size", x)
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo(_with_dims(x, axes, outs), x.dtype if out_dtype in ("void", None) else out_dtype)


def infer_adaptive_pool(call: Call) -> StructInfo:
    """``R.nn.adaptive_avg_pool1d / 2d``: the spatial dims become ``output_size`` (a ``None`` size
    keeps the input's dim). Raises ValueError for an ``output_size`` of the wrong length or below 1 and
    another layout, TypeError for a non-float tensor."""
    x, nsp, axes = _pool_layout(call)
    name = "R." + call.op.name.removeprefix("relax.")
    sizes = call.attrs.get("output_size")
    sizes = [x.shape[a] for a in axes] if sizes is None else list(sizes)
    if len(sizes) == 1:
        sizes = sizes * nsp
    if len(sizes) != nsp:
        raise ValueError(f"{name}: output_size needs {nsp} values, got {sizes}")
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"{name}: average pooling needs a float dtype, got {x.dtype}")
    outs = [x.shape[a] if o is None else o for a, o in zip(axes, sizes)]
    for o in outs:
        if static_int(o) is not None and static_int(o) < 1:
            raise ValueError(f"{name}: output_size must be >= 1, got {sizes}")
    out_dtype = call.attrs.get("out_dtype", "void")
    return TensorStructInfo(_with_dims(x, axes, outs), x.dtype if out_dtype in ("void", None) else out_dtype)


def conv_transpose_out_dim(size, kernel, stride: int, pad_lo: int, pad_hi: int, dilation: int,
                           output_padding: int):
    """Output length of a transposed convolution (PyTorch ``ConvTranspose1d`` docs):
    ``(size - 1) * stride - pad_lo - pad_hi + dilation * (kernel - 1) + output_padding + 1``."""
    if isinstance(size, int) and isinstance(kernel, int):
        return ((size - 1) * stride - pad_lo - pad_hi + dilation * (kernel - 1)
                + output_padding + 1)
    e = ((E.convert(size) - 1) * stride + (E.convert(kernel) - 1) * dilation
         + (output_padding + 1 - pad_lo - pad_hi))
    return normalize_dim(E.simplify(e))


def _transpose_out_channels(call: Call, x: TensorStructInfo, w: TensorStructInfo):
    """The output channels ``O / groups * groups`` of a transposed convolution, after checking the data's
    channels against the weight's (in, out / groups, ...) and ``groups``."""
    name = "R." + call.op.name.removeprefix("relax.")
    groups = call.attrs["groups"]
    c, ci, og = x.shape[1], w.shape[0], w.shape[1]
    if definitely_different(c, ci):
        raise ValueError(f"{name}: data {fmt_shape(x.shape)} has {c} channels but weight {fmt_shape(w.shape)} "
                         f"(in, out / groups, ...) expects {ci}")
    sc = static_int(c)
    if sc is not None and sc % groups:
        raise ValueError(f"{name}: {sc} input channels of data {fmt_shape(x.shape)} are not divisible by "
                         f"groups={groups}")
    return normalize_dim(E.simplify(E.convert(og) * groups)) if not isinstance(og, int) else og * groups


def infer_conv1d_transpose(call: Call) -> StructInfo:
    """Struct info of ``R.nn.conv1d_transpose`` (NCW data (N, C, W), IOW weight (C, O / groups, K);
    ``strides``, ``padding``, ``dilation``, ``output_padding``, ``groups``): (N, O, W_out) with W_out
    from :func:`conv_transpose_out_dim` (PyTorch's ``ConvTranspose1d``). Raises ValueError for other
    layouts, mismatched or indivisible channels, an ``output_padding`` not smaller than the stride or
    the dilation, and an output width below 1; TypeError when dtypes differ."""
    x, w = _conv_operands(call, ("NCW", "IOW", "NCW"))
    a = call.attrs
    n, width = x.shape[0], x.shape[2]
    k = w.shape[2]
    out_c = _transpose_out_channels(call, x, w)
    (s,), (d,), (op_,) = a["strides"], a["dilation"], a["output_padding"]
    if not (op_ < s or op_ < d):
        raise ValueError(f"R.nn.conv1d_transpose: output_padding {op_} must be smaller than the "
                         f"stride {s} or the dilation {d}")
    out_w = conv_transpose_out_dim(width, k, s, a["padding"][0], a["padding"][1], d, op_)
    check_positive_out(call, out_w, "width", x)
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo((n, out_c, out_w), x.dtype if out_dtype in ("void", None) else out_dtype)


def infer_conv2d_transpose(call: Call) -> StructInfo:
    """``R.nn.conv2d_transpose``: NCHW data, IOHW weight (in, out / groups, kH, kW), TVM's 4-value padding
    (top, left, bottom, right) and 2-value output_padding. Output (N, O, H_out, W_out), each dim from
    :func:`conv_transpose_out_dim` (PyTorch's ``ConvTranspose2d``); dtype ``out_dtype`` when given, else the
    data's. Raises ValueError for other layouts, mismatched or indivisible channels, an ``output_padding`` not
    smaller than the stride or the dilation and an output dim below 1; TypeError when data and weight dtypes
    differ."""
    x, w = _conv_operands(call, ("NCHW", "IOHW", "NCHW"))
    a = call.attrs
    n, _, h, wd = x.shape
    kh, kw = w.shape[2:]
    out_c = _transpose_out_channels(call, x, w)
    s, d, op_, p = a["strides"], a["dilation"], a["output_padding"], a["padding"]
    for i in range(2):
        if not (op_[i] < s[i] or op_[i] < d[i]):
            raise ValueError(f"R.nn.conv2d_transpose: output_padding {op_} must be smaller than the stride {s} "
                             f"or the dilation {d}")
    oh = conv_transpose_out_dim(h, kh, s[0], p[0], p[2], d[0], op_[0])
    ow = conv_transpose_out_dim(wd, kw, s[1], p[1], p[3], d[1], op_[1])
    check_positive_out(call, oh, "height", x)
    check_positive_out(call, ow, "width", x)
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo((n, out_c, oh, ow), x.dtype if out_dtype in ("void", None) else out_dtype)


def infer_group_norm(call: Call) -> StructInfo:
    """Struct info of ``R.nn.group_norm(data, gamma, beta, num_groups, channel_axis, axes, epsilon)`` (Wu
    & He 2018): the input's shape and dtype; ``gamma`` / ``beta`` are (C,) of the input's dtype. Raises
    TypeError for a non-float input or parameters of another dtype, ValueError when ``axes`` contains
    the channel axis or repeats a dim, when C is not divisible by ``num_groups`` (or ``num_groups`` < 1),
    or for parameter shapes other than (C,)."""
    x = tensor_arg(call, 0, "data")
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"R.nn.group_norm: needs a floating-point tensor, got {x.dtype}")
    a = call.attrs
    c_ax = norm_axis(a["channel_axis"], x.ndim, "R.nn.group_norm")
    axes = [norm_axis(ax, x.ndim, "R.nn.group_norm") for ax in a["axes"]]
    if c_ax in axes:
        raise ValueError(f"R.nn.group_norm: axes {a['axes']} must not contain the channel axis "
                         f"{a['channel_axis']}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"R.nn.group_norm: repeated axis in {a['axes']}")
    groups = a["num_groups"]
    chans = x.shape[c_ax]
    sc = static_int(chans)
    if groups < 1 or (sc is not None and sc % groups):
        raise ValueError(f"R.nn.group_norm: {chans} channels (axis {a['channel_axis']} of "
                         f"{fmt_shape(x.shape)}) are not divisible by num_groups={groups}")
    check_norm_params(call, x, [c_ax], ("gamma", "beta"))
    return TensorStructInfo(x.shape, x.dtype)


RESIZE_METHODS = ("nearest_neighbor", "linear", "cubic")


RESIZE_COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric")


RESIZE_ROUNDING_METHODS = ("round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def infer_resize2d(call: Call) -> StructInfo:
    """Struct info of ``R.image.resize2d(data, R.shape([h, w]), layout, method, ...)``: 4-D data (NCHW or
    NHWC) with its two spatial dims replaced by ``h`` and ``w``; dtype ``out_dtype`` when given, else the
    data's. Raises TypeError when the size is not a 2-value shape expression, ValueError for another
    layout, a data rank other than 4 or a method not in :data:`RESIZE_METHODS`."""
    x = tensor_arg(call, 0, "data")
    size = call.args[1]
    if not isinstance(size, ShapeExpr) or len(size.values) != 2:
        raise TypeError("R.image.resize2d: size must be a shape expression of 2 values (height, "
                        "width)")
    a = call.attrs
    layout = a.get("layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"R.image.resize2d: layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if x.ndim != 4:
        raise ValueError(f"R.image.resize2d: data must be 4-D ({layout}), got {fmt_shape(x.shape)}")
    if a.get("method") not in RESIZE_METHODS:
        raise ValueError(f"R.image.resize2d: unknown method {a.get('method')!r}")
    oh, ow = size.values
    if layout == "NCHW":
        shape = (x.shape[0], x.shape[1], oh, ow)
    else:
        shape = (x.shape[0], oh, ow, x.shape[3])
    out_dtype = a.get("out_dtype", "void")
    return TensorStructInfo(shape, x.dtype if out_dtype in ("void", None) else out_dtype)


def _qkv(call: Call, op: str, layout: str, ndim: int) -> tuple:
    """Query, key and value of an attention call: ``ndim``-D (``layout`` names the dims), floating
    point, one dtype (ValueError / TypeError naming ``op`` otherwise)."""
    q, k, v = tensor_arg(call, 0, "query"), tensor_arg(call, 1, "key"), tensor_arg(call, 2, "value")
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        if t.ndim != ndim:
            raise ValueError(f"{op}: {what} must be {layout}, got {fmt_shape(t.shape)}")
    if not E.is_float_dtype(q.dtype):
        raise TypeError(f"{op}: needs floating-point tensors, got {q.dtype}")
    check_same_dtype(call, q, k, "query", "key")
    check_same_dtype(call, q, v, "query", "value")
    return q, k, v


def _check_window_and_cap(call: Call, op: str, mask) -> None:
    """The ``window_size`` (None or a positive int, with a causal ``mask``) and ``logit_softcap`` (None or a
    positive finite number) attributes of an attention call; ValueError naming ``op`` otherwise."""
    window = call.attrs.get("window_size")
    if window is not None:
        if isinstance(window, E.IntImm):
            window = window.value
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise ValueError(f"{op}: window_size must be None or a positive int, got {window!r}")
        if mask is None:
            raise ValueError(f"{op}: a sliding window (window_size={window}) needs a causal_mask "
                             "('TopLeft' or 'BottomRight'): the window ends at the query's causal bound")
    cap = call.attrs.get("logit_softcap")
    if cap is not None:
        cap = cap.value if isinstance(cap, E.FloatImm) else cap
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < float("inf"):
            raise ValueError(f"{op}: logit_softcap must be None or a positive finite number, got {cap!r}")


def infer_attention(call: Call) -> StructInfo:
    """``R.nn.attention(query, key, value[, bias], scale, causal_mask, window_size)``: (B, Sq, H, Dv).

    ``query`` (B, Sq, H, D), ``key`` (B, Sk, Hk, D), ``value`` (B, Sk, Hk, Dv) of one float dtype, H a
    multiple of Hk (grouped-query attention); ``bias`` (optional 4th argument, TVM's) has query's dtype
    and shape (B, H, Sq, Sk) where any dim may be 1 (broadcast). ``causal_mask`` is None, ``"TopLeft"``
    or ``"BottomRight"``; ``window_size`` (TVM's sliding window, printed ``window_size=None`` as TVM
    0.27 does) None, absent or a positive int ``W`` with a causal mask: key ``j`` is kept for query ``i``
    when ``limit - W < j <= limit``, ``limit`` the causal bound (HF transformers' ``sliding_window``);
    ``logit_softcap`` (ours, printed only when given) None or a positive float ``c``: the scaled scores
    become ``c * tanh(s / c)`` before the bias and the masks (Gemma 2). Raises ValueError for any other
    shape, mask, window or cap, naming the op and the operands."""
    if len(call.args) not in (3, 4):
        raise ValueError(f"R.nn.attention: takes query, key, value and an optional bias, got "
                         f"{len(call.args)} arguments")
    q, k, v = _qkv(call, "R.nn.attention", "4-D (batch, seq_len, num_heads, head_dim)", 4)

    def same(da, db, wa: str, wb: str, what: str, ta, tb) -> None:
        if definitely_different(da, db):
            raise ValueError(f"R.nn.attention: the {what} of {wa} {fmt_shape(ta.shape)} is {da} "
                             f"but the {what} of {wb} {fmt_shape(tb.shape)} is {db}")

    same(q.shape[0], k.shape[0], "query", "key", "batch size", q, k)
    same(q.shape[0], v.shape[0], "query", "value", "batch size", q, v)
    same(q.shape[3], k.shape[3], "query", "key", "head dim", q, k)
    same(k.shape[1], v.shape[1], "key", "value", "sequence length", k, v)
    same(k.shape[2], v.shape[2], "key", "value", "number of heads", k, v)
    hq, hk = static_int(q.shape[2]), static_int(k.shape[2])
    if hq is not None and hk is not None and (hk == 0 or hq % hk):
        raise ValueError(f"R.nn.attention: the number of heads of query {fmt_shape(q.shape)} "
                         f"({hq}) is not a multiple of that of key {fmt_shape(k.shape)} ({hk})")
    mask = call.attrs.get("causal_mask")
    if mask not in (None, "TopLeft", "BottomRight"):
        raise ValueError(f"R.nn.attention: causal_mask must be None, 'TopLeft' or 'BottomRight', "
                         f"got {mask!r}")
    _check_window_and_cap(call, "R.nn.attention", mask)
    if len(call.args) == 4:
        bias = tensor_arg(call, 3, "bias")
        check_same_dtype(call, q, bias, "query", "bias")
        scores = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
        if bias.ndim != 4 or any(static_int(bd) != 1 and definitely_different(bd, sd)
                                 for bd, sd in zip(bias.shape, scores)):
            raise ValueError(f"R.nn.attention: bias {fmt_shape(bias.shape)} must be 4-D (batch, "
                             f"num_heads, seq_q, seq_kv) = {fmt_shape(scores)}, each dim equal or 1")
    return TensorStructInfo((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), q.dtype)


def infer_attention_var_len(call: Call) -> StructInfo:
    """``R.nn.attention_var_len(query, key, value, seqstart, scale, causal_mask)``: (T, H, Dv).

    ``query`` (T, H, D), ``key`` (T, Hk, D), ``value`` (T, Hk, Dv) float, ``seqstart`` (B + 1,)
    int32 / int64: the tokens of B sequences packed one after another (TVM's op takes a leading batch
    dim of 1 and the longest length too; here the kernel finds it). ``causal_mask`` is None or ``"TopLeft"``.
    Raises ValueError for another argument count, operand rank, ``seqstart`` rank or dtype, mismatched dims or
    heads, or causal mask; TypeError for non-float or mixed dtypes."""
    if len(call.args) != 4:
        raise ValueError(f"R.nn.attention_var_len: takes query, key, value and seqstart, got {len(call.args)} "
                         "arguments")
    q, k, v = _qkv(call, "R.nn.attention_var_len", "3-D (tokens, num_heads, head_dim)", 3)
    st = tensor_arg(call, 3, "seqstart")
    if st.ndim != 1 or st.dtype not in ("int32", "int64"):
        raise ValueError(f"R.nn.attention_var_len: seqstart must be 1-D int32 / int64 (num_sequences + 1,), got "
                         f"{st.dtype} {fmt_shape(st.shape)}")
    for a, b, what in ((q.shape[0], k.shape[0], "tokens of query and key"),
                       (k.shape[0], v.shape[0], "tokens of key and value"), (q.shape[2], k.shape[2], "head dims"),
                       (k.shape[1], v.shape[1], "heads of key and value")):
        if definitely_different(a, b):
            raise ValueError(f"R.nn.attention_var_len: the {what} differ: {a} and {b}")
    hq, hk = static_int(q.shape[1]), static_int(k.shape[1])
    if hq is not None and hk is not None and (hk == 0 or hq % hk):
        raise ValueError(f"R.nn.attention_var_len: the query's {hq} heads are not a multiple of the key's {hk}")
    if call.attrs.get("causal_mask") not in (None, "TopLeft"):
        raise ValueError(f"R.nn.attention_var_len: causal_mask must be None or 'TopLeft', got "
                         f"{call.attrs.get('causal_mask')!r}")
    return TensorStructInfo((q.shape[0], q.shape[1], v.shape[2]), q.dtype)


def infer_paged_attention(call: Call) -> StructInfo:
    """``R.nn.paged_attention(query, k_pool, v_pool, block_table, lengths[, bias], scale, causal_mask,
    window_size, logit_softcap)``: (B, Sq, H, Dv), attention of new queries over the keys a paged KV cache
    holds (vLLM's PagedAttention, Kwon et al. 2023; TVM's ``PagedKVCache`` attention).

    ``query`` (B, Sq, H, D); ``k_pool`` (num_blocks, block_size, Hk, D) and ``v_pool`` (num_blocks,
    block_size, Hk, Dv), one layer's blocks, of query's float dtype, H a multiple of Hk; ``block_table``
    (B, max_blocks) int32 / int64: row ``b``'s key ``j`` is in slot ``j % block_size`` of block
    ``block_table[b, j // block_size]``; ``lengths`` (B,) int32 / int64: the keys of row ``b``, the
    ``lengths[b] - Sq`` held before the call and its ``Sq`` new ones (the new tokens' keys are in the
    blocks already), so query ``i`` sits at position ``lengths[b] - Sq + i``. ``causal_mask`` None (every
    key of the row) or ``"BottomRight"`` (keys at or before the query's position); ``window_size`` /
    ``logit_softcap`` as in ``R.nn.attention``. ``bias`` (optional, query's dtype) (B, H, Sq, Skv), any dim
    1 (broadcast), column ``j`` the key at position ``j`` (a key dim not 1 must cover every length: checked
    when the code runs). Raises ValueError for other ranks, dims that differ, heads that do not divide, an
    index tensor that is not int32 / int64, another mask, window or cap; TypeError for non-float or mixed
    dtypes."""
    op = "R.nn.paged_attention"
    if len(call.args) not in (5, 6):
        raise ValueError(f"{op}: takes query, k_pool, v_pool, block_table, lengths and an optional bias, got "
                         f"{len(call.args)} arguments")
    q, k, v = _qkv(call, op, "4-D (batch, seq, num_heads, head_dim) / (num_blocks, block_size, num_kv_heads, "
                   "head_dim)", 4)
    table, lengths = tensor_arg(call, 3, "block_table"), tensor_arg(call, 4, "lengths")
    for t, what, nd in ((table, "block_table", 2), (lengths, "lengths", 1)):
        if t.ndim != nd or t.dtype not in ("int32", "int64"):
            raise ValueError(f"{op}: {what} must be {nd}-D int32 / int64, got {t.dtype} {fmt_shape(t.shape)}")
    for a, b, what in ((k.shape[0], v.shape[0], "blocks of k_pool and v_pool"),
                       (k.shape[1], v.shape[1], "block sizes of k_pool and v_pool"),
                       (k.shape[2], v.shape[2], "heads of k_pool and v_pool"), (q.shape[3], k.shape[3], "head dims"),
                       (q.shape[0], table.shape[0], "batch of query and block_table"),
                       (q.shape[0], lengths.shape[0], "batch of query and lengths")):
        if definitely_different(a, b):
            raise ValueError(f"{op}: the {what} differ: {a} and {b}")
    hq, hk = static_int(q.shape[2]), static_int(k.shape[2])
    if hq is not None and hk is not None and (hk == 0 or hq % hk):
        raise ValueError(f"{op}: the query's {hq} heads are not a multiple of the pools' {hk}")
    mask = call.attrs.get("causal_mask")
    if mask not in (None, "BottomRight"):
        raise ValueError(f"{op}: causal_mask must be None or 'BottomRight' (the queries are the last keys), got "
                         f"{mask!r}")
    _check_window_and_cap(call, op, mask)
    if len(call.args) == 6:
        bias = tensor_arg(call, 5, "bias")
        check_same_dtype(call, q, bias, "query", "bias")
        lead = (q.shape[0], q.shape[2], q.shape[1])
        if bias.ndim != 4 or any(static_int(bd) != 1 and definitely_different(bd, sd)
                                 for bd, sd in zip(bias.shape[:3], lead)):
            raise ValueError(f"{op}: bias {fmt_shape(bias.shape)} must be 4-D (batch, num_heads, seq, seq_kv) with "
                             f"(batch, num_heads, seq) = {fmt_shape(lead)}, each dim equal or 1")
    return TensorStructInfo((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), q.dtype)


def infer_rope(call: Call) -> StructInfo:
    """``R.nn.rope(x, cos, sin)``: x's struct info. ``x`` (..., head_dim) float with a static even
    head dim; ``cos`` / ``sin`` of x's dtype, broadcasting to x's shape (numpy rules). Raises ValueError for
    another argument count, a head dim that is not a static even int, or ``cos`` / ``sin`` that do not
    broadcast to ``x``; TypeError for a non-float ``x`` or ``cos`` / ``sin`` of another dtype."""
    if len(call.args) != 3:
        raise ValueError(f"R.nn.rope: takes x, cos and sin, got {len(call.args)} arguments")
    x, cos, sin = tensor_arg(call, 0, "x"), tensor_arg(call, 1, "cos"), tensor_arg(call, 2, "sin")
    if not E.is_float_dtype(x.dtype):
        raise TypeError(f"R.nn.rope: x must be a float tensor, got {x.dtype}")
    check_same_dtype(call, x, cos, "x", "cos")
    check_same_dtype(call, x, sin, "x", "sin")
    d = static_int(x.shape[-1]) if x.ndim else None
    if d is None or d % 2:
        raise ValueError(f"R.nn.rope: the last dim of x {fmt_shape(x.shape)} must be a static even int")
    for t, what in ((cos, "cos"), (sin, "sin")):
        out = broadcast_shapes(x.shape, t.shape, "R.nn.rope")
        if len(out) != x.ndim or any(definitely_different(a, b) for a, b in zip(out, x.shape)):
            raise ValueError(f"R.nn.rope: {what} {fmt_shape(t.shape)} does not broadcast to x "
                             f"{fmt_shape(x.shape)}")
    return TensorStructInfo(x.shape, x.dtype)


#: Recurrent cells (``R.nn.rnn``'s ``cell``) -> gates per hidden unit, in ONNX's order: LSTM i, o, f, c; GRU
#: z, r, h; RNN one (tanh; ``rnn_relu``: ReLU).
RNN_CELLS = {"lstm": 4, "gru": 3, "rnn": 1, "rnn_relu": 1}


def infer_rnn(call: Call) -> StructInfo:
    """``R.nn.rnn(xw, r, rb, h0[, c0], cell, reverse, linear_before_reset)``: one direction of a recurrent
    layer (:func:`builder.te.topi.rnn_prim_func`): ``xw`` (S, B, G * H) the projected inputs, ``r`` (G * H, H),
    ``rb`` (G * H,), ``h0`` / ``c0`` (B, H) -> the tuple (y (S, B, H), h (B, H)[, c (B, H)]); G = 4 (lstm), 3
    (gru), 1 (rnn). Raises ValueError for an unknown ``cell``, the wrong number of inputs or operands of the
    wrong rank or shape; TypeError for operands that are not all of one float dtype."""
    cell = call.attrs.get("cell", "lstm")
    if cell not in RNN_CELLS:
        raise ValueError(f"R.nn.rnn: cell must be one of {sorted(RNN_CELLS)}, got {cell!r}")
    n_in = 5 if cell == "lstm" else 4
    if len(call.args) != n_in:
        raise ValueError(f"R.nn.rnn: a {cell} takes {n_in} inputs, got {len(call.args)}")
    xw, r, rb, h0 = (tensor_arg(call, i, n) for i, n in enumerate(("xw", "r", "rb", "h0")))
    ranks = {"xw": (xw, 3), "r": (r, 2), "rb": (rb, 1), "h0": (h0, 2)}
    if cell == "lstm":
        ranks["c0"] = (tensor_arg(call, 4, "c0"), 2)
    for what, (t, n) in ranks.items():
        if t.ndim != n:
            raise ValueError(f"R.nn.rnn: {what} must be {n}-d, got {fmt_shape(t.shape)}")
        if t.dtype != xw.dtype or not E.is_float_dtype(t.dtype):
            raise TypeError(f"R.nn.rnn: {what} must be a float tensor of xw's dtype {xw.dtype}, got {t.dtype}")
    hidden, gates = h0.shape[1], RNN_CELLS[cell]
    want = {"xw": [xw.shape[1], hidden * gates], "r": [hidden * gates, hidden], "rb": [hidden * gates],
            "h0": [xw.shape[1], hidden]}
    got = {"xw": xw.shape[1:], "r": r.shape, "rb": rb.shape, "h0": h0.shape}
    if cell == "lstm":
        want["c0"], got["c0"] = [xw.shape[1], hidden], ranks["c0"][0].shape
    for what in want:
        if any(definitely_different(a, E.simplify(E.convert(b)) if not isinstance(b, int) else b)
               for a, b in zip(got[what], want[what])):
            raise ValueError(f"R.nn.rnn: {what} {fmt_shape(got[what])} does not fit {gates} gates of {hidden} "
                             f"hidden units (want {fmt_shape(want[what])})")
    y = TensorStructInfo([xw.shape[0], xw.shape[1], hidden], xw.dtype)
    state = TensorStructInfo([xw.shape[1], hidden], xw.dtype)
    return TupleStructInfo([y, state] + ([state] if cell == "lstm" else []))
