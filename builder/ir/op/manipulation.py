"""Struct-info inference of data-movement and creation ops: permute_dims, reshape, take, gather / scatter,
concat, split, expand_dims, squeeze, broadcast_to, repeat, pad, triu / tril, full / zeros / ones, arange,
alloc_tensor."""
from __future__ import annotations

import math
from typing import Sequence

from .. import expr as E
from ..relax import Call, DataTypeImm, ShapeExpr
from ..struct_info import StructInfo, TensorStructInfo, TupleStructInfo, dims_equal, normalize_dim
from .common import (attr_axes, definitely_different, fmt_shape, init_dtype, norm_axis, prim_arg, static_int,
    product, shape_arg, sum_dims, tensor_arg)


def infer_permute_dims(call: Call) -> StructInfo:
    """Struct info of ``R.permute_dims(x, axes=...)`` (``numpy.transpose``): dim ``i`` of the result is
    dim ``axes[i]`` of ``x``; no ``axes`` reverses the dims. Raises TypeError / ValueError for a
    non-int or out-of-range axis and ValueError when ``axes`` is not a permutation of ``x.ndim`` dims."""
    x = tensor_arg(call, 0)
    axes = call.attrs.get("axes")
    if axes is None:
        axes = list(range(x.ndim))[::-1]
    axes = [norm_axis(a, x.ndim, "R.permute_dims") for a in axes]
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"R.permute_dims: axes {call.attrs.get('axes')} are not a permutation of "
                         f"{x.ndim} dims")
    return TensorStructInfo([x.shape[a] for a in axes], x.dtype)


def infer_reshape(call: Call) -> StructInfo:
    """Struct info of ``R.reshape(x, R.shape([...]))``: the new dims in ``x``'s dtype (a ``-1`` is resolved
    before the call is built, :func:`resolve_reshape`). Raises TypeError when the new shape is not a
    shape expression, ValueError when the element counts differ (provably, for symbolic dims)."""
    x = tensor_arg(call, 0)
    new = call.args[1]
    if not isinstance(new, ShapeExpr):
        raise TypeError("R.reshape: the new shape must be a shape expression")
    total = product(x.shape)
    dims = list(new.values)
    if isinstance(total, int) and all(isinstance(d, int) for d in dims):
        if math.prod(dims) != total:
            raise ValueError(f"R.reshape: cannot reshape {fmt_shape(x.shape)} ({total} elements) "
                             f"to {fmt_shape(tuple(dims))} ({math.prod(dims)} elements)")
    elif not dims_equal(total, product(dims)):
        if definitely_different(total, product(dims)):
            raise ValueError(f"R.reshape: cannot reshape {fmt_shape(x.shape)} to {fmt_shape(tuple(dims))}")
    return TensorStructInfo(dims, x.dtype)


def resolve_reshape(shape: tuple, new_shape: Sequence) -> list:
    """Resolve one ``-1`` in ``new_shape`` against ``shape`` (symbolic dims allowed).

    The ``-1`` is the element count of ``shape`` divided exactly by the product of the other dims
    (:func:`builder.ir.arith.divide_exact`, symbolic products included: ``(batch, seq, 4)`` to
    ``[batch * seq, -1]`` gives 4). Raises ValueError when that quotient is not exact (or not provably so)
    or more than one ``-1`` is given.
    """
    new = [d if not isinstance(d, E.IntImm) else d.value for d in new_shape]
    holes = [i for i, d in enumerate(new) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ValueError(f"reshape: at most one -1 allowed in {new}")
    if not holes:
        return new
    known = [d for i, d in enumerate(new) if i != holes[0]]
    total, part = product(shape), product(known)
    if isinstance(total, int) and isinstance(part, int):
        if part == 0 or total % part:
            raise ValueError(f"reshape: cannot reshape {fmt_shape(tuple(shape))} to {new}")
        new[holes[0]] = total // part
        return new
    quotient = E.divide_exact(total, part)
    if quotient is None:
        raise ValueError(f"reshape: cannot infer -1 reshaping {fmt_shape(tuple(shape))} to {new}: "
                         f"{fmt_shape(tuple(known))} does not divide the element count exactly")
    new[holes[0]] = normalize_dim(quotient)
    return new


def infer_take(call: Call) -> StructInfo:
    """Struct info of ``R.take(data, indices, axis)`` (``numpy.take``): ``data.shape[:axis] + indices.shape
    + data.shape[axis + 1:]`` in data's dtype (axis 0 by default). Raises TypeError for non-integer
    (or bool) indices, TypeError / ValueError for a bad axis. Index bounds are checked at run time."""
    x, idx = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "indices")
    if not E.is_int_dtype(idx.dtype) or idx.dtype == "bool":
        raise TypeError(f"R.take: indices must be integers, got {idx.dtype}")
    axis = norm_axis(call.attrs.get("axis", 0), x.ndim, "R.take")
    return TensorStructInfo(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def infer_gather_elements(call: Call) -> StructInfo:
    """``R.gather_elements(data, indices, axis)``: the indices' shape and the data's dtype; the ranks
    equal and, for dims other than ``axis``, the indices' no larger than the data's (when static). Raises
    TypeError for non-integer indices, ValueError for ranks that differ, an indices dim larger than the data's
    or a bad axis."""
    x, idx = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "indices")
    if not E.is_int_dtype(idx.dtype) or idx.dtype == "bool":
        raise TypeError(f"R.gather_elements: indices must be integers, got {idx.dtype}")
    if idx.ndim != x.ndim:
        raise ValueError(f"R.gather_elements: data {fmt_shape(x.shape)} and indices {fmt_shape(idx.shape)} need the "
                         "same rank")
    axis = norm_axis(call.attrs.get("axis", 0), x.ndim, "R.gather_elements")
    for d, (a, b) in enumerate(zip(idx.shape, x.shape)):
        sa, sb = static_int(a), static_int(b)
        if d != axis and sa is not None and sb is not None and sa > sb:
            raise ValueError(f"R.gather_elements: indices {fmt_shape(idx.shape)} are larger than data "
                             f"{fmt_shape(x.shape)} in dim {d}")
    return TensorStructInfo(idx.shape, x.dtype)


#: How a scatter's update combines with the element it lands on (ONNX's ``reduction`` attribute; ``update``
#: is its ``none``, TVM's name).
SCATTER_REDUCTIONS = ("update", "add", "mul", "max", "min")


def _scatter_args(call: Call):
    x, idx, upd = (tensor_arg(call, i, n) for i, n in enumerate(("data", "indices", "updates")))
    name = call.op.name
    if not E.is_int_dtype(idx.dtype) or idx.dtype == "bool":
        raise TypeError(f"{name}: indices must be integers, got {idx.dtype}")
    if upd.dtype != x.dtype:
        raise TypeError(f"{name}: updates must have the data's dtype {x.dtype}, got {upd.dtype}")
    reduction = call.attrs.get("reduction", "update")
    if reduction not in SCATTER_REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {SCATTER_REDUCTIONS}, got {reduction!r}")
    return x, idx, upd


def _no_larger(name: str, what, a, b, dims) -> None:
    for d in dims:
        sa, sb = static_int(a.shape[d]), static_int(b.shape[d])
        if sa is not None and sb is not None and sa > sb:
            raise ValueError(f"{name}: {what} {fmt_shape(a.shape)} larger than {fmt_shape(b.shape)} in dim {d}")


def infer_scatter_elements(call: Call) -> StructInfo:
    """``R.scatter_elements(data, indices, updates, axis, reduction)``: the data's shape and dtype. The three
    have the same rank; the indices are no larger than the updates in any dim, nor than the data outside
    ``axis`` (when static). Raises TypeError for non-integer indices or updates of another dtype, ValueError
    for an unknown ``reduction`` (:data:`SCATTER_REDUCTIONS`), ranks that differ or indices larger than
    allowed."""
    x, idx, upd = _scatter_args(call)
    if not (x.ndim == idx.ndim == upd.ndim):
        raise ValueError(f"R.scatter_elements: data {fmt_shape(x.shape)}, indices {fmt_shape(idx.shape)} and "
                         f"updates {fmt_shape(upd.shape)} need the same rank")
    axis = norm_axis(call.attrs.get("axis", 0), x.ndim, "R.scatter_elements")
    _no_larger("R.scatter_elements", "indices", idx, upd, range(x.ndim))
    _no_larger("R.scatter_elements", "indices", idx, x, [d for d in range(x.ndim) if d != axis])
    return TensorStructInfo(x.shape, x.dtype)


def infer_scatter_nd(call: Call) -> StructInfo:
    """``R.scatter_nd(data, indices, updates, reduction)`` (ONNX ``ScatterND``): the data's shape and dtype.
    ``indices`` is ``(*J, q)`` with a static ``1 <= q <= data.ndim``; ``updates`` is ``(*J, *data.shape[q:])``
    (checked where static). Raises TypeError for non-integer indices or updates of another dtype, ValueError
    for an unknown ``reduction``, a ``q`` that is not static or not in ``[1, data.ndim]`` and updates of
    another shape."""
    x, idx, upd = _scatter_args(call)
    q = static_int(idx.shape[-1]) if idx.ndim else None
    if q is None or not 1 <= q <= x.ndim:
        raise ValueError(f"R.scatter_nd: the indices {fmt_shape(idx.shape)} need a static last dim in "
                         f"[1, {x.ndim}]")
    want = list(idx.shape[:-1]) + list(x.shape[q:])
    if upd.ndim != len(want) or any(definitely_different(a, b) for a, b in zip(upd.shape, want)):
        raise ValueError(f"R.scatter_nd: updates {fmt_shape(upd.shape)} must have shape {fmt_shape(want)} "
                         f"(indices' leading dims, then the data's past the first {q})")
    return TensorStructInfo(x.shape, x.dtype)


#: The most inputs one concat takes (issue 40 fuzzers). Its kernel selects the input of each element through
#: a balanced search of ``if_then_else`` (``te.topi.concat``): LLVM's code generation of that body grows with
#: the square of the inputs (fresh compiles: 1,000 inputs 3.8 s, 2,000 13.4 s, 4,000 135 s), so past this
#: bound the concat is refused when the graph is built (recipe: at the call; ONNX: at the node) instead of a
#: build that seems to hang. Concatenate in groups (a concat of concats) for more.
MAX_CONCAT_INPUTS = 1024


def infer_concat(call: Call) -> StructInfo:
    """``R.concat(tuple, axis)``: the tensors' common dims and the sum along ``axis`` (``numpy.concatenate``).
    Raises TypeError for a non-tuple / non-tensor element or differing dtypes, ValueError for an empty tuple,
    more than :data:`MAX_CONCAT_INPUTS` tensors, differing ranks or dims."""
    sinfo = call.args[0].struct_info
    if not isinstance(sinfo, TupleStructInfo):
        raise TypeError(f"R.concat: expects a tuple of tensors, got {sinfo!r}")
    if not sinfo.fields:
        raise ValueError("R.concat: needs at least one tensor")
    if len(sinfo.fields) > MAX_CONCAT_INPUTS:
        raise ValueError(f"R.concat: {len(sinfo.fields)} tensors are more than one concat takes "
                         f"(MAX_CONCAT_INPUTS = {MAX_CONCAT_INPUTS}: its kernel's compile time grows with the "
                         "square of the inputs); concatenate them in groups")
    fields = []
    for i, f in enumerate(sinfo.fields):
        if not isinstance(f, TensorStructInfo) or f.shape is None:
            raise TypeError(f"R.concat: element {i} must be a tensor with a known shape, got {f!r}")
        fields.append(f)
    first = fields[0]
    axis = call.attrs.get("axis", 0)
    if axis is None:
        raise ValueError("R.concat: axis=None (flattening) is not supported; give an axis")
    for i, f in enumerate(fields[1:], start=1):
        if f.dtype != first.dtype:
            raise TypeError(f"R.concat: dtypes differ: element 0 is {first.dtype}, element {i} is "
                            f"{f.dtype}")
        if f.ndim != first.ndim:
            raise ValueError(f"R.concat: ranks differ: element 0 {fmt_shape(first.shape)} vs "
                             f"element {i} {fmt_shape(f.shape)}")
    ax = norm_axis(axis, first.ndim, "R.concat")
    out = list(first.shape)
    for i, f in enumerate(fields[1:], start=1):
        for d in range(first.ndim):
            if d != ax and definitely_different(first.shape[d], f.shape[d]):
                raise ValueError(f"R.concat: shapes differ outside axis {axis}: element 0 "
                                 f"{fmt_shape(first.shape)} vs element {i} {fmt_shape(f.shape)}")
    out[ax] = sum_dims(f.shape[ax] for f in fields)
    return TensorStructInfo(out, first.dtype)


def split_sizes(length, indices_or_sections, opname: str = "split") -> list:
    """Sizes of the pieces that ``split`` cuts a dim of ``length`` into (TVM's rule).

    An int ``n``: ``n - 1`` pieces of ``ceil(length / n)`` and a last piece with the rest
    (``length - ceil(length / n) * (n - 1)``; ValueError when that is negative). A list of
    indices: the pieces between consecutive indices, clamped to ``[0, length]`` for a static
    ``length`` (for a symbolic ``length`` the indices are assumed to lie within it).
    Returns ints or simplified int64 PrimExprs. Raises ValueError for ``n < 1``.
    """
    if isinstance(indices_or_sections, (list, tuple)):
        idx = [int(i) for i in indices_or_sections]
        if isinstance(length, int):
            bounds = [0] + [min(max(i, 0), length) for i in idx] + [length]
            return [max(b - a, 0) for a, b in zip(bounds, bounds[1:])]
        sizes: list = []
        prev = 0
        for i in idx:
            sizes.append(max(max(i, 0) - prev, 0))
            prev = max(i, prev)
        sizes.append(normalize_dim(E.simplify(length - prev)))
        return sizes
    n = int(indices_or_sections)
    if n < 1:
        raise ValueError(f"{opname}: the number of sections must be >= 1, got {n}")
    if n == 1:
        return [length]
    if isinstance(length, int):
        size = -(-length // n)
        last = length - size * (n - 1)
        if last < 0:
            raise ValueError(f"{opname}: cannot split a dim of {length} into {n} sections of "
                             f"{size} (the last one would have {last} elements)")
        return [size] * (n - 1) + [last]
    size = normalize_dim(E.simplify((length + (n - 1)) // n))
    last = normalize_dim(E.simplify(length - size * (n - 1)))
    return [size] * (n - 1) + [last]


def infer_split(call: Call) -> StructInfo:
    """Struct info of ``R.split(x, indices_or_sections, axis)`` (``numpy.array_split`` for a section count,
    ``numpy.split`` for indices): a tuple of tensors, each ``x``'s shape with dim ``axis`` cut to the
    sizes of :func:`split_sizes`. Raises TypeError when ``indices_or_sections`` is missing or a bool,
    ValueError for a bad axis or section count."""
    x = tensor_arg(call, 0)
    ios = call.attrs.get("indices_or_sections")
    if ios is None or isinstance(ios, bool):
        raise TypeError("R.split: indices_or_sections must be an int or a list of ints")
    axis = norm_axis(call.attrs.get("axis", 0), x.ndim, "R.split")
    sizes = split_sizes(x.shape[axis], ios, "R.split")
    fields = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        fields.append(TensorStructInfo(shape, x.dtype))
    return TupleStructInfo(fields)


def infer_expand_dims(call: Call) -> StructInfo:
    """Struct info of ``R.expand_dims(x, axis)``: ``x``'s shape with a 1 inserted at each output position in
    ``axis`` (an int or a list, negative counting from the end of the output). Raises ValueError for an
    axis outside the output's ``[-ndim, ndim)`` or a repeated axis."""
    x = tensor_arg(call, 0)
    axes = call.attrs.get("axis")
    axes = [axes] if isinstance(axes, int) else list(axes or [])
    out_ndim = x.ndim + len(axes)
    norm = []
    for a in axes:
        if not -out_ndim <= a < out_ndim:
            raise ValueError(f"R.expand_dims: axis {a} is out of range for an output of ndim "
                             f"{out_ndim} (input {fmt_shape(x.shape)})")
        norm.append(a % out_ndim)
    if len(set(norm)) != len(norm):
        raise ValueError(f"R.expand_dims: repeated axis in {axes}")
    dims = iter(x.shape)
    return TensorStructInfo([1 if d in norm else next(dims) for d in range(out_ndim)], x.dtype)


def infer_squeeze(call: Call) -> StructInfo:
    """Struct info of ``R.squeeze(x, axis)``: ``x``'s shape without the dims in ``axis``; with no ``axis``,
    without every static 1 (a symbolic dim stays, as it cannot be proven 1). Raises ValueError when a
    named dim is a constant other than 1, or for a bad / repeated axis."""
    x = tensor_arg(call, 0)
    axes = attr_axes(call, x.ndim)
    if axes is None:
        # static 1-dims go; symbolic dims cannot be proven to be 1 and stay
        return TensorStructInfo([d for d in x.shape if not (isinstance(d, int) and d == 1)], x.dtype)
    for a in axes:
        d = x.shape[a]
        if isinstance(d, int) and d != 1:
            raise ValueError(f"R.squeeze: dim {a} of {fmt_shape(x.shape)} is {d}, not 1")
    return TensorStructInfo([d for i, d in enumerate(x.shape) if i not in axes], x.dtype)


def infer_broadcast_to(call: Call) -> StructInfo:
    """Struct info of ``R.broadcast_to(x, R.shape(target))`` (numpy broadcasting, aligned at the last dim):
    the target shape in ``x``'s dtype. Raises TypeError when the target is not a shape expression,
    ValueError for a target of lower rank or a dim of ``x`` that is neither 1 nor the target's."""
    x = tensor_arg(call, 0)
    target = shape_arg(call, 1)
    if len(target) < x.ndim:
        raise ValueError(f"R.broadcast_to: cannot broadcast {fmt_shape(x.shape)} to the "
                         f"lower-rank shape {fmt_shape(target)}")
    lead = len(target) - x.ndim
    for i, d in enumerate(x.shape):
        t = target[lead + i]
        if not (isinstance(d, int) and d == 1) and definitely_different(d, t):
            raise ValueError(f"R.broadcast_to: cannot broadcast {fmt_shape(x.shape)} to "
                             f"{fmt_shape(target)} (dim {d} vs {t})")
    return TensorStructInfo(target, x.dtype)


def infer_repeat(call: Call) -> StructInfo:
    """Struct info of ``R.repeat(x, repeats, axis)`` (``numpy.repeat`` with one repeat count): dim ``axis``
    times ``repeats``; no axis flattens, giving ``(numel * repeats,)``. Raises ValueError for
    ``repeats`` that is not an int >= 0, TypeError / ValueError for a bad axis."""
    x = tensor_arg(call, 0)
    repeats = call.attrs.get("repeats")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 0:
        raise ValueError(f"R.repeat: repeats must be an int >= 0, got {repeats!r}")
    axis = call.attrs.get("axis")
    if axis is None:
        total = product(x.shape)
        total = total * repeats if isinstance(total, int) else normalize_dim(E.simplify(total * repeats))
        return TensorStructInfo([total], x.dtype)
    ax = norm_axis(axis, x.ndim, "R.repeat")
    shape = list(x.shape)
    d = shape[ax]
    shape[ax] = d * repeats if isinstance(d, int) else normalize_dim(E.simplify(d * repeats))
    return TensorStructInfo(shape, x.dtype)


PAD_MODES = ("constant", "edge", "reflect", "wrap")


def infer_pad(call: Call) -> StructInfo:
    """Struct info of ``R.nn.pad(x, pad_width, pad_value, pad_mode)`` (``numpy.pad``): each dim ``i`` grows
    by ``pad_width[2i] + pad_width[2i + 1]`` (before, after). ``pad_mode`` is one of :data:`PAD_MODES`.
    Raises ValueError when ``pad_width`` is not ``2 * ndim`` ints >= 0, for an unknown mode, for
    ``reflect`` padding not smaller than a static dim (numpy's limit), and ``edge`` / ``wrap`` padding of an
    empty dim."""
    x = tensor_arg(call, 0)
    width = list(call.attrs.get("pad_width") or [])
    if len(width) != 2 * x.ndim:
        raise ValueError(f"R.nn.pad: pad_width needs 2 values per axis ({2 * x.ndim} for "
                         f"{fmt_shape(x.shape)}), got {len(width)}: {width}")
    if any(not isinstance(w, int) or isinstance(w, bool) or w < 0 for w in width):
        raise ValueError(f"R.nn.pad: pad_width values must be ints >= 0, got {width}")
    mode = call.attrs.get("pad_mode", "constant")
    if mode not in PAD_MODES:
        raise ValueError(f"R.nn.pad: pad_mode must be one of {PAD_MODES}, got {mode!r}")
    shape = []
    for i, d in enumerate(x.shape):
        lo, hi = width[2 * i], width[2 * i + 1]
        if mode == "reflect" and isinstance(d, int) and (lo > d - 1 or hi > d - 1):
            raise ValueError(f"R.nn.pad: reflect padding ({lo}, {hi}) of dim {i} must be smaller "
                             f"than its size {d} (input {fmt_shape(x.shape)})")
        if mode in ("edge", "wrap") and isinstance(d, int) and d == 0 and (lo or hi):
            raise ValueError(f"R.nn.pad: {mode} padding of the empty dim {i}")
        shape.append(d + lo + hi if isinstance(d, int) else normalize_dim(E.simplify(d + (lo + hi))))
    return TensorStructInfo(shape, x.dtype)


def infer_trilu(call: Call) -> StructInfo:
    """Struct info of ``R.triu(x, k)`` / ``R.tril(x, k)`` (``numpy.triu`` / ``numpy.tril`` over the last two
    dims): ``x``'s shape and dtype. Raises ValueError for ndim < 2, TypeError when ``k`` is not an
    integer ``R.prim_value``."""
    x = tensor_arg(call, 0)
    if x.ndim < 2:
        raise ValueError(f"{call.op.name}: needs a tensor of ndim >= 2, got {fmt_shape(x.shape)}")
    k = prim_arg(call, 1, "k")
    if not E.is_int_dtype(k.dtype):
        raise TypeError(f"{call.op.name}: k must be an integer, got {k.dtype}")
    return TensorStructInfo(x.shape, x.dtype)


def infer_full(call: Call) -> StructInfo:
    """Struct info of ``R.full(R.shape(s), fill_value, dtype)``: shape ``s`` in ``dtype`` (the fill value's
    dtype when absent or ``"void"``). Raises TypeError when the shape is not a shape expression or the
    dtype is unknown, ValueError when ``fill_value`` is not 0-d."""
    shape = shape_arg(call, 0)
    fill = tensor_arg(call, 1, "fill_value")
    if fill.ndim != 0:
        raise ValueError(f"R.full: fill_value must be a scalar (0-d) tensor, got shape "
                         f"{fmt_shape(fill.shape)}")
    return TensorStructInfo(shape, init_dtype(call, fill.dtype))


def infer_zeros_ones(call: Call) -> StructInfo:
    """Struct info of ``R.zeros`` / ``R.ones(R.shape(s), dtype)``: shape ``s`` in ``dtype``. Raises TypeError
    when the shape is not a shape expression or the dtype is missing or unknown
    (:func:`.common.init_dtype`)."""
    return TensorStructInfo(shape_arg(call, 0), init_dtype(call))


def arange_length(start, end, step) -> int | E.PrimExpr:
    """Number of elements of ``arange(start, end, step)``: ``max(0, ceil((end - start) / step))``.

    Python numbers give an int. Integer PrimExprs need a static ``step`` and give
    ``(end - start + step - 1) // step`` (``step > 0``; mirrored for ``step < 0``), simplified.
    Raises ValueError for a zero step and a symbolic step or float bound.
    """
    vals = []
    for v in (start, end, step):
        if isinstance(v, E.IntImm):
            v = v.value
        elif isinstance(v, E.FloatImm):
            v = v.value
        vals.append(v)
    start, end, step = vals
    if isinstance(step, (int, float)) and step == 0:
        raise ValueError("arange: step must not be zero")
    if all(isinstance(v, (int, float)) for v in vals):
        if all(isinstance(v, int) for v in vals):
            return max(0, -((start - end) // step))
        return max(0, math.ceil((end - start) / step))
    if not isinstance(step, int):
        raise ValueError(f"arange: a symbolic bound needs a static integer step, got {step}")
    for v in (start, end):
        if isinstance(v, float) or (isinstance(v, E.PrimExpr) and not E.is_int_dtype(v.dtype)):
            raise ValueError("arange: symbolic bounds must be integers")
    if step > 0:
        n = (E.convert(end) - start + (step - 1)) // step
    else:
        n = (E.convert(start) - end + (-step - 1)) // (-step)
    return normalize_dim(E.simplify(n))


def infer_arange(call: Call) -> StructInfo:
    """Struct info of ``R.arange(start, end, step, dtype)`` (``numpy.arange``; the bounds are
    ``R.prim_value``): a 1-D tensor of :func:`arange_length` elements in ``dtype``. Raises TypeError for
    a bound that is not a ``R.prim_value`` or a missing / unknown dtype, ValueError for a zero or
    symbolic step."""
    start, end, step = (prim_arg(call, i, w) for i, w in enumerate(("start", "end", "step")))
    return TensorStructInfo([arange_length(start, end, step)], init_dtype(call))


def infer_alloc_tensor(call: Call) -> StructInfo:
    """Struct info of ``R.builtin.alloc_tensor(R.shape(s), R.dtype(d), ...)``: an uninitialized tensor of
    shape ``s`` and dtype ``d``. Raises TypeError when argument 0 is not a shape expression or argument 1
    not an ``R.dtype``."""
    shape = shape_arg(call, 0)
    dtype = call.args[1]
    if not isinstance(dtype, DataTypeImm):
        raise TypeError(f"R.builtin.alloc_tensor: argument 1 must be a dtype (R.dtype(...)), got "
                        f"{type(dtype).__name__}")
    return TensorStructInfo(shape, dtype.value)


def _slice_bound(v, what: str, opname: str):
    """A begin / end value: a Python int, or an int PrimExpr (an IntImm becomes its int)."""
    if isinstance(v, E.IntImm) and E.is_int_dtype(v.dtype) and v.dtype != "bool":
        return int(v.value)
    if isinstance(v, bool) or not isinstance(v, (int, E.PrimExpr)):
        raise TypeError(f"{opname}: {what} values must be ints or symbolic int expressions, got {v!r}")
    if isinstance(v, E.PrimExpr) and (not E.is_int_dtype(v.dtype) or v.dtype == "bool"):
        raise TypeError(f"{opname}: {what} value {v} must be an integer expression, got dtype {v.dtype}")
    return v


def slice_range(dim, begin, end, stride: int, opname: str = "strided_slice") -> tuple:
    """``(start, length)`` of the slice ``begin:end:stride`` of a dim of extent ``dim``.

    Static ``dim``, ``begin`` and ``end``: Python / numpy slicing (a negative bound counts from
    the end, then both are clamped to ``[0, dim]``; ``length = max(0, ceil((end - begin) /
    stride))``). Otherwise a negative static bound still counts from the end (``dim + k``) and
    the bounds are *assumed* in range, ``0 <= begin <= end <= dim`` (TVM's ``assume_inbound``):
    ``length = (end - begin + stride - 1) // stride``, a symbolic dim. The kernel checks every
    index it reads against ``dim`` when bounds are symbolic (an error at run time, never a read
    out of bounds), and the VM refuses a negative length. ``stride`` must be a positive int
    (negative strides are not supported: ValueError).
    """
    if isinstance(stride, bool) or not isinstance(stride, int):
        raise TypeError(f"{opname}: strides must be ints, got {stride!r}")
    if stride <= 0:
        raise ValueError(f"{opname}: strides must be positive (negative strides are not supported), got {stride}")
    b, e = _slice_bound(begin, "begin", opname), _slice_bound(end, "end", opname)
    n = dim if isinstance(dim, int) else None
    if n is None and isinstance(dim, E.IntImm):
        n = dim.value
    if n is not None and isinstance(b, int) and isinstance(e, int):
        b, e = (min(max(v + n if v < 0 else v, 0), n) for v in (b, e))
        return b, max(0, -((b - e) // stride))
    b, e = (E.simplify(E.convert(dim) + v) if isinstance(v, int) and v < 0 else v for v in (b, e))
    span = E.convert(e) - b
    length = span if stride == 1 else (span + (stride - 1)) // stride
    start = b if isinstance(b, int) else normalize_dim(E.simplify(b))
    return start, normalize_dim(E.simplify(length))


def infer_strided_slice(call: Call) -> StructInfo:
    """``R.strided_slice(x, axes=[...], begin=[...], end=[...], strides=[...], assume_inbound=b)``:
    ``x`` with dim ``axes[k]`` replaced by the length of ``begin[k]:end[k]:strides[k]``
    (:func:`slice_range`); ``strides`` None means 1. Raises ValueError when ``axes``, ``begin``, ``end`` and
    ``strides`` differ in length, for a repeated axis or a stride that is not a positive int
    (:func:`slice_range`), TypeError / ValueError for a bad axis or bound."""
    x = tensor_arg(call, 0, "data")
    name = "R.strided_slice"
    a = call.attrs
    axes, begin, end = list(a.get("axes") or []), list(a.get("begin") or []), list(a.get("end") or [])
    strides = a.get("strides")
    strides = [1] * len(axes) if strides is None else list(strides)
    strides = [s.value if isinstance(s, E.IntImm) else s for s in strides]
    if not (len(axes) == len(begin) == len(end) == len(strides)):
        raise ValueError(f"{name}: axes, begin, end and strides need one value each per sliced axis, got "
                         f"{len(axes)}, {len(begin)}, {len(end)} and {len(strides)}")
    norm = [norm_axis(ax, x.ndim, name) for ax in axes]
    if len(set(norm)) != len(norm):
        raise ValueError(f"{name}: repeated axis in {axes}")
    shape = list(x.shape)
    for ax, b, e, s in zip(norm, begin, end, strides):
        shape[ax] = slice_range(x.shape[ax], b, e, s, name)[1]
    return TensorStructInfo(shape, x.dtype)
