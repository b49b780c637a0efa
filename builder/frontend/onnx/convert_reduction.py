"""Converters of the ONNX ops that reduce along axes: the Reduce* family, ArgMax / ArgMin, TopK,
CumSum, Softmax / LogSoftmax / Hardmax, Unique.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import expr as E
from ...ir import relax as rx
from ...nn import op
from ...nn.core import Tensor
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _fold_ok, _simp


@_register("ArgMax", "ArgMin")
def _argmax(im, node, ins, at):
    """ONNX ``ArgMax`` / ``ArgMin`` (opset 13): int64 index of the first extreme along ``axis``, ``keepdims`` (default
    1). Raises ONNXImportError for an axis out of range or ``select_last_index=1``."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    axis = int(at.get("axis", 0))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    if int(at.get("select_last_index", 0)):
        raise ONNXImportError("select_last_index=1 is not supported (the first extreme is taken)")
    fn = op.argmax if node.op_type == "ArgMax" else op.argmin
    return fn(x, axis=axis % nd, keepdims=bool(int(at.get("keepdims", 1))))


def _axis_attr(at: dict, nd: int, default: int = -1) -> int:
    """A node's ``axis`` attribute normalized into ``[0, nd)``; ONNXImportError when out of range."""
    axis = int(at.get("axis", default))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    return axis % nd


@_register("Hardmax")
def _hardmax(im, node, ins, at):
    """``Hardmax``: 1 at the first maximum along ``axis``, 0 elsewhere, in the input's dtype; ``x`` any rank
    >= 1, any float dtype. Opset 13 (and later) takes the maximum along the one dim ``axis`` (default -1).
    Opsets 1 to 12 define it on ``x`` coerced to 2-D, ``[prod(dims[:axis]), prod(dims[axis:])]`` (default
    axis 1): the maximum over all the trailing dims from ``axis`` on (Hardmax-11's text). ONNX's
    ``version_converter`` has no 12 -> 13 adapter for Hardmax (it has for Softmax / LogSoftmax) and passes
    the node on unchanged, so the file's own opset (:attr:`_Importer.source_opset`) decides here.
    Raises ONNXImportError for an axis out of range."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    if im.source_opset < 13:
        axis = _axis_attr(at, nd, default=1)
        shape = [_simp(d) for d in x.shape]
        rows = _simp(math.prod(shape[:axis], start=E.IntImm(1, "int64")))
        cols = _simp(math.prod(shape[axis:], start=E.IntImm(1, "int64")))
        flat = op.reshape(x, [rows, cols])
        return op.reshape(_hardmax_along(flat, 1), shape)
    return _hardmax_along(x, _axis_attr(at, nd))


def _hardmax_along(x: Tensor, axis: int) -> Tensor:
    """1 at the first maximum of ``x`` along ``axis`` (in ``[0, ndim)``), 0 elsewhere, in ``x``'s dtype."""
    nd = len(x.shape)
    d = _simp(x.shape[axis])
    idx = op.argmax(x, axis=axis, keepdims=True)
    pos = op.arange(0, d, 1, dtype="int64")
    pos = op.reshape(pos, [d if i == axis else 1 for i in range(nd)])
    return op.astype(op.equal(idx, pos), x.dtype)


@_register("TopK")
def _topk(im, node, ins, at):
    """``TopK``: the ``K`` (a constant, or shape arithmetic that folds to an int) largest / smallest values
    along ``axis`` and their int64 positions, sorted, ties by the lower position (:func:`builder.nn.op.topk`;
    ``sorted=0`` allows any order, so sorted is right too)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    k = im.shape_list(ins[1], "K")
    if len(k) != 1 or not isinstance(k[0], int):
        raise ONNXImportError(f"K must be one int known at import time, got {k}")
    return op.topk(x, k[0], axis=int(at.get("axis", -1)), largest=bool(int(at.get("largest", 1))), dtype="int64")


@_register("CumSum")
def _cumsum(im, node, ins, at):
    """``CumSum`` along a constant axis (``exclusive``: the sum before each element); of a constant, folded
    (a ``Range`` bound may come from it: torch's ``repeat_interleave`` with constant repeats)."""
    _check_inputs(ins, node)
    (axis,) = im.ints(ins[1], "axis")
    nd = len(im.shape_of(ins[0]))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
    if int(at.get("reverse", 0)):
        raise ONNXImportError("CumSum with reverse=1 is not supported")
    exclusive = bool(int(at.get("exclusive", 0)))
    if isinstance(ins[0], np.ndarray) and ins[0].dtype.kind in "iuf":
        x = np.moveaxis(ins[0], axis % nd, -1)
        c = np.cumsum(x, axis=-1, dtype=x.dtype)
        if exclusive:    # the sums before each element, as the scan adds them (not c - x)
            c = np.concatenate([np.zeros_like(x[..., :1]), c[..., :-1]], axis=-1)[..., :x.shape[-1]]
        return np.ascontiguousarray(np.moveaxis(c, -1, axis % nd))
    return op.cumsum(im.tensor(ins[0]), axis=axis % nd, exclusive=exclusive or None)


@_register("Unique")
def _unique(im, node, ins, at):
    """``Unique`` without an axis: the distinct values of the flattened input (ascending with ``sorted`` 1,
    the default, else in the order they first occur), the first index of each, the inverse indices and the
    counts (:func:`builder.nn.op.unique`: their count is bound when the model runs)."""
    _check_inputs(ins, node)
    if "axis" in at:
        raise ONNXImportError("Unique along an axis is not supported (only the flattened form)")
    return list(op.unique(im.tensor(ins[0]), sorted=bool(int(at.get("sorted", 1)))))


@_register("Softmax")
def _softmax(im, node, ins, at):
    """ONNX ``Softmax`` (opset 13): along ``axis`` (default -1), same shape and dtype."""
    _check_inputs(ins, node)
    return op.softmax(im.tensor(ins[0]), axis=int(at.get("axis", -1)))


@_register("LogSoftmax")
def _log_softmax(im, node, ins, at):
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (opset 13; the max keeps it finite where the
    softmax itself would underflow to 0, as onnxruntime's and PyTorch's kernels do)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    return op.log_softmax(x, axis=_axis_attr(at, len(x.shape)))


def _float_dtype(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def _np_extreme(fn, lowest: bool):
    """numpy's max / min with the ONNX identity for an empty set: -inf / +inf for floats, the dtype's
    minimum / maximum for integers (ReduceMax-18 / ReduceMin-18)."""
    def f(x, axis, keepdims):
        if x.dtype.kind == "f":
            init = -np.inf if lowest else np.inf
        elif x.dtype.kind == "b":
            init = not lowest
        else:
            info = np.iinfo(x.dtype)
            init = info.min if lowest else info.max
        return fn(x, axis=axis, keepdims=keepdims, initial=init)
    return f


def _extreme(largest: bool):
    """ReduceMax (``largest``) / ReduceMin of a tensor along ``axis``. The compiled reduction starts from the
    dtype's lowest (highest) finite value, which for floats is -FLT_MAX (+FLT_MAX) where the spec (ReduceMax-18:
    "Reduction over an empty set of values yields minus infinity (if supported by the datatype) or the minimum
    value of the data type otherwise", ReduceMin alike) and onnxruntime give -inf (+inf): for an empty set and
    for a set holding nothing but -inf (+inf). Those results are put right by counting the elements other than
    -inf (+inf, NaN counted: NaN propagates) and taking the infinity where there are none. Integer dtypes need
    nothing (their minimum / maximum is the identity).

    NaN: a set holding a NaN gives NaN (numpy's ``max`` / ``min``, PyTorch's ``amax`` / ``amin``). The spec
    does not say how a NaN compares; onnxruntime's CPU kernel skips a NaN that is not first (``x > max``)."""
    def f(x, axis, keepdims):
        r = (op.max if largest else op.min)(x, axis=axis, keepdims=keepdims)
        if not _float_dtype(x.dtype):
            return r
        inf = Tensor(_expr=rx.const(np.array(-np.inf if largest else np.inf, dtype=x.dtype)))
        others = op.sum(op.astype(op.not_equal(x, inf), "int64"), axis=axis, keepdims=keepdims)
        none = op.equal(others, Tensor(_expr=rx.const(np.array(0, np.int64))))
        return op.where(none, inf, r)
    return f


def _logsumexp(x, axis, keepdims):
    """``m + log(sum(exp(x - m)))`` with ``m`` the maximum where it is finite, else 0 (SciPy's
    ``logsumexp``): all -inf (or an empty set) gives ``log(0) = -inf`` as the spec (ReduceLogSumExp-18,
    "Reduction over an empty set of values yields minus infinity") and onnxruntime, +inf gives +inf (the
    plain ``m - m`` shift gives NaN for both)."""
    m = op.max(x, axis=axis, keepdims=True)
    inf = Tensor(_expr=rx.const(np.array(np.inf, dtype=x.dtype)))
    m = op.where(op.less(op.abs(m), inf), m, Tensor(_expr=rx.const(np.array(0, dtype=x.dtype))))
    y = op.add(op.log(op.sum(op.exp(op.subtract(x, m)), axis=axis, keepdims=True)), m)
    return y if keepdims else op.squeeze(y, list(axis))


def _np_logsumexp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        y = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis)


#: ONNX reduction -> (compiled, numpy fold) as ``f(x, axis, keepdims)``.
_REDUCE = {"ReduceMean": (op.mean, np.mean), "ReduceSum": (op.sum, np.sum),
           "ReduceMax": (_extreme(True), _np_extreme(np.max, True)),
           "ReduceMin": (_extreme(False), _np_extreme(np.min, False)), "ReduceProd": (op.prod, np.prod),
           "ReduceSumSquare": (lambda x, axis, keepdims: op.sum(op.multiply(x, x), axis=axis, keepdims=keepdims),
                               lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims)),
           "ReduceL1": (lambda x, axis, keepdims: op.sum(op.abs(x), axis=axis, keepdims=keepdims),
                        lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims)),
           "ReduceL2": (lambda x, axis, keepdims: op.sqrt(op.sum(op.multiply(x, x), axis=axis, keepdims=keepdims)),
                        lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))),
           "ReduceLogSumExp": (_logsumexp, _np_logsumexp),
           "ReduceLogSum": (lambda x, axis, keepdims: op.log(op.sum(x, axis=axis, keepdims=keepdims)),
                            lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)))}


#: What the composite reductions still compute with ``noop_with_empty_axes`` and no axes (the reduction over
#: an empty set of axes is the identity, "composite-reduction operators will still perform the non-reduction
#: steps": ReduceLogSum is log(x), ReduceSumSquare x * x; onnx's ReferenceEvaluator and onnxruntime alike).
#: ReduceLogSumExp is log(exp(x)) = x exactly (onnxruntime's result, also at +-inf).
_REDUCE_ELEMENTWISE = {"ReduceSumSquare": (lambda x: op.multiply(x, x), lambda x: x * x),
                       "ReduceL1": (op.abs, np.abs),
                       "ReduceL2": (lambda x: op.sqrt(op.multiply(x, x)), lambda x: np.sqrt(x * x)),
                       "ReduceLogSum": (op.log, np.log)}


@_register(*_REDUCE)
def _reduce(im, node, ins, at):
    """The ONNX reductions (opsets 13 to 18: ``axes`` an attribute or an input): ``x`` any shape and dtype the
    op takes -> the reduced shape (``keepdims`` 1 keeps reduced dims as 1). Over an empty set (a reduced dim of
    0): ReduceSum / L1 / L2 / SumSquare 0, ReduceProd 1, ReduceMax -inf (the dtype's minimum for integers),
    ReduceMin +inf, ReduceLogSum and ReduceLogSumExp -inf, as the spec says; ReduceMean, "undefined" in the spec,
    is 0 / 0 = NaN (numpy's and onnx's ReferenceEvaluator's result; onnxruntime returns 0). No axes with
    ``noop_with_empty_axes`` is the identity for ReduceSum / Mean / Max / Min / Prod / LogSumExp and the
    element function for the others (:data:`_REDUCE_ELEMENTWISE`). Raises ONNXImportError for axes out of
    range or not known at import time."""
    _check_inputs(ins, node)
    x = ins[0]
    if "axes" in at:
        axes = [int(a) for a in at["axes"]]
    elif len(ins) > 1 and ins[1] is not None:
        axes = im.ints(ins[1], "axes")
    else:
        axes = []
    keep = bool(int(at.get("keepdims", 1)))
    nd = len(im.shape_of(x))
    if not axes:
        if int(at.get("noop_with_empty_axes", 0)):
            if node.op_type not in _REDUCE_ELEMENTWISE:
                return x
            fn, npf = _REDUCE_ELEMENTWISE[node.op_type]
            if isinstance(x, np.ndarray):
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    return np.asarray(npf(x)).astype(x.dtype)
            return fn(im.tensor(x))
        axes = list(range(nd))
    if any(not -nd <= a < nd for a in axes):
        raise ONNXImportError(f"axes {axes} out of range for a {nd}-d input")
    axes = sorted({a % nd for a in axes})
    fn, npf = _REDUCE[node.op_type]
    if isinstance(x, np.ndarray) and _fold_ok(x.shape):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.asarray(npf(x, axis=tuple(axes), keepdims=keep)).astype(x.dtype)
    return fn(im.tensor(x), axis=axes, keepdims=keep)
