"""Converters of the elementwise ONNX ops: unary math and activations, broadcast arithmetic (folded on
static and symbolic values), comparisons and logic, Where, Cast, Clip, the variadic Max / Min / Sum / Mean.
"""
from __future__ import annotations

import numpy as np

from ...ir import expr as E
from ...nn import op
from ...nn.core import Tensor
from ..torch_ops.elementwise import acosh, asinh, atanh, cosh, sinh   # (torch-free compositions shared with the torch importers)
from .errors import ONNXImportError
from .importer import _Importer
from .proto import _np_dtype_name
from .registry import _check_inputs, _register
from .shape_folding import _fold_ok, _int_div, _nonneg, _objects, _shape_value, _sign, _simp
from .values import _Sym


_UNARY = {"Relu": op.relu, "Sigmoid": op.sigmoid, "Tanh": op.tanh, "Exp": op.exp, "Log": op.log,
          "Sqrt": op.sqrt, "Erf": op.erf, "Neg": op.negative, "Abs": op.abs, "Sin": op.sin, "Cos": op.cos,
          "Floor": op.floor, "Ceil": op.ceil, "Round": op.round, "Sign": op.sign, "Tan": op.tan, "Atan": op.atan,
          "Asin": op.asin, "Acos": op.acos}


#: The unary ops that are exact on every dtype, folded when their input is a constant (shape arithmetic
#: such as ``ceil(h / p) * p`` written in float): their numpy forms.
_UNARY_EXACT_NP = {"Relu": lambda x: np.maximum(x, 0).astype(x.dtype), "Neg": np.negative, "Abs": np.abs,
                   "Sign": np.sign, "Floor": np.floor, "Ceil": np.ceil, "Round": np.round}


@_register(*_UNARY)
def _unary(im: _Importer, node, ins, at):
    """ONNX unary math ops (``Relu``, ``Sigmoid``, ``Exp``, ``Sqrt``, ``Neg``, ``Abs``, ``Floor``, ... of
    :data:`_UNARY`, opset 13): ``Neg`` / ``Abs`` of symbolic values folded where the sign is known, the exact ones
    (:data:`_UNARY_EXACT_NP`) of constants folded, the rest as the ``nn.op`` function; same shape and dtype."""
    _check_inputs(ins, node)
    (x,) = ins
    if isinstance(x, _Sym) and node.op_type in ("Neg", "Abs"):
        f = (lambda e: -e) if node.op_type == "Neg" else (lambda e: e if _nonneg(e) else None)
        vals = np.vectorize(f, otypes=[object])(x.vals)
        if not any(v is None for v in vals.ravel()):
            return _shape_value(vals, x.dtype)
    if isinstance(x, np.ndarray) and node.op_type in _UNARY_EXACT_NP \
            and (x.dtype.kind in "iu" or (x.dtype.kind == "f" and _fold_ok(x.shape))):
        return _UNARY_EXACT_NP[node.op_type](x).astype(x.dtype)
    return _UNARY[node.op_type](im.tensor(x))


_HYPERBOLIC = {"Sinh": sinh, "Cosh": cosh, "Asinh": asinh, "Acosh": acosh, "Atanh": atanh}


@_register(*_HYPERBOLIC)
def _hyperbolic(im, node, ins, at):
    """The hyperbolic functions and their inverses as compositions of exp / log / sqrt (the torch
    translations': :func:`builder.frontend.torch_ops.elementwise.asinh` ...)."""
    _check_inputs(ins, node)
    return _HYPERBOLIC[node.op_type](None, im.tensor(ins[0]))


@_register("HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish")
def _activation(im, node, ins, at):
    """The ONNX activations with attributes (their spec defaults), as :mod:`builder.nn.op`'s composites."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    kind = node.op_type
    if kind == "HardSigmoid":
        return op.hardsigmoid(x, float(at.get("alpha", 0.2)), float(at.get("beta", 0.5)))
    if kind == "HardSwish":
        return op.hardswish(x)
    if kind == "LeakyRelu":
        return op.leaky_relu(x, float(at.get("alpha", 0.01)))
    if kind == "Elu":
        return op.elu(x, float(at.get("alpha", 1.0)))
    if kind == "Selu":
        return op.elu(x, float(at.get("alpha", 1.67326319217681884765625)),
                      float(at.get("gamma", 1.05070102214813232421875)))
    if kind == "Celu":
        return op.celu(x, float(at.get("alpha", 1.0)))
    if kind == "Softplus":
        return op.softplus(x, 1.0, float("inf"))
    if kind == "Softsign":
        return op.softsign(x)
    return op.mish(x)


@_register("PRelu")
def _prelu(im, node, ins, at):
    """``PRelu``: ``x`` where ``x >= 0``, else ``slope * x`` (``slope`` broadcast to ``x``)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    slope = ins[1].astype(x.dtype) if isinstance(ins[1], np.ndarray) else ins[1]
    return op.where(op.greater_equal(x, 0.0), x, op.multiply(x, im.tensor(slope)))


@_register("Reciprocal")
def _reciprocal(im, node, ins, at):
    """ONNX ``Reciprocal`` (opset 13): ``1 / x`` in ``x``'s dtype, same shape."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    return op.divide(im.const(np.ones((), dtype=x.dtype)), x)


@_register("Gelu")
def _gelu(im, node, ins, at):
    """ONNX ``Gelu`` (opset 20): attribute ``approximate`` ``'none'`` (exact, erf) or ``'tanh'``. Raises
    ONNXImportError for another value."""
    _check_inputs(ins, node)
    approx = at.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ONNXImportError(f"unknown approximate={approx!r}")
    return op.gelu(im.tensor(ins[0]), approximate=None if approx == "none" else "tanh")


_SYM_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b, "Div": _int_div}


_NP_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": None, "Pow": None,
              "Max": np.maximum, "Min": np.minimum}


_BINARY = {"Add": op.add, "Sub": op.subtract, "Mul": op.multiply, "Div": op.divide, "Pow": op.power,
           "Max": op.maximum, "Min": op.minimum}


@_register("Add", "Sub", "Mul", "Div", "Pow")
def _binary(im: _Importer, node, ins, at):
    """ONNX ``Add`` / ``Sub`` / ``Mul`` / ``Div`` / ``Pow`` (opset 14 / 15), multidirectional broadcasting: on
    symbolic integers as dim arithmetic (``Div`` truncating toward zero, :func:`~.shape_folding._int_div`), on
    constants folded in numpy (integer ``Div`` truncates toward zero, as ONNX says), else the ``nn.op`` function;
    ``Pow``'s exponent is cast to the base's dtype. Raises ONNXImportError for an integer division by a constant 0
    or of symbolic dims whose signs are unknown."""
    _check_inputs(ins, node)
    a, b = ins
    kind = node.op_type
    shape_like = lambda v: isinstance(v, _Sym) or isinstance(v, np.ndarray) and v.dtype.kind in "iu"
    if kind in _SYM_BINARY and shape_like(a) and shape_like(b) and (isinstance(a, _Sym) or isinstance(b, _Sym)):
        oa, ob = np.broadcast_arrays(_objects(a), _objects(b))
        vals = np.empty(oa.shape, dtype=object)
        vals.ravel()[:] = [_SYM_BINARY[kind](x, y) for x, y in zip(oa.ravel(), ob.ravel())]
        return _shape_value(vals, im.dtype_of(a))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and _fold_ok(np.broadcast_shapes(a.shape, b.shape)):
        if kind == "Div" and a.dtype.kind in "iu":
            if np.any(b == 0):
                raise ONNXImportError("integer division by zero in constants")
            return np.array([_int_div(int(x), int(y)) for x, y in zip(*[t.ravel() for t in np.broadcast_arrays(a, b)])],
                            dtype=a.dtype).reshape(np.broadcast_shapes(a.shape, b.shape))
        if kind == "Div":
            return np.divide(a, b).astype(a.dtype)
        if kind == "Pow":
            return np.power(a, b.astype(a.dtype)).astype(a.dtype)
        return _NP_BINARY[kind](a, b).astype(a.dtype)
    ta = im.tensor(a)
    if kind == "Pow" and isinstance(b, np.ndarray) and str(b.dtype) != ta.dtype:
        b = b.astype(ta.dtype)   # ONNX Pow allows an exponent of another type
    tb = im.tensor(b)
    if kind == "Pow" and isinstance(b, np.ndarray) and b.size == 1 and float(b.ravel()[0]) == 2.0:
        return op.multiply(ta, ta)
    return _BINARY[kind](ta, tb)


@_register("Mod")
def _mod(im, node, ins, at):
    """``Mod``: ``fmod=0`` the sign of the divisor (integers; ``floor_mod``), ``fmod=1`` the sign of the
    dividend (C's ``fmod``: ``a - trunc(a / b) * b``, and ``a`` itself for a finite ``a`` over an infinite
    ``b``)."""
    _check_inputs(ins, node)
    a, b = ins
    shape_like = lambda v: isinstance(v, _Sym) or isinstance(v, np.ndarray) and v.dtype.kind in "iu"
    if shape_like(a) and shape_like(b) and (isinstance(a, _Sym) or isinstance(b, _Sym)):
        # shape arithmetic ((w - h % w) % w: padding to a multiple): dims are never negative, so
        # floor and C modulo agree
        oa, ob = np.broadcast_arrays(_objects(a), _objects(b))
        vals = np.empty(oa.shape, dtype=object)
        vals.ravel()[:] = [_mod_value(x, y) for x, y in zip(oa.ravel(), ob.ravel())]
        return _shape_value(vals, im.dtype_of(a))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype.kind in "iu" and b.dtype.kind in "iu" \
            and _fold_ok(np.broadcast_shapes(a.shape, b.shape)):
        if np.any(b == 0):
            raise ONNXImportError("integer modulo by zero in constants")
        return (np.fmod(a, b) if int(at.get("fmod", 0)) else np.mod(a, b)).astype(a.dtype)
    a, b = im.tensor(a), im.tensor(b)
    if int(at.get("fmod", 0)):
        if a.dtype.startswith(("int", "uint")):
            return op.subtract(a, op.multiply(op.divide(a, b), b))      # integer divide truncates
        r = op.subtract(a, op.multiply(op.trunc(op.divide(a, b)), b))
        # C's fmod of a finite dividend by an infinite divisor is the dividend (C11 F.10.7.1), where the
        # formula gives 0 * inf = NaN
        return op.where(op.equal(op.abs(b), float("inf")), op.where(op.less(op.abs(a), float("inf")), a, r), r)
    if E.is_float_dtype(a.dtype):
        raise ONNXImportError("Mod of floats needs fmod=1 (the ONNX spec)")
    return op.floor_mod(a, b)


def _mod_value(x, y):
    """``x % y`` of two shape values (ints or int64 expressions of the symbolic dims)."""
    if isinstance(x, int) and isinstance(y, int):
        if y == 0:
            raise ONNXImportError("modulo by zero in shape arithmetic")
        return x % y
    return E.simplify(E.convert(x) % E.convert(y))


@_register("Shrink", "ThresholdedRelu")
def _shrink(im, node, ins, at):
    """``Shrink``: ``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0; ``ThresholdedRelu``:
    ``x`` above ``alpha``, else 0."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    zero = im.const(np.zeros((), x.dtype))
    if node.op_type == "ThresholdedRelu":
        return op.where(op.greater(x, float(at.get("alpha", 1.0))), x, zero)
    lambd, bias = float(at.get("lambd", 0.5)), float(at.get("bias", 0.0))
    return op.where(op.less(x, -lambd), op.add(x, bias), op.where(op.greater(x, lambd), op.subtract(x, bias), zero))


@_register("Sum", "Mean")
def _sum_mean(im, node, ins, at):
    """Variadic ``Sum`` / ``Mean`` with numpy broadcasting."""
    _check_inputs(ins, node)
    out = im.tensor(ins[0])
    for v in ins[1:]:
        out = op.add(out, im.tensor(v))
    return op.divide(out, float(len(ins))) if node.op_type == "Mean" and len(ins) > 1 else out


@_register("Max", "Min")
def _variadic(im, node, ins, at):
    """ONNX ``Max`` / ``Min`` (opset 13) of one or more inputs, broadcast: folded on constants, else a chain of
    ``maximum`` / ``minimum``."""
    _check_inputs(ins, node)
    if all(isinstance(v, np.ndarray) for v in ins) and _fold_ok(np.broadcast_shapes(*[v.shape for v in ins])):
        out = ins[0]
        for v in ins[1:]:
            out = _NP_BINARY[node.op_type](out, v)
        return out
    out = im.tensor(ins[0])
    for v in ins[1:]:
        out = _BINARY[node.op_type](out, im.tensor(v))
    return out


_CMP = {"Equal": (op.equal, lambda s: s == 0), "Less": (op.less, lambda s: s < 0),
        "LessOrEqual": (op.less_equal, lambda s: s <= 0), "Greater": (op.greater, lambda s: s > 0),
        "GreaterOrEqual": (op.greater_equal, lambda s: s >= 0)}


@_register(*_CMP)
def _compare(im, node, ins, at):
    """ONNX ``Equal`` / ``Less`` / ``LessOrEqual`` / ``Greater`` / ``GreaterOrEqual`` (opset 13 / 16): a bool tensor of
    the broadcast shape (static, symbolic and tensor values alike); a comparison of symbolic dims is decided at
    import time or raises ONNXImportError."""
    _check_inputs(ins, node)
    a, b = ins
    fn, decide = _CMP[node.op_type]
    if not isinstance(a, Tensor) and not isinstance(b, Tensor) and (isinstance(a, _Sym) or isinstance(b, _Sym)):
        oa, ob = np.broadcast_arrays(_objects(a), _objects(b))
        return np.array([decide(_sign(_simp(x), _simp(y), node.op_type)) for x, y in zip(oa.ravel(), ob.ravel())],
                        dtype=bool).reshape(oa.shape)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and _fold_ok(np.broadcast_shapes(a.shape, b.shape)):
        return {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
                "GreaterOrEqual": np.greater_equal}[node.op_type](a, b)
    return fn(im.tensor(a), im.tensor(b))


@_register("And", "Or", "Xor", "Not")
def _logical(im, node, ins, at):
    """ONNX ``And`` / ``Or`` / ``Xor`` / ``Not`` (opset 7 / 1) of bool tensors, broadcast; folded on constants."""
    _check_inputs(ins, node)
    if all(isinstance(v, np.ndarray) for v in ins) and _fold_ok(*[v.shape for v in ins]):
        f = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not}[node.op_type]
        return f(*ins)
    t = [im.tensor(v) for v in ins]
    true, false = im.const(np.array(True)), im.const(np.array(False))
    if node.op_type == "Not":
        return op.where(t[0], false, true)
    if node.op_type == "And":
        return op.where(t[0], t[1], false)
    if node.op_type == "Or":
        return op.where(t[0], true, t[1])
    return op.not_equal(t[0], t[1])


@_register("IsInf")
def _isinf(im, node, ins, at):
    """``IsInf`` (``detect_positive`` / ``detect_negative``, both on by default); integers are never inf."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    pos, neg = int(at.get("detect_positive", 1)), int(at.get("detect_negative", 1))
    if not E.is_float_dtype(x.dtype) or not (pos or neg):
        return op.not_equal(x, x) if not E.is_float_dtype(x.dtype) else op.less(x, float("-inf"))   # all False
    big = op.greater(op.abs(x), float(np.finfo(np.float32).max) if x.dtype != "float64" else float(np.finfo(np.float64).max))
    if pos and neg:
        return big
    return op.where(big, op.greater(x, 0.0) if pos else op.less(x, 0.0), big)


@_register("IsNaN")
def _isnan(im, node, ins, at):
    """ONNX ``IsNaN`` (opset 20): ``x != x`` (all False for a dtype without NaN), a bool tensor of ``x``'s shape."""
    _check_inputs(ins, node)
    x = ins[0]
    if isinstance(x, np.ndarray):
        return np.isnan(x)
    x = im.tensor(x)
    if x.dtype not in ("float16", "float32", "float64"):
        return im.const(np.zeros([int(d) for d in x.shape], dtype=bool)) if all(
            isinstance(d, int) for d in x.shape) else op.not_equal(x, x)
    return op.not_equal(x, x)   # NaN is the only value unequal to itself (no nnan fast-math in codegen)


@_register("Where")
def _where(im, node, ins, at):
    """ONNX ``Where`` (opset 16): ``x`` where ``condition`` else ``y``, broadcast; folded on a constant condition over
    non-tensor values (static, symbolic and tensor values alike)."""
    _check_inputs(ins, node)
    c, x, y = ins
    if isinstance(c, np.ndarray) and not isinstance(x, Tensor) and not isinstance(y, Tensor) \
            and _fold_ok(np.broadcast_shapes(c.shape, im.shape_of(x), im.shape_of(y))):
        if isinstance(x, _Sym) or isinstance(y, _Sym):
            vals = np.where(c, _objects(x), _objects(y))
            return _shape_value(np.asarray(vals, dtype=object), im.dtype_of(x))
        return np.where(c, x, y).astype(x.dtype)
    return op.where(im.tensor(c), im.tensor(x), im.tensor(y))


@_register("Cast", "CastLike")
def _cast(im, node, ins, at):
    """``Cast`` to ``to``; ``CastLike`` to the dtype of its second input (opset 15+, what torch's exporters
    write for a scalar's promotion)."""
    _check_inputs(ins, node)
    x = ins[0]
    dtype = im.dtype_of(ins[1]) if node.op_type == "CastLike" else _np_dtype_name(int(at["to"]))
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "f" and dtype != "bool" and np.dtype(dtype).kind in "iu":
            return np.trunc(x).astype(dtype)
        return x.astype(dtype)
    if isinstance(x, _Sym) and np.dtype(dtype).kind in "iu":
        return _Sym(x.vals, dtype)
    t = im.tensor(x)
    out = t if t.dtype == dtype else op.astype(t, dtype)
    if isinstance(x, _Sym) and np.dtype(dtype).kind == "f" and x.vals.size == 1:
        im.float_of_sym[id(out)] = (out, x)
    return out


@_register("Identity", "Dropout")
def _identity(im, node, ins, at):
    """ONNX ``Identity`` (opset 21) and ``Dropout`` (opset 13-22) in inference: the input itself; Dropout's optional
    ``mask`` output is all True. Raises ONNXImportError for a ``training_mode`` that is not a constant false."""
    _check_inputs(ins, node)
    x = ins[0]
    if node.op_type == "Dropout":
        if len(ins) > 2 and ins[2] is not None:
            mode = ins[2]
            if not isinstance(mode, np.ndarray) or bool(mode.ravel()[0]):
                raise ONNXImportError("training_mode must be a constant false (inference only)")
        if len(node.output) > 1 and node.output[1]:
            shape = im.shape_of(x)
            mask = (np.ones(shape, dtype=bool) if _fold_ok(shape)
                    else op.full([d for d in shape], True, dtype="bool"))
            return [x, mask]
    return x


#: The largest finite value of each float dtype (``numeric_limits<T>::max()``; ``lowest()`` is its negative).
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": float(np.finfo(np.float32).max),
              "float64": float(np.finfo(np.float64).max)}


@_register("Clip")
def _clip(im, node, ins, at):
    """``min(max(x, lo), hi)``, the bounds optional scalar inputs (opset 11 on); with ``lo > hi`` every value
    is ``hi``, as ONNX specifies. A bound left out is the dtype's ``numeric_limits<T>::lowest()`` / ``max()``
    (Clip-11 / 12 / 13's defaults), so a float ``+-inf`` becomes ``+-max`` (``FLT_MAX`` for float32, as
    onnxruntime gives) and NaN stays NaN; integers are within their own limits already."""
    _check_inputs(ins, node)
    x = ins[0]
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    t = im.tensor(x)
    limit = _FLOAT_MAX.get(t.dtype)
    for bound, fn, default in ((lo, op.maximum, None if limit is None else -limit), (hi, op.minimum, limit)):
        if bound is None:
            if default is not None:
                t = fn(t, default)
            continue
        if isinstance(bound, np.ndarray):
            if bound.size != 1:
                raise ONNXImportError(f"a Clip bound must be a scalar, got shape {bound.shape}")
            bound = bound.reshape(()).astype(t.dtype)
        b = im.tensor(bound)
        if b.dtype != t.dtype or len(b.shape) not in (0, 1):
            raise ONNXImportError(f"a Clip bound must be a scalar of the input's dtype {t.dtype}")
        t = fn(t, b)
    return t


@_register("Swish")
def _swish(im, node, ins, at):
    """``Swish`` (opset 24): ``x * sigmoid(alpha * x)``."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    alpha = float(at.get("alpha", 1.0))
    return op.silu(x) if alpha == 1.0 else op.multiply(x, op.sigmoid(op.multiply(x, alpha)))
