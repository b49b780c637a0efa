"""Converters of the ONNX ops that move data: Transpose, Concat, Split, Slice, Gather, Tile, Pad,
DepthToSpace / SpaceToDepth, Trilu.
"""
from __future__ import annotations

import numpy as np

from ...ir import arith
from ...ir import expr as E
from ...nn import op
from ...nn.core import Tensor, wrap_nested
from ...nn.op.common import symbolic_scalar
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _fold_ok, _objects, _shape_value, _simp
from .values import _Sym


#: The most pieces one Split / SplitToSequence makes (each is an op of its own).
MAX_SPLIT_PIECES = 4096


_BIG = 1 << 62   # ONNX Slice ends at or beyond this mean "to the end" (exporters write INT64_MAX)


_END_SENTINELS = (2**31 - 1, 2**63 - 1)   # ONNX Slice ends meaning "to the end" in either direction


@_register("Tile")
def _tile(im, node, ins, at):
    """ONNX ``Tile`` (opset 13): ``repeats`` (static or symbolic, one non-negative per dim) -> each dim times its
    repeat. Raises ONNXImportError for a wrong count or a negative repeat."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    reps = im.shape_list(ins[1], "repeats")
    if len(reps) != len(x.shape) or any(isinstance(r, int) and r < 0 for r in reps):
        raise ONNXImportError(f"Tile needs one non-negative repeat per dim ({len(x.shape)}), got {reps}")
    return op.tile(x, reps)


@_register("Trilu")
def _trilu(im, node, ins, at):
    """ONNX ``Trilu`` (opset 14): the upper (``upper=1``, default) or lower triangle of the last two dims from diagonal
    ``k`` (a constant input, default 0)."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    k = im.ints(ins[1], "k")[0] if len(ins) > 1 and ins[1] is not None else 0
    return (op.triu if int(at.get("upper", 1)) else op.tril)(x, k)


@_register("DepthToSpace", "SpaceToDepth")
def _depth_space(im, node, ins, at):
    """``DepthToSpace`` (modes DCR, the default, and CRD = ``torch.nn.PixelShuffle``) and ``SpaceToDepth``
    (DCR order) of NCHW data: reshapes around one transpose."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    if len(x.shape) != 4:
        raise ONNXImportError(f"{node.op_type} needs a 4-d (NCHW) input, got a {len(x.shape)}-d one")
    b = int(at.get("blocksize", 0))
    if b < 1:
        raise ONNXImportError(f"blocksize must be >= 1, got {b}")
    n, c, h, w = x.shape
    if node.op_type == "SpaceToDepth":
        t = op.reshape(x, [n, c, E.simplify(E.convert(h) // b), b, E.simplify(E.convert(w) // b), b])
        t = op.permute_dims(t, [0, 3, 5, 1, 2, 4])
        return op.reshape(t, [n, c * b * b if isinstance(c, int) else E.simplify(c * (b * b)), t.shape[4], t.shape[5]])
    mode = at.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    cb = E.simplify(E.convert(c) // (b * b))
    if mode == "DCR":
        t = op.permute_dims(op.reshape(x, [n, b, b, cb, h, w]), [0, 3, 4, 1, 5, 2])
    elif mode == "CRD":
        t = op.permute_dims(op.reshape(x, [n, cb, b, b, h, w]), [0, 1, 4, 2, 5, 3])
    else:
        raise ONNXImportError(f"unknown DepthToSpace mode {mode!r}")
    return op.reshape(t, [n, cb, E.simplify(E.convert(h) * b), E.simplify(E.convert(w) * b)])


@_register("Pad")
def _pad(im, node, ins, at):
    """``Pad`` (opset 13 on: ``pads`` input, all begins then all ends, optional ``constant_value`` and, from
    opset 18, ``axes``) in ``constant``, ``reflect``, ``edge`` or (opset 19) ``wrap`` mode; negative pads
    crop first (:func:`builder.nn.op.pad`, as onnxruntime does). Raises ONNXImportError for another mode or
    a computed pad value."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    nd = len(x.shape)
    mode = at.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ONNXImportError(f"mode {mode!r} is not supported (constant, reflect, edge, wrap)")
    pads = im.shape_list(ins[1], "pads")       # constants, or shape arithmetic that folds to ints
    if not all(isinstance(p, int) for p in pads):
        raise ONNXImportError(f"pads {pads} must be known at import time (they depend on symbolic dims)")
    axes = im.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(nd))
    if any(not -nd <= a < nd for a in axes) or len({a % nd for a in axes}) != len(axes):
        raise ONNXImportError(f"axes {axes} are out of range or repeated for a {nd}-d input")
    if len(pads) != 2 * len(axes):
        raise ONNXImportError(f"{len(pads)} pads for {len(axes)} axes (need 2 per axis)")
    width = [0] * (2 * nd)
    for i, a in enumerate(axes):
        width[2 * (a % nd)], width[2 * (a % nd) + 1] = pads[i], pads[i + len(axes)]
    value = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(())
    if not isinstance(value, np.ndarray) or value.size > 1:
        raise ONNXImportError("constant_value must be a constant scalar")
    return op.pad(x, width, mode=mode, value=float(value.ravel()[0]) if value.size else 0.0)


@_register("Transpose")
def _transpose(im, node, ins, at):
    """ONNX ``Transpose`` (opset 21): attribute ``perm`` (default: the dims reversed) (static, symbolic and tensor
    values alike). Raises ONNXImportError when ``perm`` is not a permutation."""
    _check_inputs(ins, node)
    x = ins[0]
    nd = len(im.shape_of(x))
    perm = [int(p) for p in at.get("perm", list(range(nd))[::-1])]
    if sorted(perm) != list(range(nd)):
        raise ONNXImportError(f"perm {perm} is not a permutation of {nd} axes")
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(np.transpose(x, perm))
    if isinstance(x, _Sym):
        return _Sym(np.transpose(x.vals, perm), x.dtype)
    return op.permute_dims(x, perm)


@_register("Concat")
def _concat(im, node, ins, at):
    """ONNX ``Concat`` (opset 13) along ``axis`` (static, symbolic and tensor values alike); empty constant inputs are
    dropped. Raises ONNXImportError for an axis out of range."""
    _check_inputs(ins, node)
    axis = int(at["axis"])
    nd = len(im.shape_of(ins[0]))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range for {nd}-d inputs")
    axis %= nd
    if not any(isinstance(v, Tensor) for v in ins):
        if any(isinstance(v, _Sym) for v in ins):
            return _shape_value(np.concatenate([_objects(v) for v in ins], axis=axis), im.dtype_of(ins[0]))
        return np.concatenate(ins, axis=axis)
    parts = [v for v in ins if not (isinstance(v, np.ndarray) and v.shape[axis] == 0)]
    if len(parts) == 1:
        return im.tensor(parts[0])
    return op.concat([im.tensor(v) for v in parts], dim=axis)


def _split_axis(im, x, at) -> tuple[list, int]:
    """``(shape, axis)`` of a Split / SplitToSequence input and its ``axis`` attribute (made non-negative)."""
    shape = im.shape_of(x)
    nd = len(shape)
    axis = int(at.get("axis", 0))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range for a {nd}-d input")
    return shape, axis % nd


def _split_pieces(im, x, shape: list, axis: int, sizes: list) -> list:
    """``x`` cut along ``axis`` into pieces of ``sizes`` (checked: non-negative, adding up to a static dim, at
    most :data:`MAX_SPLIT_PIECES`): constants and shape values split at import time, tensors by one split."""
    if len(sizes) > MAX_SPLIT_PIECES:
        raise ONNXImportError(f"{len(sizes)} pieces (at most {MAX_SPLIT_PIECES})")
    if any(s < 0 for s in sizes) or (isinstance(shape[axis], int) and sum(sizes) != shape[axis]):
        raise ONNXImportError(f"split sizes {sizes} do not add up to the dim {shape[axis]}")
    cuts = [int(c) for c in np.cumsum(sizes)[:-1]]
    if isinstance(x, np.ndarray):
        return list(np.split(x, cuts, axis=axis))
    if isinstance(x, _Sym):
        return [_shape_value(p, x.dtype) for p in np.split(x.vals, cuts, axis=axis)]
    return [im.tensor(x)] if len(sizes) == 1 else list(op.split(im.tensor(x), cuts, axis=axis))


@_register("Split")
def _split(im, node, ins, at):
    """ONNX ``Split`` (opset 18 / 13 / 11): sizes from the ``split`` input or attribute, else ``num_outputs`` (or the
    node's outputs) pieces of ``ceil(dim / n)``, (static, symbolic and tensor values alike). Raises ONNXImportError
    for sizes that do not match the outputs, a symbolic dim without sizes, or more than :data:`MAX_SPLIT_PIECES`
    pieces."""
    _check_inputs(ins, node)
    x = ins[0]
    shape, axis = _split_axis(im, x, at)
    n = len(node.output)
    if len(ins) > 1 and ins[1] is not None:
        sizes = im.ints(ins[1], "split")
    elif "split" in at:
        sizes = [int(s) for s in at["split"]]
    else:
        dim = shape[axis]
        if not isinstance(dim, int):
            raise ONNXImportError(f"splitting the symbolic dim {dim} needs explicit sizes")
        parts = int(at.get("num_outputs", n))
        if not 1 <= parts <= MAX_SPLIT_PIECES:
            raise ONNXImportError(f"num_outputs {parts} (1 to {MAX_SPLIT_PIECES})")
        chunk = -(-dim // parts)
        sizes = [min(chunk, dim - i * chunk) for i in range(parts)]
    if len(sizes) != n:
        raise ONNXImportError(f"split sizes {sizes} do not give the node's {n} outputs")
    return _split_pieces(im, x, shape, axis, sizes)


@_register("Slice")
def _slice(im, node, ins, at):
    """ONNX ``Slice`` (opset 13): ``starts`` / ``ends`` (static or symbolic), optional ``axes`` and ``steps``
    (constants), ends past the dim (``INT64_MAX``) meaning to the end, (static, symbolic and tensor values alike).
    Raises ONNXImportError for inputs of different lengths, repeated or out-of-range axes, or a step of 0."""
    _check_inputs(ins, node)
    x = ins[0]
    shape = im.shape_of(x)
    nd = len(shape)
    starts = im.shape_list(ins[1], "starts")
    ends = im.shape_list(ins[2], "ends")
    axes = im.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = im.ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ONNXImportError("starts, ends, axes and steps differ in length")
    if any(not -nd <= a < nd for a in axes):
        raise ONNXImportError(f"axes {axes} out of range for a {nd}-d input")
    axes = [a % nd for a in axes]
    if len(set(axes)) != len(axes):
        raise ONNXImportError(f"repeated axes {axes}")
    if any(s == 0 for s in steps):
        raise ONNXImportError("a step of 0")
    static = all(isinstance(v, int) for v in starts + ends) and all(isinstance(shape[a], int) for a in axes)
    if static and not isinstance(x, Tensor):
        index = [slice(None)] * nd
        for a, s, e, st in zip(axes, starts, ends, steps):
            index[a] = _slice_index(s, e, st, shape[a])
        if isinstance(x, _Sym):
            return _shape_value(np.asarray(x.vals[tuple(index)], dtype=object), x.dtype)
        return np.ascontiguousarray(x[tuple(index)])
    t = im.tensor(x)
    begin, end, strides, out_axes = [], [], [], []
    for a, s, e, st in zip(axes, starts, ends, steps):
        d = shape[a]
        if st < 0:      # a gather of the indices in their (descending) order, or the whole dim reversed
            if isinstance(d, int) and isinstance(s, int) and isinstance(e, int):
                s, e = _slice_bounds(s, e, st, d)
                t = op.take(t, im.const(np.arange(s, e, st, dtype=np.int64)), axis=a)
            elif st == -1 and isinstance(s, int) and isinstance(e, int) and (s == -1 or s >= _BIG) and e <= -_BIG:
                t = op.flip(t, a)       # x[::-1] of a symbolic dim, as exporters write it
            else:
                raise ONNXImportError("a negative step on a symbolic dim is supported only to reverse the whole dim")
            continue
        if isinstance(d, int) and isinstance(s, int) and isinstance(e, int):
            s, e = _slice_bounds(s, e, st, d)
            e = max(e, s)
        else:
            s = _clamp_sym(s, d)
            e = _nonempty_end(s, _clamp_sym(e, d))
        begin.append(s)
        end.append(e)
        strides.append(st)
        out_axes.append(a)
    return op.strided_slice(t, out_axes, begin, end, strides) if out_axes else t


def _slice_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX ``Slice``'s ``(start, end)`` on one static dim of ``dim`` elements (``step`` non-zero), clamped
    as the spec (Slice-13) defines it: a negative bound gets ``dim`` added once; then for ``step > 0``
    both are clamped to ``[0, dim]``, for ``step < 0`` ``start`` to ``[0, dim - 1]`` and ``end`` to
    ``[-1, dim - 1]`` (``-1``: past index 0, not the last element). The selected indices are
    ``range(start, end, step)``. This differs from Python's ``slice(...).indices(dim)``, which clamps a
    start below ``-dim`` to ``-1`` (nothing) for a negative step where the spec gives index 0.

    An ``end`` of INT32_MAX or INT64_MAX (the spec's "slice to the end" sentinel) means the end in the
    step's direction for either sign of step, as onnxruntime's ``SliceBase`` reads it (numpy's ``None``):
    with a negative step it ends past index 0. INT64_MIN and every other value are clamped as above."""
    sentinel = end in _END_SENTINELS
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return min(max(start, 0), dim), dim if sentinel else min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), -1 if sentinel else min(max(end, -1), dim - 1)


def _slice_index(start: int, end: int, step: int, dim: int) -> slice:
    """A Python slice selecting exactly ``range(*_slice_bounds(...), step)`` (a stop of -1 is written
    as ``None``, which Python would otherwise read as the last element)."""
    s, e = _slice_bounds(start, end, step, dim)
    if dim == 0 or (step < 0 and s < 0):
        return slice(0, 0, 1)
    return slice(s, None if e < 0 else e, step)


def _provably_nonnegative(v) -> bool:
    """Whether the dim expression ``v`` is >= 0 for every value of its vars (dims, all >= 0): an int >= 0, or a
    polynomial in bare vars whose coefficients are all >= 0 (:func:`builder.ir.arith.poly_form`)."""
    v = _simp(v)
    if isinstance(v, int):
        return v >= 0
    form = arith.poly_form(v)
    return form is not None and all(c >= 0 and all(isinstance(a.e, E.Var) for a in key)
                                    for key, c in form.items())


def _nonempty_end(start, end):
    """A Slice end (step > 0) on a symbolic dim raised to at least ``start``, so the extent is ``max(0, end -
    start)`` as the spec's clamping gives (Slice-13: an end before the start selects nothing; ``starts=-1,
    ends=0`` on a dim of 5 is empty, not of length -4). Left as it is where ``end - start`` is provably >= 0 (the
    dims stay as simple as they were) or grows with the dims (``x[1:]``: only a dim below the start makes it
    negative, which the VM refuses when run)."""
    span = _simp(E.convert(end) - start) if isinstance(end, E.PrimExpr) or isinstance(start, E.PrimExpr) \
        else end - start
    if _provably_nonnegative(span):
        return end
    if isinstance(span, int):
        return start
    form = arith.poly_form(span)
    if form is not None and all(c >= 0 for key, c in form.items() if key):   # (only the constant term negative)
        return end
    return _simp(E.Max(E.convert(end), E.convert(start)))


def _clamp_sym(v, d):
    """A Slice bound on a dim that is symbolic (or a symbolic bound): ``>= 2**62`` -> the dim, a
    negative int counts from the end; the rest is assumed in range (checked when the code runs)."""
    if isinstance(v, int):
        if v >= _BIG:
            return d
        if v < 0:
            if v <= -_BIG:
                return 0
            return _simp(d + v)
    return v


@_register("Gather")
def _gather(im, node, ins, at):
    """ONNX ``Gather`` (opset 13) along ``axis`` with integer indices (negative ones counting from the end), (static,
    symbolic and tensor values alike); the result has ``data.shape[:axis] + indices.shape + data.shape[axis + 1:]``.
    Raises ONNXImportError for non-integer or out-of-range constant indices."""
    _check_inputs(ins, node)
    data, idx = ins
    shape = im.shape_of(data)
    nd = len(shape)
    axis = int(at.get("axis", 0))
    if not -nd <= axis < nd:
        raise ONNXImportError(f"axis {axis} out of range for a {nd}-d input")
    axis %= nd
    dim = shape[axis]
    if isinstance(idx, _Sym):
        idx = im.tensor(idx)
    if isinstance(idx, np.ndarray):
        if idx.dtype.kind not in "iu":
            raise ONNXImportError(f"indices must be integers, got {idx.dtype}")
        if isinstance(dim, int):
            if np.any((idx < -dim) | (idx >= dim)):
                raise ONNXImportError(f"indices {idx.ravel()[:8].tolist()} out of range for a dim of {dim}")
            idx = np.where(idx < 0, idx + dim, idx).astype(idx.dtype)
            if not isinstance(data, Tensor) and _fold_ok(shape[:axis] + list(idx.shape) + shape[axis + 1:]):
                if isinstance(data, _Sym):
                    return _shape_value(np.take(data.vals, idx, axis=axis), data.dtype)
                return np.take(data, idx, axis=axis)
            return op.take(im.tensor(data), im.const(idx), axis=axis)
        if np.any(idx < 0):
            vals = np.empty(idx.shape, dtype=object)
            vals.ravel()[:] = [int(i) if i >= 0 else _simp(dim + int(i)) for i in idx.ravel()]
            return op.take(im.tensor(data), im.tensor(_shape_value(vals)), axis=axis)
        return op.take(im.tensor(data), im.const(idx), axis=axis)
    ti = im.tensor(idx)
    if ti.dtype not in ("int32", "int64", "int16", "int8", "uint8", "uint16", "uint32", "uint64"):
        raise ONNXImportError(f"indices must be integers, got {ti.dtype}")
    if ti.dtype.startswith("int"):   # negative indices count from the end (an index out of range fails when run)
        zero = im.const(np.zeros((), dtype=ti.dtype))
        size = (im.const(np.array(dim, dtype=ti.dtype)) if isinstance(dim, int)
                else wrap_nested(symbolic_scalar(dim, ti.dtype), "dim"))
        ti = op.where(op.less(ti, zero), op.add(ti, size), ti)
    return op.take(im.tensor(data), ti, axis=axis)
