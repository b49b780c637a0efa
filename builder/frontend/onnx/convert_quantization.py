"""Converters of the quantized ONNX ops: (Dynamic)QuantizeLinear / DequantizeLinear, the integer
MatMulInteger / ConvInteger (exact int32 sums), QLinearMatMul / QLinearConv, onnxruntime's
``com.microsoft:QGemm`` and ``com.microsoft:MatMulNBits`` (4-bit weights kept 4-bit).
"""
from __future__ import annotations

import numpy as np

from core.layout import tile_rows

from ...ir.op.quantize import ROW_TILE
from ...nn import op
from .convert_linear import _matmul_operands
from .errors import ONNXImportError
from .proto import _np_dtype_name
from .registry import _CONVERTERS, _check_inputs, _register
from .shape_folding import _simp


_QRANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
           "int32": (-2 ** 31, 2 ** 31 - 1)}


def _q_param(v, axis: int, ndim: int):
    """A scale / zero point shaped to broadcast against an ``ndim``-d value: a scalar (per tensor) as it is,
    a 1-d one (per ``axis``) with ones elsewhere."""
    shape = list(np.shape(v)) if isinstance(v, np.ndarray) else list(v.shape)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return v.reshape(()) if isinstance(v, np.ndarray) else op.reshape(v, [])
    if len(shape) != 1:
        raise ONNXImportError(f"a scale / zero point of shape {shape}: blocked quantization is not supported")
    target = [1] * ndim
    target[axis % ndim] = shape[0]
    return v.reshape(target) if isinstance(v, np.ndarray) else op.reshape(v, target)


def _dequantize(im, x, scale, zero_point, axis: int):
    """``(x - zero_point) * scale`` in the scale's dtype; folded when every operand is static (a quantized
    weight becomes a float constant, which the linear kernels then take)."""
    nd = len(im.shape_of(x))
    sc = _q_param(scale, axis, nd)
    zp = None if zero_point is None else _q_param(zero_point, axis, nd)
    out_dt = str(scale.dtype) if isinstance(scale, np.ndarray) else scale.dtype
    if all(isinstance(v, np.ndarray) or v is None for v in (x, sc, zp)):
        q = x.astype(np.float64) - (0.0 if zp is None else zp.astype(np.float64))
        return (q * sc.astype(np.float64)).astype(out_dt)
    q = op.astype(im.tensor(x), out_dt)
    if zp is not None:
        q = op.subtract(q, op.astype(im.tensor(zp), out_dt))
    return op.multiply(q, im.tensor(sc) if not isinstance(sc, np.ndarray) else im.const(sc.astype(out_dt)))


def _quantize(im, x, scale, zero_point, axis: int, dtype: str):
    """``saturate(round_half_even(x / scale) + zero_point)`` as ``dtype`` (ONNX ``QuantizeLinear``)."""
    if dtype not in _QRANGE:
        raise ONNXImportError(f"quantizing to {dtype} is not supported (uint8, int8, uint16, int16, int32)")
    lo, hi = _QRANGE[dtype]
    t = im.tensor(x)
    nd = len(t.shape)
    sc = im.tensor(_q_param(scale, axis, nd))
    q = op.round(op.divide(t, op.astype(sc, t.dtype) if sc.dtype != t.dtype else sc))
    if zero_point is not None:
        q = op.add(q, op.astype(im.tensor(_q_param(zero_point, axis, nd)), t.dtype))
    return op.astype(op.minimum(op.maximum(q, float(lo)), float(hi)), dtype)


@_register("DequantizeLinear")
def _dequantize_linear(im, node, ins, at):
    """``DequantizeLinear``: per tensor or per ``axis`` (a 1-d scale); ``block_size`` (opset 21) is refused."""
    _check_inputs(ins, node)
    if int(at.get("block_size", 0)):
        raise ONNXImportError("blocked dequantization (block_size) is not supported")
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
    y = _dequantize(im, ins[0], ins[1], zp, int(at.get("axis", 1)))
    if int(at.get("output_dtype", 0)):   # (opset 23: another float type than the scale's)
        dt = _np_dtype_name(int(at["output_dtype"]))
        y = y.astype(dt) if isinstance(y, np.ndarray) else (y if y.dtype == dt else op.astype(y, dt))
    return y


@_register("QuantizeLinear")
def _quantize_linear(im, node, ins, at):
    """``QuantizeLinear`` to the zero point's dtype (uint8 without one, or ``output_dtype``), per tensor or per
    ``axis``; the rounding is half to even and the result saturates, as the spec says."""
    _check_inputs(ins, node)
    if int(at.get("block_size", 0)):
        raise ONNXImportError("blocked quantization (block_size) is not supported")
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else None
    dtype = im.dtype_of(zp) if zp is not None else (
        _np_dtype_name(int(at["output_dtype"])) if int(at.get("output_dtype", 0)) else "uint8")
    return _quantize(im, ins[0], ins[1], zp, int(at.get("axis", 1)), dtype)


@_register("DynamicQuantizeLinear")
def _dynamic_quantize_linear(im, node, ins, at):
    """``DynamicQuantizeLinear`` (what onnxruntime's dynamic quantization puts before each ``MatMulInteger``):
    ``scale = (max(0, max x) - min(0, min x)) / 255``, ``zero_point = saturate(round(-min(0, min x) /
    scale))``, ``y = saturate(round(x / scale) + zero_point)``, all uint8 (an all-zero ``x`` has scale 0 and
    quantizes to 0)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    lo = op.minimum(op.min(x), 0.0)
    hi = op.maximum(op.max(x), 0.0)
    scale = op.divide(op.subtract(hi, lo), 255.0)
    safe = op.where(op.equal(scale, 0.0), im.const(np.ones((), np.float32)), scale)
    zp = op.minimum(op.maximum(op.round(op.divide(op.negative(lo), safe)), 0.0), 255.0)
    y = op.minimum(op.maximum(op.add(op.round(op.divide(x, safe)), zp), 0.0), 255.0)
    return op.astype(y, "uint8"), scale, op.astype(zp, "uint8")


def _integer_operand(im, v, zp, dtype: str = "float32"):
    """``v - zp`` as ``dtype`` (float32, exact for 8-bit values, or int32): a folded constant when both are
    static."""
    if isinstance(v, np.ndarray) and (zp is None or isinstance(zp, np.ndarray)):
        return (v.astype(np.int64) - (0 if zp is None else zp.astype(np.int64))).astype(dtype)
    t = op.astype(im.tensor(v), dtype)
    return t if zp is None else op.subtract(t, op.astype(im.tensor(zp), dtype))


#: Every integer of magnitude up to 2**24 is a float32: sums of 8-bit products below it are exact in float32.
_F32_EXACT_INTEGERS = 1 << 24


def _integer_bound(im, v, zp) -> int:
    """The largest ``|v - zp|`` an 8-bit operand ``v`` can give: from its values when it is a constant (and so is
    ``zp``), else from its dtype's range and the zero point's values (or its dtype's range)."""
    if isinstance(v, np.ndarray) and (zp is None or isinstance(zp, np.ndarray)):
        d = v.astype(np.int64) - (0 if zp is None else zp.astype(np.int64))
        return max(1, int(np.abs(d).max(initial=0)))
    info = np.iinfo(im.dtype_of(v))
    if zp is None:
        return max(abs(info.min), abs(info.max))
    zinfo = np.iinfo(im.dtype_of(zp))
    zlo, zhi = (int(zp.min()), int(zp.max())) if isinstance(zp, np.ndarray) else (zinfo.min, zinfo.max)
    return max(info.max - zlo, zhi - info.min)


def _exact_integer_sum(im, k: int, per_product: int, chunk_product):
    """The int32 sum of integer products over ``k`` terms, exact: ``chunk_product(lo, hi)`` is the float32 sum of the
    terms ``lo:hi`` (an importer value); the terms are split into runs whose sums stay within float32's exact
    integers (``run * per_product <= 2**24``, ``per_product`` the largest ``|product|``), each rounded to int32
    and the runs added in int32 (the spec's int32 accumulation; float32 over all ``k`` terms rounds past 2**24)."""
    run = max(1, _F32_EXACT_INTEGERS // max(1, per_product))
    total = None
    for lo in range(0, k, run):
        y = chunk_product(lo, min(k, lo + run))
        y = op.astype(op.round(im.tensor(y)), "int32")
        total = y if total is None else op.add(total, y)
    return total


def _zero_point_of(v, which: str, ndim: int):
    """The zero point ``v`` of the integer MatMul / Conv input ``which`` (``"a"`` or ``"b"``): None when absent, a
    scalar (per tensor) as 0-d, and for ``b`` a 1-D one (per output column) shaped to broadcast against the
    ``ndim``-d product. Raises ONNXImportError for a per-row zero point of ``a`` or a zero point of more than one
    dim."""
    if v is None:
        return None
    if isinstance(v, np.ndarray) and v.size > 1:
        if v.ndim != 1 or which == "a":
            raise ONNXImportError(f"a per-row zero point of {which} is not supported")
        return v.reshape([1] * (ndim - 1) + [v.size])   # per output column of b
    return v.reshape(()) if isinstance(v, np.ndarray) else op.reshape(v, [])


@_register("MatMulInteger")
def _matmul_integer(im, node, ins, at):
    """``MatMulInteger``: ``(A - a_zero_point) @ (B - b_zero_point)`` as int32, exactly. The 8-bit operands minus
    their zero points are exact in float32 and the product runs on the float kernels (a constant ``B`` is the
    linear kernels' weight), over runs of K short enough that no float32 sum passes 2**24
    (:func:`_exact_integer_sum`; one run for K up to 2**24 / (255 * 128) = 514 with uint8 x int8 operands, or
    from the constants' own values), added in int32. A symbolic K has no static runs: the product runs in
    int32 (the spec's accumulator, exact; wrapping past 2**31 as int32 sums do)."""
    _check_inputs(ins, node)
    a, b = ins[0], ins[1]
    nb = len(im.shape_of(b))
    za, zb = (ins[2] if len(ins) > 2 else None), (ins[3] if len(ins) > 3 else None)
    a_zp = _zero_point_of(za, "a", 1)
    b_zp = _zero_point_of(zb, "b", nb)
    k = _simp(im.shape_of(a)[-1])
    if not isinstance(k, int):   # (a symbolic K: no static runs; the product in int32, the spec's accumulator)
        return _matmul_operands(im, _integer_operand(im, a, a_zp, "int32"), _integer_operand(im, b, b_zp, "int32"))
    fa, fb = _integer_operand(im, a, a_zp), _integer_operand(im, b, b_zp)
    bk = 0 if nb == 1 else nb - 2

    def part(lo, hi):
        ca = fa[..., lo:hi] if isinstance(fa, np.ndarray) else op.strided_slice(fa, [len(im.shape_of(a)) - 1], [lo], [hi])
        cb = (fb[lo:hi] if nb == 1 else fb[..., lo:hi, :]) if isinstance(fb, np.ndarray) \
            else op.strided_slice(fb, [bk], [lo], [hi])
        return _matmul_operands(im, ca, cb)

    return _exact_integer_sum(im, k, _integer_bound(im, a, za) * _integer_bound(im, b, zb), part)


@_register("QLinearMatMul")
def _qlinear_matmul(im, node, ins, at):
    """``QLinearMatMul``: ``quantize(dequantize(a) @ dequantize(b), y_scale, y_zero_point)`` in float32 (a
    constant ``b`` folds to a float weight for the linear kernels); the integer product onnxruntime rounds
    once agrees within one step of the output's quantization where a value lands on a rounding tie."""
    _check_inputs(ins, node)
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = ins[:8]
    fa = _dequantize(im, a, a_s, a_zp, 1)
    fb = _dequantize(im, b, b_s, b_zp, -1)
    return _quantize(im, _matmul_operands(im, fa, fb), y_s, y_zp, 1, im.dtype_of(y_zp))


@_register("QLinearConv")
def _qlinear_conv(im, node, ins, at):
    """``QLinearConv``: the float ``Conv`` of the dequantized input and weight (per output channel scales
    allowed) plus the int32 bias at scale ``x_scale * w_scale``, quantized to ``y_zero_point``'s dtype."""
    _check_inputs(ins, node)
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = ins[:8]
    fx = _dequantize(im, x, x_s, x_zp, 1)
    fw = _dequantize(im, w, w_s, w_zp, 0)
    conv_ins = [fx, fw]
    if len(ins) > 8 and ins[8] is not None:
        xs = x_s if isinstance(x_s, np.ndarray) else None
        ws = w_s if isinstance(w_s, np.ndarray) else None
        if xs is None or ws is None:
            raise ONNXImportError("a bias needs constant x_scale and w_scale")
        conv_ins.append(_dequantize(im, ins[8], (xs.astype(np.float64) * ws.astype(np.float64)).astype(xs.dtype)
                                    .reshape(-1), None, 0))
    y = _CONVERTERS["Conv"](im, node, conv_ins, at)
    return _quantize(im, y, y_s, y_zp, 1, im.dtype_of(y_zp))


@_register("com.microsoft:QGemm")
def _qgemm(im, node, ins, at):
    """onnxruntime's ``QGemm`` (com.microsoft; what its static quantization writes for ``Gemm`` in the
    QOperator format): ``alpha * dequantize(A) @ dequantize(B) + C * a_scale * b_scale`` (``transA`` /
    ``transB``), quantized by ``y_scale`` / ``y_zero_point`` when given, else float."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    a, a_s, a_zp, b, b_s, b_zp = ins[:6]
    c, y_s, y_zp = opt(6), opt(7), opt(8)
    fa = _dequantize(im, a, a_s, a_zp, 1)
    if int(at.get("transA", 0)):
        fa = op.permute_dims(im.tensor(fa), [1, 0]) if not isinstance(fa, np.ndarray) else fa.T
    trans_b = int(at.get("transB", 0))
    fb = _dequantize(im, b, b_s, b_zp, 0 if trans_b else 1)
    if trans_b:
        fb = fb.T if isinstance(fb, np.ndarray) else op.permute_dims(fb, [1, 0])
    alpha = float(at.get("alpha", 1.0))
    if alpha != 1.0:
        fb = (fb * np.float32(alpha)).astype(fb.dtype) if isinstance(fb, np.ndarray) else op.multiply(fb, alpha)
    y = _matmul_operands(im, fa, fb)
    if c is not None:
        if not (isinstance(a_s, np.ndarray) and isinstance(b_s, np.ndarray)):
            raise ONNXImportError("a bias needs constant a_scale and b_scale")
        bias_scale = (a_s.astype(np.float64) * b_s.astype(np.float64) * alpha).astype(np.float32).reshape(-1)
        y = op.add(im.tensor(y), im.tensor(_dequantize(im, c, bias_scale, None, -1)))
    return y if y_s is None else _quantize(im, y, y_s, y_zp, 1, im.dtype_of(y_zp) if y_zp is not None else "uint8")


@_register("ConvInteger")
def _conv_integer(im, node, ins, at):
    """``ConvInteger``: ``Conv(x - x_zero_point, w - w_zero_point)`` as int32, exactly: in float32 on the float
    convolution kernels, over runs of each group's input channels short enough that no float32 sum passes 2**24
    (:func:`_exact_integer_sum`: channels x kernel size x the largest product), added in int32. A symbolic
    channel count (or kernel) has no static runs: the convolution runs in int32, the spec's accumulator."""
    _check_inputs(ins, node)
    x, w = ins[0], ins[1]
    zx, zw = (ins[2] if len(ins) > 2 else None), (ins[3] if len(ins) > 3 else None)
    x_zp = _zero_point_of(zx, "a", 1)
    w_zp = zw
    if isinstance(w_zp, np.ndarray) and w_zp.size > 1:
        w_zp = w_zp.reshape([-1] + [1] * (len(im.shape_of(w)) - 1))
    wshape = [_simp(d) for d in im.shape_of(w)]
    if not all(isinstance(d, int) for d in wshape[1:]):   # (a symbolic kernel: the convolution in int32)
        return _CONVERTERS["Conv"](im, node, [_integer_operand(im, x, x_zp, "int32"),
                                              _integer_operand(im, w, w_zp, "int32")], at)
    fx, fw = _integer_operand(im, x, x_zp), _integer_operand(im, w, w_zp)
    cg, window = wshape[1], int(np.prod(wshape[2:]))
    groups = int(at.get("group", 1))
    per = _integer_bound(im, x, zx) * _integer_bound(im, w, zw.reshape(-1) if isinstance(zw, np.ndarray) else zw)
    run = _F32_EXACT_INTEGERS // max(1, per * window)   # input channels per run

    def part(lo, hi):
        if (lo, hi) == (0, cg):
            return _CONVERTERS["Conv"](im, node, [fx, fw], at)
        idx = np.concatenate([np.arange(g * cg + lo, g * cg + hi) for g in range(groups)]).astype(np.int64)
        cx = fx[:, idx] if isinstance(fx, np.ndarray) else op.take(im.tensor(fx), im.const(idx), axis=1)
        cw = fw[:, lo:hi] if isinstance(fw, np.ndarray) else op.strided_slice(im.tensor(fw), [1], [lo], [hi])
        return _CONVERTERS["Conv"](im, node, [cx, cw], at)

    if run >= cg:
        return op.astype(op.round(im.tensor(part(0, cg))), "int32")
    return _exact_integer_sum(im, cg, per * window, part)   # (a term: one input channel's window)


@_register("com.microsoft:MatMulNBits")
def _matmul_nbits(im, node, ins, at):
    """onnxruntime's ``MatMulNBits`` (com.microsoft; 4-bit weights in blocks along K): ``y = A @ B^T``
    with ``B`` (N, K / block, block / 2) uint8, value ``2j`` of a block in the low nibble of byte ``j``,
    dequantized ``(q - zero_point) * scale``. Without ``zero_points`` (ORT's default 8) the bytes of a row
    read as little-endian uint32 words are exactly :func:`builder.nn.op.group_dequantize`'s packing, so
    the weight stays 4-bit (``bits=4, group_size=block, zero_point=8``, row tiles when N allows) and
    runs on the quantized kernels; ``accuracy_level`` 4 (int8 activations in ORT) maps to
    ``activation_quantization="int8"``. Per-block ``zero_points`` are dequantized here to a float
    weight (exact). ``g_idx`` is not supported."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    b = im.static(ins[1], "B")
    scales = im.static(ins[2], "scales")
    zp = ins[3] if len(ins) > 3 else None
    if len(ins) > 4 and ins[4] is not None:
        raise ONNXImportError("MatMulNBits with g_idx is not supported")
    bias = ins[5] if len(ins) > 5 else None
    k, n = int(at.get("K", 0)), int(at.get("N", 0))
    bits, block = int(at.get("bits", 4)), int(at.get("block_size", 0))
    if bits != 4:
        raise ONNXImportError(f"MatMulNBits with bits={bits} is not supported (4 only)")
    if block < 16 or block & (block - 1):
        raise ONNXImportError(f"block_size must be a power of 2 >= 16, got {block}")
    nblocks = -(-k // block)
    if b.dtype != np.uint8 or b.size != n * nblocks * block // 2 or scales.size != n * nblocks:
        raise ONNXImportError(f"B {b.shape} {b.dtype} / scales {scales.shape} do not fit K={k}, N={n}, "
                              f"block_size={block}")
    if _simp(x.shape[-1]) != k and isinstance(_simp(x.shape[-1]), int):
        raise ONNXImportError(f"A's last dim {_simp(x.shape[-1])} is not K={k}")
    dt = x.dtype
    scale = scales.reshape(n, nblocks).astype(dt)
    if zp is None:
        words = np.ascontiguousarray(b.reshape(n, nblocks * block // 2)).view(np.uint32)
        tile = ROW_TILE if n % ROW_TILE == 0 else 0
        level = int(at.get("accuracy_level", 0))
        w = op.group_dequantize(im.const(tile_rows(words, tile)), im.const(tile_rows(scale, tile)), bits=4,
                                group_size=block, zero_point=8, in_features=k,
                                activation_quantization="int8" if level == 4 else "none", row_tile=tile)
    else:
        zps = im.static(zp, "zero_points")
        if zps.dtype == np.uint8 and zps.size == n * (-(-nblocks // 2)):
            zb = zps.reshape(n, -1)
            zvals = np.stack([zb & 0xF, zb >> 4], axis=-1).reshape(n, -1)[:, :nblocks].astype(np.float32)
        elif zps.size == n * nblocks:
            zvals = zps.reshape(n, nblocks).astype(np.float32)
        else:
            raise ONNXImportError(f"zero_points {zps.shape} {zps.dtype} do not fit N={n} and {nblocks} blocks")
        q = b.reshape(n, nblocks, block // 2)
        vals = np.stack([q & 0xF, q >> 4], axis=-1).reshape(n, nblocks, block).astype(np.float32)
        deq = (vals - zvals[..., None]) * scales.reshape(n, nblocks, 1).astype(np.float32)
        w = im.const(np.ascontiguousarray(deq.reshape(n, nblocks * block)[:, :k]).astype(dt))
    y = op.matmul(x, op.permute_dims(w, [1, 0]))
    if bias is not None:
        y = op.add(y, im.tensor(bias.astype(dt) if isinstance(bias, np.ndarray) else bias))
    return y
