"""Converters of the ONNX ops that make or change shapes: Constant, Shape, Size, ConstantOfShape, Range,
Reshape, Flatten, Unsqueeze / Squeeze, Expand, EyeLike (on static, symbolic and tensor values alike).
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import arith
from ...ir import expr as E
from ...nn import op
from ...nn.core import Tensor
from .errors import ONNXImportError
from .proto import _np_dtype_name
from .registry import _check_inputs, _register
from .shape_folding import MAX_FOLD_ELEMENTS, _fold_ok, _objects, _shape_value, _sign, _simp
from .values import _Sym


@_register("EyeLike")
def _eye_like(im, node, ins, at):
    """``EyeLike``: ones on the ``k``-th diagonal of a 2-d shape like the input's, in ``dtype`` (default the
    input's)."""
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    if len(shape) != 2:
        raise ONNXImportError(f"EyeLike needs a 2-d input, got {len(shape)}-d")
    dtype = _np_dtype_name(int(at["dtype"])) if "dtype" in at else im.dtype_of(x)
    k = int(at.get("k", 0))
    rows, cols = (_simp(d) for d in shape)
    if isinstance(rows, int) and isinstance(cols, int) and _fold_ok([rows, cols]):
        return np.eye(rows, cols, k, dtype=dtype)
    r = op.unsqueeze(op.arange(0, shape[0], 1, dtype="int64"), 1)
    c = op.unsqueeze(op.arange(0, shape[1], 1, dtype="int64"), 0)
    return op.astype(op.equal(op.subtract(c, r), im.const(np.array(k, np.int64))), dtype)


@_register("Constant")
def _constant(im, node, ins, at):
    """ONNX ``Constant`` (opset 13): attributes ``value`` (a dense tensor), ``value_float(s)`` or ``value_int(s)`` as a
    static array. Raises ONNXImportError for sparse or string values."""
    if "value" in at and isinstance(at["value"], np.ndarray):
        return at["value"]
    for key, dtype in (("value_float", "float32"), ("value_int", "int64")):
        if key in at:
            return np.array(at[key], dtype=dtype)
    for key, dtype in (("value_floats", "float32"), ("value_ints", "int64")):
        if key in at:
            return np.array(list(at[key]), dtype=dtype)
    raise ONNXImportError(f"only dense tensor / float / int values are supported, got {sorted(at)}")


@_register("Shape")
def _shape(im, node, ins, at):
    """ONNX ``Shape`` (opset 15) with ``start`` / ``end``: the dims as an int64 value, symbolic where a dim is
    (:func:`_shape_value`)."""
    _check_inputs(ins, node)
    dims = im.shape_of(ins[0])
    n = len(dims)
    start = int(at.get("start", 0))
    end = int(at.get("end", n))
    start, end = (max(0, min(n, s + n if s < 0 else s)) for s in (start, end))
    vals = np.empty(max(0, end - start), dtype=object)
    vals[:] = dims[start:end]
    return _shape_value(vals)


@_register("Size")
def _size(im, node, ins, at):
    """ONNX ``Size`` (opset 13): the element count as an int64 scalar, symbolic when a dim is."""
    _check_inputs(ins, node)
    total = 1
    for d in im.shape_of(ins[0]):
        total = total * d
    return _shape_value(np.array(_simp(total) if not isinstance(total, int) else total, dtype=object))


@_register("ConstantOfShape")
def _constant_of_shape(im, node, ins, at):
    """ONNX ``ConstantOfShape`` (opset 20): attribute ``value`` (a one-element tensor, default float32 0) over a static
    or symbolic shape; folded within :data:`MAX_FOLD_ELEMENTS`. Raises ONNXImportError for a value that is not one
    element or a negative dim."""
    _check_inputs(ins, node)
    value = at.get("value", np.zeros(1, dtype="float32"))
    if not isinstance(value, np.ndarray) or value.size != 1:
        raise ONNXImportError("value must be a one-element tensor")
    shape = im.shape_list(ins[0], "the shape")
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ONNXImportError(f"negative dim in the shape {shape}")
    if _fold_ok(shape):
        return np.full(shape, value.ravel()[0], dtype=value.dtype)
    fill = value.ravel()[0].item()
    return op.full(shape, fill, dtype=str(value.dtype))


@_register("Range")
def _range(im, node, ins, at):
    """ONNX ``Range`` (opset 11): ``start``, ``limit``, ``delta`` constant or shape-derived (a symbolic integer, or one
    cast to float); folded within :data:`MAX_FOLD_ELEMENTS`. Raises ONNXImportError for bounds computed from tensor
    data or a delta of 0."""
    _check_inputs(ins, node)
    vals = []
    dtype = im.dtype_of(ins[0])
    for v, what in zip(ins, ("start", "limit", "delta")):
        if isinstance(v, Tensor) and id(v) in im.float_of_sym:    # a symbolic integer cast to float
            v = im.float_of_sym[id(v)][1]
        if isinstance(v, Tensor):
            raise ONNXImportError(f"{what} is computed from tensor data; only constant or shape-derived "
                                  "bounds are supported")
        vals.append(_objects(v).ravel()[0] if isinstance(v, _Sym) else v.ravel()[0])
    if all(not isinstance(v, E.PrimExpr) for v in vals):
        start, limit, delta = (v.item() if isinstance(v, np.generic) else v for v in vals)
        if delta == 0:
            raise ONNXImportError("delta must not be 0")
        n = max(0, math.ceil((limit - start) / delta))
        if n <= MAX_FOLD_ELEMENTS:
            return (start + np.arange(n, dtype="float64" if np.dtype(dtype).kind == "f" else "int64") * delta
                    ).astype(dtype)
        return op.arange(start, limit, delta, dtype=dtype)
    as_int = [v.item() if isinstance(v, np.generic) else v for v in vals]
    if np.dtype(dtype).kind == "f":   # float bounds around a symbolic one: whole numbers only, counted in int64
        if any(isinstance(v, float) and not v.is_integer() for v in as_int):
            raise ONNXImportError(f"a symbolic Range with the fractional float bounds {as_int}")
        as_int = [int(v) if isinstance(v, float) else v for v in as_int]
    elif np.dtype(dtype).kind not in "iu":
        raise ONNXImportError("a symbolic Range needs integer bounds")
    start, limit, delta = (_simp(v) for v in as_int)
    if not isinstance(delta, int) or delta == 0:
        raise ONNXImportError(f"delta must be a constant non-zero integer, got {delta}")
    if np.dtype(dtype).kind == "f":
        return op.astype(op.arange(start, limit, delta, dtype="int64"), dtype)
    return op.arange(start, limit, delta, dtype=dtype)


def _reshape_dims(in_shape: list, target: list, allowzero: bool) -> list:
    """The dims of ONNX ``Reshape`` of ``in_shape`` to ``target`` (ints and symbolic dims): ``0`` copies the input's
    dim unless ``allowzero``, one ``-1`` is inferred (:func:`_infer_dim`). Raises ONNXImportError for a 0 past the
    input's rank, several ``-1``, or sizes that cannot match."""
    out = []
    for i, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ONNXImportError(f"shape {target}: a 0 at position {i} copies a dim the {len(in_shape)}-d "
                                      "input does not have")
            out.append(in_shape[i])
        else:
            out.append(d)
    if sum(1 for d in out if isinstance(d, int) and d == -1) > 1:
        raise ONNXImportError(f"shape {target} has more than one -1")
    if any(isinstance(d, int) and d < -1 for d in out):
        raise ONNXImportError(f"shape {target} has a negative dim")
    if -1 in [d for d in out if isinstance(d, int)]:
        out = [_infer_dim(in_shape, out, target) if isinstance(d, int) and d == -1 else d for d in out]
    return [_simp(d) for d in out]


def _factors(e) -> list:
    """The factors of a product of dims (``batch * seq * 384`` -> ``[batch, seq, 384]``)."""
    if isinstance(e, E.Mul):
        return _factors(_simp(e.a)) + _factors(_simp(e.b))
    return [e]


def _infer_dim(in_shape: list, out: list, target: list):
    """The dim a ``-1`` stands for: the input's element count over the other dims', with symbolic
    factors cancelled (``batch * seq * 384 / (batch * seq * 32)`` is 12, not a floordiv)."""
    total = [f for d in in_shape for f in _factors(_simp(d))]
    known = [f for d in out if not (isinstance(d, int) and d == -1) for f in _factors(_simp(d))]
    rest_known = []
    for f in known:
        if isinstance(f, int):
            rest_known.append(f)
            continue
        for i, g in enumerate(total):
            if not isinstance(g, int) and arith.prove_equal(f, g):
                del total[i]
                break
        else:
            rest_known.append(f)
    n_total = math.prod(f for f in total if isinstance(f, int))
    n_known = math.prod(f for f in rest_known if isinstance(f, int))
    sym_total = [f for f in total if not isinstance(f, int)]
    sym_known = [f for f in rest_known if not isinstance(f, int)]
    if not sym_known:
        if n_known == 0 or n_total % n_known:
            raise ONNXImportError(f"cannot reshape {in_shape} to {target}")
        missing = n_total // n_known
        for f in sym_total:
            missing = missing * f
        return _simp(missing)
    num, den = n_total, n_known
    for f in sym_total:
        num = num * f
    for f in sym_known:
        den = den * f
    return _simp(E.FloorDiv(E.convert(num, "int64"), E.convert(den, "int64")))


def _reshape_value(im, x, dims: list):
    """``x`` (static, symbolic or tensor) reshaped to ``dims``: a numpy / symbolic value stays one when the dims are
    static, else a graph ``reshape``."""
    if isinstance(x, Tensor):
        return op.reshape(x, dims)
    if not all(isinstance(d, int) for d in dims):
        return op.reshape(im.tensor(x), dims)
    if isinstance(x, _Sym):
        return _Sym(x.vals.reshape(dims), x.dtype)
    return x.reshape(dims)


@_register("Reshape")
def _reshape(im, node, ins, at):
    """ONNX ``Reshape`` (opset 14): a static or symbolic target shape, ``0`` copying the input's dim (unless
    ``allowzero``) and one ``-1`` inferred (:func:`_reshape_dims`). Raises ONNXImportError when the sizes cannot
    match."""
    _check_inputs(ins, node)
    x = ins[0]
    dims = _reshape_dims(im.shape_of(x), im.shape_list(ins[1], "the target shape"), bool(int(at.get("allowzero", 0))))
    return _reshape_value(im, x, dims)


@_register("Flatten")
def _flatten(im, node, ins, at):
    """ONNX ``Flatten`` (opset 13): 2-D ``(prod(shape[:axis]), prod(shape[axis:]))``, ``axis`` default 1. Raises
    ONNXImportError for an axis out of range."""
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    nd = len(shape)
    axis = int(at.get("axis", 1))
    if not -nd <= axis <= nd:
        raise ONNXImportError(f"axis {axis} out of range for a {nd}-d input")
    if axis < 0:
        axis += nd
    a, b = 1, 1
    for d in shape[:axis]:
        a = a * d
    for d in shape[axis:]:
        b = b * d
    return _reshape_value(im, x, [_simp(a), _simp(b)])


def _axes_arg(im, node, ins, at, what="axes") -> list[int] | None:
    """The ``axes`` of Squeeze / Unsqueeze / Reduce*: the attribute (opsets before 13 / 18), else the constant second
    input, else None."""
    if "axes" in at:
        return [int(a) for a in at["axes"]]
    if len(ins) > 1 and ins[1] is not None:
        return im.ints(ins[1], what)
    return None


@_register("Unsqueeze")
def _unsqueeze(im, node, ins, at):
    """ONNX ``Unsqueeze`` (opset 13, ``axes`` an input; 11, an attribute): size-1 dims inserted at ``axes`` of the
    result. Raises ONNXImportError for missing, repeated or out-of-range axes."""
    _check_inputs(ins, node)
    x = ins[0]
    axes = _axes_arg(im, node, ins, at)
    if axes is None:
        raise ONNXImportError("axes are required")
    shape = im.shape_of(x)
    nd = len(shape) + len(axes)
    norm = sorted({a % nd if -nd <= a < nd else -1 for a in axes})
    if -1 in norm or len(norm) != len(axes):
        raise ONNXImportError(f"axes {axes} are out of range or repeated for a {nd}-d result")
    it = iter(shape)
    dims = [1 if i in norm else next(it) for i in range(nd)]
    return _reshape_value(im, x, dims)


@_register("Squeeze")
def _squeeze(im, node, ins, at):
    """ONNX ``Squeeze`` (opset 13, ``axes`` an input; 11, an attribute): the size-1 dims at ``axes`` (every one when
    omitted, on a static shape) removed. Raises ONNXImportError for a dim that is not 1, an axis out of range, or no
    axes on a symbolic shape."""
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    nd = len(shape)
    axes = _axes_arg(im, node, ins, at)
    if axes is None:
        if any(not isinstance(d, int) for d in shape):
            raise ONNXImportError(f"Squeeze without axes on the symbolic shape {shape} is ambiguous")
        axes = [i for i, d in enumerate(shape) if d == 1]
    if any(not -nd <= a < nd for a in axes):
        raise ONNXImportError(f"axes {axes} out of range for a {nd}-d input")
    axes = {a % nd for a in axes}
    for a in axes:
        if not (isinstance(shape[a], int) and shape[a] == 1):
            raise ONNXImportError(f"cannot squeeze axis {a} of size {shape[a]}")
    return _reshape_value(im, x, [d for i, d in enumerate(shape) if i not in axes])


@_register("Expand")
def _expand(im, node, ins, at):
    """ONNX ``Expand`` (opset 13): bidirectional broadcast of the input and the target shape (static or symbolic);
    folded within :data:`MAX_FOLD_ELEMENTS`. Raises ONNXImportError for shapes that do not broadcast."""
    _check_inputs(ins, node)
    x = ins[0]
    target = im.shape_list(ins[1], "the shape")
    xs = im.shape_of(x)
    n = max(len(xs), len(target))
    xs_p = [1] * (n - len(xs)) + xs
    tg_p = [1] * (n - len(target)) + target
    out = []
    for a, b in zip(xs_p, tg_p):
        if isinstance(b, int) and b == 1:
            out.append(a)
        elif isinstance(a, int) and a == 1:
            out.append(b)
        elif _sign(a, b, "Expand") == 0:
            out.append(a)
        else:
            raise ONNXImportError(f"cannot broadcast the shape {xs} to {target}")
    if not isinstance(x, Tensor) and _fold_ok(out):
        if isinstance(x, _Sym):
            return _Sym(np.broadcast_to(x.vals, out).copy(), x.dtype)
        return np.ascontiguousarray(np.broadcast_to(x, out))
    t = im.tensor(x)
    if [_simp(d) for d in t.shape] == out:
        return t
    return op.broadcast_to(t, out)
