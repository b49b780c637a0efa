"""Converters of the ONNX ops that index with tensors: GatherElements / GatherND, ScatterElements /
ScatterND, OneHot, NonZero, Compress, ReverseSequence.
"""
from __future__ import annotations

import numpy as np

from ...ir import expr as E
from ...nn import op
from ...nn.core import wrap_nested
from ...nn.op.common import symbolic_scalar
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _fold_ok, _simp


@_register("OneHot")
def _one_hot(im, node, ins, at):
    """``OneHot(indices, depth, values)``: ``values[1]`` where the (wrapped, for negative) index equals the
    position along the new ``axis``, ``values[0]`` elsewhere; ``depth`` must be known at import time."""
    _check_inputs(ins, node)
    depth = int(np.asarray(im.static(ins[1], "depth")).ravel()[0])
    vals = im.static(ins[2], "values").ravel()
    if depth < 1 or vals.size != 2:
        raise ONNXImportError(f"OneHot needs depth >= 1 and two values, got depth {depth}, {vals.size} values")
    nd = len(im.shape_of(ins[0])) + 1
    axis = int(at.get("axis", -1))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d output")
    axis %= nd
    if isinstance(ins[0], np.ndarray) and _fold_ok(list(ins[0].shape) + [depth]):   # (shape arithmetic: folded)
        i = ins[0].astype(np.int64)
        i = np.where(i < 0, i + depth, i)
        pos = np.arange(depth).reshape([depth if d == axis else 1 for d in range(nd)])
        return np.where(np.expand_dims(i, axis) == pos, vals[1], vals[0]).astype(vals.dtype)
    idx = im.tensor(ins[0])
    idx = op.astype(idx, "int64") if idx.dtype != "int64" else idx
    idx = op.where(op.less(idx, 0), op.add(idx, im.const(np.array(depth, np.int64))), idx)
    pos = op.reshape(op.arange(0, depth, 1, dtype="int64"), [depth if i == axis else 1 for i in range(nd)])
    hit = op.equal(op.unsqueeze(idx, axis), pos)
    return op.where(hit, im.const(vals[1:2].reshape(())), im.const(vals[0:1].reshape(())))


@_register("GatherElements")
def _gather_elements(im, node, ins, at):
    """ONNX ``GatherElements`` (opset 13): ``out[i][j] = data[index[i][j]][j]`` along ``axis``
    (:func:`builder.nn.op.gather_elements`); the result has the indices' shape."""
    _check_inputs(ins, node)
    x, idx = im.tensor(ins[0]), im.tensor(ins[1])
    return op.gather_elements(x, idx, axis=int(at.get("axis", 0)))


@_register("GatherND")
def _gather_nd(im, node, ins, at):
    """``GatherND``: each row of ``indices`` (``(..., q)``) picks a slice of ``data`` by its first
    ``batch_dims + q`` coordinates (the batch ones from the row's own position): one ``take`` from the data
    with those dims flattened, at the row's linear index (negative indices count from the end; one out of
    range is an error when run)."""
    _check_inputs(ins, node)
    x, idx = im.tensor(ins[0]), im.tensor(ins[1])
    b = int(at.get("batch_dims", 0))
    q = _simp(idx.shape[-1]) if len(idx.shape) else None
    if not isinstance(q, int) or b < 0 or b + q > len(x.shape) or b >= len(idx.shape):
        raise ONNXImportError(f"indices {list(idx.shape)} with batch_dims {b} do not fit data {list(x.shape)}")
    lead = list(idx.shape[:-1])
    idx = op.astype(idx, "int64") if idx.dtype != "int64" else idx
    linear = None
    for j in range(b + q):
        dim = wrap_nested(symbolic_scalar(x.shape[j], "int64"), "dim") if not isinstance(_simp(x.shape[j]), int) \
            else im.const(np.array(_simp(x.shape[j]), np.int64))
        if j < b:   # the row's own batch coordinate
            c = op.reshape(op.arange(0, x.shape[j], 1, dtype="int64"), [1] * j + [x.shape[j]] + [1] * (len(lead) - j - 1))
        else:
            c = op.squeeze(op.strided_slice(idx, [len(lead)], [j - b], [j - b + 1]), [len(lead)])
            c = op.where(op.less(c, im.const(np.zeros((), np.int64))), op.add(c, dim), c)
        linear = c if linear is None else op.add(op.multiply(linear, dim), c)
    size = x.shape[0]
    for d in x.shape[1:b + q]:
        size = size * d
    flat = op.reshape(x, [E.simplify(size) if isinstance(size, E.PrimExpr) else size] + list(x.shape[b + q:]))
    return op.take(flat, op.broadcast_to(linear, lead), axis=0)


@_register("ReverseSequence")
def _reverse_sequence(im, node, ins, at):
    """``ReverseSequence``: along ``time_axis`` the first ``sequence_lens[b]`` elements of each batch entry
    reversed, the rest kept: one ``gather_elements`` at ``L - 1 - t`` where ``t < L``."""
    _check_inputs(ins, node)
    x, lens = im.tensor(ins[0]), im.tensor(ins[1])
    ta, ba = int(at.get("time_axis", 0)), int(at.get("batch_axis", 1))
    if {ta, ba} != {0, 1}:
        raise ONNXImportError(f"time_axis / batch_axis must be 0 and 1, got {ta}, {ba}")
    nd = len(x.shape)
    t = op.reshape(op.arange(0, x.shape[ta], 1, dtype="int64"), [x.shape[ta] if d == ta else 1 for d in range(nd)])
    n = op.reshape(op.astype(lens, "int64"), [x.shape[ba] if d == ba else 1 for d in range(nd)])
    src = op.where(op.less(t, n), op.subtract(op.subtract(n, im.const(np.array(1, np.int64))), t), t)
    return op.gather_elements(x, op.broadcast_to(src, list(x.shape)), axis=ta)


_SCATTER_REDUCTION = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


def _scatter_reduction(at) -> str:
    r = at.get("reduction", "none")
    r = r.decode() if isinstance(r, bytes) else r
    if r not in _SCATTER_REDUCTION:
        raise ONNXImportError(f"reduction {r!r} is not one of {sorted(_SCATTER_REDUCTION)}")
    return _SCATTER_REDUCTION[r]


@_register("ScatterElements", "Scatter")
def _scatter_elements(im, node, ins, at):
    """``ScatterElements`` (``Scatter``: its opset 9-10 name) with its ``reduction`` (opset 16 / 18):
    :func:`builder.nn.op.scatter_elements`; duplicates apply in order, as onnxruntime does."""
    _check_inputs(ins, node)
    x, idx, upd = (im.tensor(v) for v in ins[:3])
    return op.scatter_elements(x, idx, upd, axis=int(at.get("axis", 0)),
                               reduction=_scatter_reduction(at))


@_register("ScatterND")
def _scatter_nd(im, node, ins, at):
    """``ScatterND`` with its ``reduction`` (opset 16 / 18): :func:`builder.nn.op.scatter_nd` (what exporters
    write for an assignment into a slice)."""
    _check_inputs(ins, node)
    x, idx, upd = (im.tensor(v) for v in ins[:3])
    return op.scatter_nd(x, idx, upd, reduction=_scatter_reduction(at))


@_register("NonZero")
def _nonzero(im, node, ins, at):
    """``NonZero``: the (rank, n) int64 indices of the nonzero elements in row-major order, ``n`` known when
    the model runs (:func:`builder.nn.op.nonzero`, a symbolic dim bound then); a 0-d input is taken as
    one element (as onnxruntime does); of a constant, folded."""
    _check_inputs(ins, node)
    (x,) = ins
    if isinstance(x, np.ndarray) and _fold_ok(x.shape):
        return np.stack(np.nonzero(np.atleast_1d(x))).astype(np.int64)
    x = im.tensor(x)
    return op.nonzero(op.reshape(x, [1]) if x.ndim == 0 else x)


@_register("Compress")
def _compress(im, node, ins, at):
    """``Compress``: the slices along ``axis`` (the flattened input without one) where the 1-D condition is
    true (``numpy.compress``: a shorter condition leaves out the rest; a true element past the dim is an
    error when the model runs): a gather at the condition's nonzero indices, their count bound then."""
    _check_inputs(ins, node)
    data, cond = im.tensor(ins[0]), im.tensor(ins[1])
    if cond.ndim != 1:
        raise ONNXImportError(f"the condition must be 1-D, got {cond.ndim}-d")
    if "axis" in at:
        nd = data.ndim
        axis = int(at["axis"])
        if not -nd <= axis < nd:
            raise ONNXImportError(f"axis {axis} is out of range for a {nd}-d input")
        axis %= nd
    else:
        data, axis = op.reshape(data, [-1]), 0
    idx = op.nonzero(cond)
    return op.take(data, op.reshape(idx, [idx.shape[1]]), axis=axis)
