"""Converters of the spatial ONNX ops: Conv / ConvTranspose, MaxPool / AveragePool and the global pools,
Resize / Upsample (their pads, strides, dilations and auto_pad rules).
"""
from __future__ import annotations

import numpy as np

from ...ir import expr as E
from ...ir.op import exact_scaled_size
from ...nn import op
from ...nn.core import Tensor, wrap_nested
from ...nn.op.common import op_call, symbolic_scalar
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _simp


@_register("GlobalLpPool")
def _global_lp_pool(im, node, ins, at):
    """``GlobalLpPool``: ``(sum over the spatial dims of |x| ** p) ** (1 / p)``, kept as dims of 1."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    p = int(at.get("p", 2))
    axes = list(range(2, len(x.shape)))
    if p == 2:
        return op.sqrt(op.sum(op.multiply(x, x), axis=axes, keepdims=True))
    return op.power(op.sum(op.power(op.abs(x), float(p)), axis=axes, keepdims=True), 1.0 / p)


def _spatial_pads(x, kernel: list[int], strides: list[int], dilations: list[int], at: dict, what: str) -> list[int]:
    """ONNX ``pads`` (``[begin..., end...]``, TVM's order too) of a convolution / pooling node over the
    spatial dims of ``x`` (N, C, *spatial), from ``pads`` or ``auto_pad`` (``SAME_UPPER`` puts the odd
    pad at the end, ``SAME_LOWER`` at the beginning; both need static lengths)."""
    nsp = len(kernel)
    auto = at.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto == "NOTSET":
        pads = [int(p) for p in at.get("pads", [0] * (2 * nsp))]
    elif auto == "VALID":
        pads = [0] * (2 * nsp)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for i in range(nsp):
            length = _simp(x.shape[2 + i])
            if not isinstance(length, int):
                raise ONNXImportError(f"{what}: auto_pad={auto} needs static input lengths")
            out = -(-length // strides[i])
            # the spec's formula, not clamped at 0: a kernel shorter than the stride gives negative pads,
            # which crop the input (onnxruntime's windows); :func:`_crop_negative_pads` applies them
            total = (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - length
            half = total if auto == "SAME_UPPER" else total + 1
            first = half // 2 if half >= 0 else -(-half // 2)      # C's division, as onnxruntime's
            lo.append(first)
            hi.append(total - first)
        pads = lo + hi
    else:
        raise ONNXImportError(f"{what}: unknown auto_pad {auto!r}")
    if len(pads) != 2 * nsp or (auto == "NOTSET" and min(pads, default=0) < 0):
        raise ONNXImportError(f"{what}: pads {pads} must be {2 * nsp} non-negative values")
    return pads


def _crop_negative_pads(x: Tensor, pads: list[int]) -> tuple[Tensor, list[int]]:
    """``x`` with its spatial dims cropped where ``pads`` (ONNX order) are negative, and the pads with
    those set to 0: a negative pad (``auto_pad`` SAME with a kernel shorter than the stride) starts or
    ends the windows inside the input."""
    nsp = len(pads) // 2
    if min(pads, default=0) >= 0:
        return x, pads
    axes, begin, end = [], [], []
    for i in range(nsp):
        lo, hi = pads[i], pads[nsp + i]
        if lo < 0 or hi < 0:
            d = x.shape[2 + i]
            axes.append(2 + i)
            begin.append(max(0, -lo))
            end.append(E.simplify(E.convert(d) + min(0, hi)))
    return op.strided_slice(x, axes, begin, end, [1] * len(axes)), [max(0, p) for p in pads]


def _window(at: dict, nsp: int, what: str, kernel: list[int] | None = None):
    """``(kernel, strides, dilations)`` of a convolution / pooling node with ``nsp`` spatial dims."""
    if kernel is None:
        if "kernel_shape" not in at:
            raise ONNXImportError(f"{what}: kernel_shape is required")
        kernel = [int(v) for v in at["kernel_shape"]]
    elif "kernel_shape" in at and [int(v) for v in at["kernel_shape"]] != kernel:
        raise ONNXImportError(f"{what}: kernel_shape {list(at['kernel_shape'])} does not match the weight's {kernel}")
    strides = [int(v) for v in at.get("strides") or [1] * nsp]
    dilations = [int(v) for v in at.get("dilations") or [1] * nsp]
    if len(kernel) != nsp or len(strides) != nsp or len(dilations) != nsp:
        raise ONNXImportError(f"{what}: kernel_shape / strides / dilations need {nsp} values, got {kernel}, "
                              f"{strides}, {dilations}")
    return kernel, strides, dilations


@_register("Conv")
def _conv(im, node, ins, at):
    """ONNX ``Conv`` (opset 11+): 1-D and 2-D convolutions, attributes ``kernel_shape``, ``strides``, ``dilations``,
    ``group``, ``pads`` / ``auto_pad`` (negative pads crop); the weight's spatial dims must be static. Raises
    ONNXImportError for other ranks or a symbolic kernel size."""
    _check_inputs(ins, node)
    x, w = im.tensor(ins[0]), ins[1]
    b = ins[2] if len(ins) > 2 else None
    tw = im.tensor(w)
    if len(x.shape) not in (3, 4) or len(tw.shape) != len(x.shape):
        raise ONNXImportError(f"only 1-D and 2-D convolutions (3-d or 4-d input and weight) are supported, got a "
                              f"{len(x.shape)}-d input and a {len(tw.shape)}-d weight")
    nsp = len(x.shape) - 2
    ks = [_simp(d) for d in tw.shape[2:]]
    if not all(isinstance(k, int) for k in ks):
        raise ONNXImportError(f"the kernel size {ks} must be static")
    ks, strides, dilations = _window(at, nsp, "Conv", ks)
    x, pads = _crop_negative_pads(x, _spatial_pads(x, ks, strides, dilations, at, "Conv"))
    tb = None if b is None else im.tensor(b)
    groups = int(at.get("group", 1))
    if nsp == 1:
        return op.conv1d(x, tw, tb, stride=strides[0], padding=pads, dilation=dilations[0], groups=groups)
    return op.conv2d(x, tw, tb, stride=strides, padding=pads, dilation=dilations, groups=groups)


@_register("ConvTranspose")
def _conv_transpose(im, node, ins, at):
    """1-D and 2-D ``ConvTranspose`` (weight ``(C, O / group, *k)``), explicit pads and ``output_padding``."""
    _check_inputs(ins, node)
    x, w = im.tensor(ins[0]), im.tensor(ins[1])
    b = im.tensor(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
        raise ONNXImportError(f"only 1-D and 2-D transposed convolutions are supported, got a {len(x.shape)}-d input")
    nsp = len(x.shape) - 2
    auto = at.get("auto_pad", "NOTSET")
    if (auto.decode() if isinstance(auto, bytes) else auto) != "NOTSET" or "output_shape" in at:
        raise ONNXImportError("ConvTranspose with auto_pad or output_shape is not supported (give pads)")
    ks = [_simp(d) for d in w.shape[2:]]
    ks, strides, dilations = _window(at, nsp, "ConvTranspose", ks)
    pads = [int(p) for p in at.get("pads", [0] * (2 * nsp))]
    out_pad = [int(p) for p in at.get("output_padding", [0] * nsp)]
    if len(pads) != 2 * nsp or len(out_pad) != nsp:
        raise ONNXImportError(f"pads {pads} / output_padding {out_pad} do not fit {nsp} spatial dims")
    if nsp == 1:
        return op.conv1d_transpose(x, w, b, stride=strides[0], padding=pads, output_padding=out_pad[0],
                                   dilation=dilations[0], groups=int(at.get("group", 1)))
    return op.conv2d_transpose(x, w, b, stride=strides, padding=pads, output_padding=out_pad, dilation=dilations,
                               groups=int(at.get("group", 1)))


@_register("MaxPool", "AveragePool")
def _pool(im, node, ins, at):
    """1-D and 2-D ``MaxPool`` / ``AveragePool`` of ``(N, C, *spatial)`` data: ``kernel_shape``, ``strides``,
    ``dilations``, ``pads`` or ``auto_pad``, ``ceil_mode``, ``count_include_pad``; the Indices output and
    ``storage_order=1`` are refused (ONNXImportError).

    NaN: a MaxPool window holding a NaN gives NaN. The spec (MaxPool-22: "computing the max on all values of a
    subset of the input tensor") does not say how a NaN compares; we take numpy's ``max``, which is how onnx's
    ReferenceEvaluator computes ReduceMax and GlobalMaxPool and how onnxruntime computes GlobalMaxPool, so that
    a window covering the whole input equals GlobalMaxPool. onnxruntime's MaxPool keeps or drops a NaN by where
    it stands in the window (``x > max`` comparisons: a NaN first is kept, a NaN later skipped), and the
    ReferenceEvaluator's MaxPool drops every NaN (it marks padding with NaN); neither is a rule to follow."""
    _check_inputs(ins, node)
    if any(n for n in node.output[1:]):
        raise ONNXImportError("the Indices output of MaxPool is not supported")
    x = im.tensor(ins[0])
    nsp = len(x.shape) - 2
    if nsp not in (1, 2):
        raise ONNXImportError(f"only 1-D and 2-D pooling (3-d or 4-d input) is supported, got a {len(x.shape)}-d input")
    if int(at.get("storage_order", 0)) != 0:
        raise ONNXImportError("storage_order=1 (column major) is not supported")
    ks, strides, dilations = _window(at, nsp, node.op_type)
    x, pads = _crop_negative_pads(x, _spatial_pads(x, ks, strides, dilations, at, node.op_type))
    ceil = bool(int(at.get("ceil_mode", 0)))
    kind = "max" if node.op_type == "MaxPool" else "avg"
    name = f"nn.{kind}_pool{nsp}d"
    layout = "NCW" if nsp == 1 else "NCHW"
    return wrap_nested(op_call(name, [x._expr], pool_size=ks, strides=strides, padding=pads, dilation=dilations,
                               ceil_mode=ceil, count_include_pad=bool(int(at.get("count_include_pad", 0))),
                               layout=layout, out_layout=layout), kind + "_pool")


_RESIZE_ROUNDING = {"round_prefer_floor": "round_prefer_floor", "round_prefer_ceil": "round_prefer_ceil",
                    "floor": "floor", "ceil": "ceil"}


@_register("Resize", "Upsample")
def _resize(im, node, ins, at):
    """``Resize`` (opsets 11+; ``Upsample`` is its older scales-only form) of NCHW data, or NCW data as NCHW with
    H = 1 (which every mode and coordinate transformation maps onto itself), in nearest, linear or cubic mode
    (``cubic_coeff_a``, ``exclude_outside``; :func:`builder.nn.op.interpolate`): output ``sizes``, or ``scales``
    of 1 on N and C that give whole sizes (coordinates then follow the in / out ratio, which equals ``1 /
    scale``). ``nearest`` reads the input at indices computed exactly in integers
    (:func:`_nearest_source_index`), so that exact ``.5`` ties round as ``nearest_mode`` says.
    ``keep_aspect_ratio_policy`` other than ``stretch`` is refused (ONNXImportError)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    if nd not in (3, 4):
        raise ONNXImportError(f"only 3-d (NCW) and 4-d (NCHW) inputs are supported, got a {nd}-d one")
    if nd == 3:
        x = op.unsqueeze(x, 2)
    text = lambda k, d: at.get(k, d).decode() if isinstance(at.get(k, d), bytes) else at.get(k, d)
    mode, coord = text("mode", "nearest"), text("coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Upsample":
        coord = "asymmetric"
    nearest = text("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic"):
        raise ONNXImportError(f"mode {mode!r} is not supported (nearest, linear, cubic)")
    if int(at.get("antialias", 0)):
        raise ONNXImportError("antialias is not supported")
    if int(at.get("exclude_outside", 0)) and mode != "cubic":
        raise ONNXImportError("exclude_outside is supported in cubic mode only")
    if coord not in ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"):
        raise ONNXImportError(f"coordinate_transformation_mode {coord!r} is not supported")
    if mode == "nearest" and nearest not in _RESIZE_ROUNDING:
        raise ONNXImportError(f"nearest_mode {nearest!r} is not supported")
    if "axes" in at:
        raise ONNXImportError("the axes attribute is not supported")
    if text("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ONNXImportError(f"keep_aspect_ratio_policy {text('keep_aspect_ratio_policy', '')!r} is not supported "
                              "(stretch)")
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None
    scales, sizes = (opt(1), None) if node.op_type == "Upsample" else (opt(2), opt(3))
    if sizes is not None and not (isinstance(sizes, np.ndarray) and sizes.size == 0):
        out = im.shape_list(sizes, "sizes")
        if len(out) != nd:
            raise ONNXImportError(f"sizes {out} must have {nd} values")
        out = out[:2] + [1] + out[2:] if nd == 3 else out
        for d, o in zip(x.shape[:2], out[:2]):
            if isinstance(_simp(d), int) and isinstance(o, int) and _simp(d) != o:
                raise ONNXImportError(f"sizes {out} may not change N or C of {[_simp(v) for v in x.shape]}")
        hw = out[2:]
    elif scales is not None:
        sc = [float(v) for v in np.asarray(im.static(scales, "scales")).ravel()]
        if len(sc) != nd or sc[0] != 1.0 or sc[1] != 1.0:
            raise ONNXImportError(f"scales {sc} must have {nd} values with 1 for N and C")
        sc = sc[:2] + [1.0] + sc[2:] if nd == 3 else sc
        try:
            hw = [exact_scaled_size(d, f) for d, f in zip(x.shape[2:], sc[2:])]
        except ValueError as e:
            raise ONNXImportError(str(e)) from e
    else:
        raise ONNXImportError("Resize needs scales or sizes")
    if mode == "nearest":
        y = x
        for k, n_out in enumerate(hw):
            n_in = _simp(x.shape[2 + k])
            n_out = _simp(n_out)
            if _simp(n_in - n_out) == 0:
                continue    # every coordinate transformation maps i to i
            y = op.take(y, _nearest_source_index(im, n_in, n_out, coord, nearest), axis=2 + k)
    elif mode == "cubic":
        y = op.interpolate(x, size=hw, mode="bicubic", coordinate_transformation_mode=coord,
                           cubic_alpha=float(at.get("cubic_coeff_a", -0.75)),
                           cubic_exclude=bool(int(at.get("exclude_outside", 0))))
    else:
        y = op.interpolate(x, size=hw, mode="bilinear", coordinate_transformation_mode=coord)
    return op.squeeze(y, [2]) if nd == 3 else y


def _nearest_source_index(im, n_in, n_out, coord: str, rounding: str):
    """The int64 indices ``(n_out,)`` of the input elements that ONNX ``Resize`` in ``nearest`` mode reads
    along one axis of ``n_in`` elements resized to ``n_out`` (ints, or symbolic dims), computed exactly.

    The spec (Resize-19) maps output index ``i`` to the input coordinate ``x`` (scale ``n_out / n_in``;
    given ``scales`` equal that ratio here, :func:`builder.ir.op.exact_scaled_size`): ``asymmetric``
    ``i * n_in / n_out``; ``half_pixel`` ``(i + 1/2) * n_in / n_out - 1/2``; ``pytorch_half_pixel`` the
    same, 0 when ``n_out == 1``; ``align_corners`` ``i * (n_in - 1) / (n_out - 1)`` (0 when ``n_out ==
    1``). ``x`` is a fraction ``num / den`` of integers, rounded by ``nearest_mode`` in integer
    arithmetic: ``floor``, ``ceil``, ``round_prefer_floor`` (halves down: ``ceil(x - 1/2)``),
    ``round_prefer_ceil`` (halves up: ``floor(x + 1/2)``); then clamped to ``[0, n_in - 1]``. Exact
    ``.5`` ties stay ties, where float32 coordinates (``(i + 0.5) * (n_in / n_out) - 0.5``) land just
    above or below them (4 -> 6 half_pixel: ``0.5000001``, rounded up by round_prefer_floor); this
    agrees with onnxruntime wherever its float computation is exact."""
    if isinstance(n_in, int) and isinstance(n_out, int):
        i = np.arange(n_out, dtype=np.int64)
        a, b = n_in, n_out
        fdiv, where = np.floor_divide, (lambda c, u, v: u if c else v)
        big = lambda v: max(v, 1)
        clamp = lambda v: np.clip(v, 0, max(n_in - 1, 0))
        gt1 = b > 1
    else:
        def scalar(e):
            return (im.const(np.array(e, np.int64)) if isinstance(e, int)
                    else wrap_nested(symbolic_scalar(e, "int64"), "dim"))

        i = op.arange(0, n_out, 1, dtype="int64")
        a, b = scalar(n_in), scalar(n_out)
        one, zero = im.const(np.array(1, np.int64)), im.const(np.array(0, np.int64))
        fdiv, where = op.floor_divide, op.where
        big = lambda v: op.maximum(v, one)
        clamp = lambda v: op.minimum(op.maximum(v, zero), op.maximum(a - one, zero))
        gt1 = op.greater(b, one)
    if coord == "asymmetric":
        num, den = i * a, b
    elif coord == "align_corners":
        num, den = i * (a - 1), big(b - 1)
    else:
        num, den = (i * 2 + 1) * a - b, b * 2
        if coord == "pytorch_half_pixel":
            num = where(gt1, num, i * 0)
    if rounding == "floor":
        idx = fdiv(num, den)
    elif rounding == "ceil":
        idx = -fdiv(-num, den)
    elif rounding == "round_prefer_ceil":
        idx = fdiv(num * 2 + den, den * 2)
    elif rounding == "round_prefer_floor":
        idx = -fdiv(den - num * 2, den * 2)
    else:
        raise ONNXImportError(f"nearest_mode {rounding!r} is not supported")
    idx = clamp(idx)
    return im.const(np.ascontiguousarray(idx, dtype=np.int64)) if isinstance(idx, np.ndarray) else idx


@_register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(im, node, ins, at):
    """ONNX ``GlobalAveragePool`` / ``GlobalMaxPool`` (opset 1+): the mean / max over every spatial dim of ``(N, C,
    *spatial)``, kept as 1. Raises ONNXImportError for an input of fewer than 3 dims."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) < 3:
        raise ONNXImportError(f"{node.op_type} needs an (N, C, *spatial) input, got a {len(x.shape)}-d one")
    fn = op.mean if node.op_type == "GlobalAveragePool" else op.max
    return fn(x, axis=list(range(2, len(x.shape))), keepdims=True)
