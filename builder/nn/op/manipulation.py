"""Tensor manipulation: reshape, permute, gather, concatenate / split, add / remove / broadcast dims,
repeat, tile, pad, triangular masks."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...ir import expr as E
from ...ir import relax as rx
from ...ir.op import resolve_reshape
from ..core import Tensor, wrap_nested
from .common import (axis_list, builtin_call, check_ndim, describe, op_call, recipe_function, replaces_record,
                     shape_dims, short)


def permute_dims(x: Tensor, axes: Sequence[int] | None = None, name: str | None = None) -> Tensor:
    """Permute dimensions (``numpy.transpose``); ``axes=None`` reverses them. Raises TypeError when
    ``axes`` is not None or a list / tuple (of ints: the op's shape rule checks them)."""
    if axes is not None and not isinstance(axes, (list, tuple)):
        raise TypeError(f"permute_dims: axes must be a list of ints or None, got {describe(axes)}")
    return wrap_nested(op_call("permute_dims", [x._expr], axes=None if axes is None else list(axes)),
                       name or "permute_dims")


def reshape(x: Tensor, shape: Sequence, name: str = "reshape") -> Tensor:
    """Reshape (row-major); one ``-1`` is inferred, symbolic dims allowed.

    Raises TypeError when ``shape`` is not a sequence of ints / int64 PrimExprs, ValueError for a
    negative dim other than ``-1``, more than :data:`~core.limits.MAX_NDIM` dims, or element counts
    that cannot match."""
    if isinstance(shape, (int, str, E.PrimExpr, Tensor)) or not isinstance(shape, Sequence):
        raise TypeError(f"reshape: shape must be a list of dims, got {type(shape).__name__}")
    check_ndim(len(shape), "reshape")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer, E.PrimExpr)):
            raise TypeError(f"reshape: invalid dim {short(d)} in the shape (ints or symbolic int64 dims)")
        if isinstance(d, (int, np.integer)) and d < -1:
            raise ValueError(f"reshape: negative dim {d} in the shape (only -1, inferred, may be negative)")
    dims = resolve_reshape(tuple(x.shape), list(shape))
    return wrap_nested(op_call("reshape", [x._expr, rx.ShapeExpr(dims)]), name)


def take(x: Tensor, indices: Tensor, axis: int | None = None, name: str = "take") -> Tensor:
    """Gather ``x`` along ``axis`` at integer ``indices`` (``numpy.take``; out-of-range indices are
    an error the caller must avoid: mode "fast" does no clipping)."""
    return wrap_nested(op_call("take", [x._expr, indices._expr], axis=0 if axis is None else axis,
                             mode="fast"), name)


def nonzero(x: Tensor, name: str = "nonzero") -> Tensor:
    """The indices of the nonzero (true) elements of ``x`` (any dtype, at least 1-D): an int64
    ``(x.ndim, n)`` tensor, column ``j`` the index of the ``j``-th nonzero element in row-major order
    (ONNX ``NonZero``, TVM's ``R.nonzero``; ``torch.nonzero(x).T``). ``n`` is known only when the
    function runs: a new symbolic dim (``num_nonzero``, at most ``x``'s element count) that the VM
    binds from the result (``vm.builtin.nonzero``, then ``match_shape``), so the ops after it have
    shapes in ``n`` like any input dim. Raises ValueError for a 0-d ``x``."""
    from ...ir.struct_info import TensorStructInfo
    if x.ndim == 0:
        raise ValueError("nonzero: x must have at least one dim (a 0-d tensor has no indices to give)")
    n = E.SizeVar("num_nonzero", "int64")
    call = builtin_call("vm.builtin.nonzero", [x._expr], TensorStructInfo((x.ndim, n), "int64"))
    return wrap_nested(call, name)


def repeat_interleave_indices(repeats: Tensor, name: str = "repeat_indices") -> Tensor:
    """Index ``i`` repeated ``repeats[i]`` times (``torch.repeat_interleave(repeats)``): ``repeats`` a 1-D
    integer tensor (non-negative: a negative one is an error when the code runs) -> an int64 ``(n,)``
    tensor, ``n = sum(repeats)`` a new symbolic dim (``total_repeats``) bound when the function runs
    (``vm.builtin.repeat_indices``, then ``match_shape``; a total beyond the memory available is a
    MemoryLimitError then). ``take(x, repeat_interleave_indices(r), axis=d)`` is
    ``torch.repeat_interleave(x, r, dim=d)``. Raises ValueError / TypeError for other shapes or dtypes."""
    from ...ir.struct_info import TensorStructInfo
    if repeats.ndim != 1 or not E.is_int_dtype(repeats.dtype):
        raise ValueError(f"repeat_interleave_indices: repeats must be a 1-D integer tensor, got {repeats.dtype} "
                         f"{list(repeats.shape)}")
    n = E.SizeVar("total_repeats", "int64")
    call = builtin_call("vm.builtin.repeat_indices", [repeats._expr], TensorStructInfo((n,), "int64"))
    return wrap_nested(call, name)


def unique(x: Tensor, sorted: bool = True, name: str = "unique") -> tuple:  # noqa: A002 - torch's / ONNX's name
    """The distinct values of ``x`` flattened (``numpy.unique``; ``torch.unique``, ONNX ``Unique`` without an
    axis): ``(values (n,) x.dtype, first (n,) int64, inverse (size,) int64, counts (n,) int64)`` -- the values
    ascending (``sorted``) or in the order they first occur, the flat index of each one's first occurrence, the
    index into ``values`` of every element, and each one's count. ``n`` is a new symbolic dim (``num_unique``)
    bound when the function runs (``vm.builtin.unique``, then ``match_shape``; results beyond the memory
    available are a MemoryLimitError then)."""
    from ...ir.struct_info import TensorStructInfo, TupleStructInfo
    n = E.SizeVar("num_unique", "int64")
    size = 1
    for d in x.shape:
        size = size * d
    size = E.simplify(size) if isinstance(size, E.PrimExpr) else size
    sinfo = TupleStructInfo([TensorStructInfo((n,), x.dtype), TensorStructInfo((n,), "int64"),
                             TensorStructInfo((size,), "int64"), TensorStructInfo((n,), "int64")])
    call = builtin_call("vm.builtin.unique", [x._expr, rx.PrimValue(int(bool(sorted)), "int64")], sinfo)
    return wrap_nested(call, name)


def gather_elements(x: Tensor, indices: Tensor, axis: int = 0, name: str = "gather_elements") -> Tensor:
    """``out[i...] = x[i with i[axis] = indices[i...]]`` (``torch.gather``, ONNX ``GatherElements``,
    ``numpy.take_along_axis``): the indices' shape, ``x``'s dtype; negative indices count from the end,
    an index out of range is an error when the code runs. Raises TypeError for non-integer indices,
    ValueError for differing ranks or an index dim larger than ``x``'s: ``R.gather_elements(x, indices,
    axis=a)``."""
    return wrap_nested(op_call("gather_elements", [x._expr, indices._expr], axis=int(axis)), name)


def scatter_elements(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "update",
                     name: str = "scatter_elements") -> Tensor:
    """``x`` with ``out[i with i[axis] = indices[i]] = updates[i]`` for every position ``i`` of
    ``indices``, in row-major order (``torch.Tensor.scatter``, ONNX ``ScatterElements``; TVM's
    ``R.scatter_elements(x, indices, updates, axis=a, reduction=r)``). ``reduction``: ``"update"``
    (the last write wins), ``"add"``, ``"mul"``, ``"max"``, ``"min"`` combine with the element.

    ``x``, ``indices`` (integers) and ``updates`` (``x``'s dtype) have the same rank; the indices may
    be smaller than ``updates`` and, outside ``axis``, than ``x``. Negative indices count from the
    end; one out of range is an error when the code runs. Raises TypeError / ValueError for dtypes,
    ranks, sizes or a reduction that do not fit."""
    return wrap_nested(op_call("scatter_elements", [x._expr, indices._expr, updates._expr], axis=int(axis),
                               reduction=str(reduction)), name)


def scatter_nd(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "update",
               name: str = "scatter_nd") -> Tensor:
    """``x`` with the slices ``out[indices[j]] = updates[j]`` for every ``j`` in row-major order (ONNX
    ``ScatterND``, TVM's ``R.scatter_nd(x, indices, updates, reduction=r)``): ``indices`` is ``(*J, q)``
    with a static ``q <= x.ndim`` (each row an index into ``x``'s first ``q`` dims), ``updates`` is
    ``(*J, *x.shape[q:])``. ``reduction`` as in :func:`scatter_elements`; negative indices count from the
    end, one out of range is an error when the code runs. Raises TypeError / ValueError for dtypes or
    shapes that do not fit."""
    return wrap_nested(op_call("scatter_nd", [x._expr, indices._expr, updates._expr],
                               reduction=str(reduction)), name)


def concat(x: Sequence[Tensor], dim: int, name: str = "concat") -> Tensor:
    """Concatenate tensors along ``dim`` (``numpy.concatenate``): ``R.concat((a, b), axis=dim)``.

    All tensors need the same dtype and rank and equal dims outside ``dim`` (symbolic dims
    allowed); the result's ``dim`` is the sum. Raises TypeError / ValueError naming the
    mismatching elements.
    """
    exprs = [t._expr for t in x]
    return wrap_nested(op_call("concat", [rx.Tuple(exprs)], axis=int(dim)), name)


def split(ary: Tensor, indices_or_sections: int | Sequence[int], axis: int = 0,
          name: str = "split") -> tuple[Tensor, ...]:
    """Split ``ary`` along ``axis``: ``R.split(x, indices_or_sections=..., axis=...)``.

    An int ``n`` gives ``n`` pieces of ``ceil(d / n)`` (the last one takes the rest, as TVM and
    ``torch.chunk``); a list of indices cuts before each index (``numpy.split``). Returns a
    tuple of Tensors (bindings ``split``, ``split_0``, ``split_1``, ...).
    """
    ios = (int(indices_or_sections) if isinstance(indices_or_sections, (int, np.integer))
           else [int(i) for i in indices_or_sections])
    return wrap_nested(op_call("split", [ary._expr], indices_or_sections=ios, axis=int(axis)), name)


@recipe_function
def chunk(x: Tensor, chunks: int, dim: int = 0, name: str = "chunk") -> tuple[Tensor, ...]:
    """``chunks`` pieces of ``x`` along ``dim``: ``R.split(x, indices_or_sections=chunks, axis=dim)``
    (each ``ceil(d / chunks)`` long, the last one shorter)."""
    return wrap_nested(op_call("split", [x._expr], indices_or_sections=int(chunks), axis=int(dim)),
                       name)


def unsqueeze(x: Tensor, dim: int, name: str = "unsqueeze") -> Tensor:
    """Insert a size-1 axis at ``dim`` (negative counts from the end of the result):
    ``R.expand_dims(x, axis=[dim])``."""
    return wrap_nested(op_call("expand_dims", [x._expr], axis=[int(dim)]), name)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = -1, name: str = "squeeze") -> Tensor:
    """Remove size-1 axes: ``R.squeeze(x, axis=[...])``; ``axis=None`` removes every static
    size-1 dim. Raises ValueError when a given axis has a static size other than 1."""
    return wrap_nested(op_call("squeeze", [x._expr], axis=axis_list(axis)), name)


@replaces_record
def broadcast_to(x: Tensor, shape: Sequence, name: str = "broadcast_to") -> Tensor:
    """Broadcast ``x`` to ``shape`` (numpy rules): ``R.broadcast_to(x, R.shape([...]))``.
    Raises ValueError when a dim of ``x`` is neither 1 nor the target dim."""
    return wrap_nested(op_call("broadcast_to", [x._expr, rx.ShapeExpr(shape_dims(shape, "broadcast_to"))]),
                       name)


def repeat(x: Tensor, repeats: int, axis: int | None = None, name: str = "repeat") -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``); ``axis=None``
    repeats the flattened tensor: ``R.repeat(x, repeats=r, axis=a)``."""
    return wrap_nested(op_call("repeat", [x._expr], repeats=int(repeats),
                             axis=None if axis is None else int(axis)), name)


def flip(x: Tensor, axis: int | Sequence[int], name: str = "flip") -> Tensor:
    """``x`` reversed along ``axis`` (``numpy.flip`` / ``torch.flip``, TVM's ``R.flip``): per axis a
    ``take`` of the indices ``d - 1 .. 0`` (``arange``, so symbolic dims work). Raises ValueError for an
    axis out of range."""
    from .creation import arange

    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = x
    for a in axes:
        a = int(a) % x.ndim if -x.ndim <= int(a) < x.ndim else None
        if a is None:
            raise ValueError(f"flip: axis {axis} is out of range for a {x.ndim}-D tensor")
        d = x.shape[a]
        idx = arange(d - 1 if isinstance(d, int) else E.simplify(d - 1), -1, -1, dtype="int64")
        out = take(out, idx, axis=a, name=name)
    return out


def tile(x: Tensor, repeats: Sequence[int], name: str = "tile") -> Tensor:
    """``x`` repeated as a block ``repeats[i]`` times along each dim (``numpy.tile``, ``torch.tile``,
    TVM's ``R.tile``); more repeats than dims add leading dims, fewer are padded with ones on the left.
    Composed of a reshape to ``(1, d0, 1, d1, ...)``, a broadcast to ``(r0, d0, r1, d1, ...)`` and a
    reshape to ``(r0 * d0, r1 * d1, ...)``, so symbolic dims and repeats (int64 expressions of the
    symbolic dims: ONNX ``Tile`` of a computed shape) work and the copy is one fused loop. Raises
    ValueError for a repeat that is not a non-negative int or an int64 expression."""
    reps = list(repeats) if isinstance(repeats, (list, tuple)) else [repeats]
    ok = [(isinstance(r, (int, np.integer)) and not isinstance(r, bool) and r >= 0)
          or (isinstance(r, E.PrimExpr) and r.dtype == "int64") for r in reps]
    if not all(ok):
        raise ValueError(f"tile: repeats must be non-negative ints or int64 expressions, got {repeats!r}")
    reps = [int(r) if isinstance(r, (int, np.integer)) else r for r in reps]
    if len(reps) < x.ndim:
        reps = [1] * (x.ndim - len(reps)) + reps
    dims = [1] * (len(reps) - x.ndim) + list(x.shape)
    if all(isinstance(r, int) and r == 1 for r in reps):
        return reshape(x, dims, name) if len(dims) != x.ndim else x
    inter = [d for dim in dims for d in (1, dim)]
    wide = [d for r, dim in zip(reps, dims) for d in (r, dim)]
    out = [r * dim if isinstance(dim, int) and isinstance(r, int) else E.simplify(E.convert(dim) * r)
           for r, dim in zip(reps, dims)]
    return reshape(broadcast_to(reshape(x, inter), wide), out, name)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0,
        name: str = "pad") -> Tensor:
    """Pad ``x``; ``pad`` is ``[before_0, after_0, before_1, after_1, ...]`` from axis 0 (TVM's
    order, unlike ``torch.nn.functional.pad``). ``mode``: ``"constant"`` (fill ``value``),
    ``"edge"`` (repeat the border element), ``"reflect"`` (mirror without the border) or ``"wrap"``
    (periodic: PyTorch's ``"circular"``), as ``numpy.pad``: ``R.nn.pad(x, pad_width=[...], pad_value=v,
    pad_mode=mode)``.

    A negative width removes that many elements from that side (``torch.nn.functional.pad`` and
    ONNX ``Pad``, as onnxruntime runs it: the crop happens first, a ``strided_slice``, then the
    positive widths pad what is left, in every mode). Raises ValueError when a crop removes more
    than a static dim holds (a symbolic dim is checked when the slice runs)."""
    pad = [int(p) for p in pad]
    if any(p < 0 for p in pad):
        axes, begin, end = [], [], []
        for a in range(min(len(pad) // 2, x.ndim)):
            lo, hi = max(0, -pad[2 * a]), max(0, -pad[2 * a + 1])
            if not lo and not hi:
                continue
            dim = x.shape[a]
            if isinstance(dim, int) and lo + hi > dim:
                raise ValueError(f"pad: negative widths remove {lo + hi} elements from axis {a} of "
                                 f"length {dim}")
            axes.append(a)
            begin.append(lo)
            end.append(dim - hi)
        x = strided_slice(x, axes, begin, end, name=f"{name}_crop")
        pad = [max(0, p) for p in pad]
        if not any(pad):
            return x
    return wrap_nested(op_call("nn.pad", [x._expr], pad_width=pad,
                             pad_value=float(value), pad_mode=mode), name)


def triu(x: Tensor, diagonal: int = 0, name: str = "triu") -> Tensor:
    """Upper triangle of the last two dims (``numpy.triu``): elements with ``j - i < diagonal``
    become 0: ``R.triu(x, diagonal)`` (``diagonal`` an int64 ``R.prim_value``, printed as
    a plain int as TVM 0.27 does). Raises ValueError for ndim < 2."""
    return wrap_nested(op_call("triu", [x._expr, rx.PrimValue(diagonal, "int64")]), name)


def tril(x: Tensor, diagonal: int = 0, name: str = "tril") -> Tensor:
    """Lower triangle of the last two dims (``numpy.tril``): elements with ``j - i > diagonal``
    become 0: ``R.tril(x, diagonal)`` (printed as ``R.triu``'s). Raises ValueError for ndim < 2."""
    return wrap_nested(op_call("tril", [x._expr, rx.PrimValue(diagonal, "int64")]), name)


def _slice_value(v, what: str):
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, bool) or not isinstance(v, (int, E.PrimExpr)):
        raise TypeError(f"strided_slice: {what} values must be ints or symbolic int expressions, got {describe(v)}")
    return v


def strided_slice(x: Tensor, axes: Sequence[int], begin: Sequence, end: Sequence,
                  strides: Sequence[int] | None = None, name: str = "strided_slice") -> Tensor:
    """``x[begin[k]:end[k]:strides[k]]`` along each ``axes[k]`` (TVM's ``R.strided_slice(x, axes,
    begin, end, strides)``; Python / numpy slicing semantics).

    ``x`` (any shape, any dtype) -> ``x``'s shape with each sliced dim replaced by its length.
    ``begin`` / ``end`` are ints or symbolic int64 expressions of ``x``'s dims (``seq - 1``);
    ``strides`` positive ints (default 1). A negative int counts from the end. With a static dim
    and int bounds the bounds are clamped to ``[0, dim]`` as numpy does; otherwise they are
    assumed in range (``0 <= begin <= end <= dim``, TVM's ``assume_inbound``): the length is
    ``(end - begin + stride - 1) // stride`` and the compiled kernel checks each index it reads
    (an out-of-range slice is an error when it runs, never a read out of bounds). Raises
    TypeError for non-int values, ValueError for lists of different lengths, a repeated or
    out-of-range axis, or a stride that is not positive (negative strides are not supported).
    """
    if isinstance(axes, (int, np.integer)):
        axes, begin, end = [axes], [begin], [end]
        strides = None if strides is None else [strides]
    axes = [int(a) if isinstance(a, (int, np.integer)) and not isinstance(a, bool) else a for a in axes]
    if not all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
        raise TypeError(f"strided_slice: axes must be ints, got {describe(list(axes))}")
    begin = [_slice_value(v, "begin") for v in begin]
    end = [_slice_value(v, "end") for v in end]
    if strides is not None:
        strides = [int(s) if isinstance(s, np.integer) else s for s in strides]
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in strides):
            raise TypeError(f"strided_slice: strides must be ints, got {describe(list(strides))}")
    else:
        strides = [1] * len(axes)
    return wrap_nested(op_call("strided_slice", [x._expr], axes=list(axes), begin=begin, end=end,
                               strides=strides, assume_inbound=False), name)


def _tensor_getitem(x: Tensor, key) -> Tensor:
    """``x[key]`` (numpy basic indexing, :meth:`Tensor.__getitem__`)."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise ValueError("Tensor indexing: at most one '...' is allowed")
    n_index = sum(k is not Ellipsis for k in key)
    if n_index > x.ndim:
        raise ValueError(f"Tensor indexing: {n_index} indices for a tensor of {x.ndim} dims "
                         f"{tuple(str(d) for d in x.shape)}")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (x.ndim - n_index) + key[at + 1:]
    key = key + (slice(None),) * (x.ndim - len(key))
    axes, begin, end, strides, drop = [], [], [], [], []
    for ax, k in enumerate(key):
        dim = x.shape[ax]
        if isinstance(k, np.integer):
            k = int(k)
        if isinstance(k, slice):
            step = 1 if k.step is None else k.step
            if isinstance(step, np.integer):
                step = int(step)
            if isinstance(step, bool) or not isinstance(step, int):
                raise TypeError(f"Tensor indexing: a slice step must be an int, got {describe(step)}")
            if step <= 0:
                raise ValueError(f"Tensor indexing: slice steps must be positive (negative steps are not "
                                 f"supported), got {step}")
            if k.start is None and k.stop is None and step == 1:
                continue
            axes.append(ax)
            begin.append(0 if k.start is None else _slice_value(k.start, "begin"))
            end.append(dim if k.stop is None else _slice_value(k.stop, "end"))
            strides.append(step)
        elif isinstance(k, (int, E.PrimExpr)) and not isinstance(k, bool):
            if isinstance(k, E.PrimExpr) and (not E.is_int_dtype(k.dtype) or k.dtype == "bool"):
                raise TypeError(f"Tensor indexing: index {k} must be an integer expression, got {k.dtype}")
            if isinstance(k, int) and isinstance(dim, int) and not -dim <= k < dim:
                raise ValueError(f"Tensor indexing: index {k} is out of range for dim {ax} of size {dim}")
            if isinstance(k, int) and k < 0:
                k = dim + k if isinstance(dim, int) else E.simplify(E.convert(dim) + k)
            axes.append(ax)
            begin.append(k)
            end.append(k + 1 if isinstance(k, int) else E.simplify(k + 1))
            strides.append(1)
            drop.append(ax)
        else:
            raise TypeError(f"Tensor indexing: indices must be ints, symbolic ints, slices or '...', got "
                            f"{describe(k)} (None / tensor indices are not supported; use unsqueeze / take)")
    if not axes:
        return x
    out = strided_slice(x, axes, begin, end, strides, name="strided_slice")
    if drop:
        out = squeeze(out, drop, name="squeeze")
    return out
