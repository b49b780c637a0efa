"""Layout and indexing computes: astype, permute_dims, reshape, take, concat / split, expand_dims /
squeeze, broadcast_to, repeat, pad, triu / tril, and tensor creation (full, zeros, ones, arange).
"""
from __future__ import annotations

import builtins
from typing import Sequence

from ...ir import expr as E
from ...ir import tir
from ...ir.expr import PrimExpr
from ...ir.op import arange_length, slice_range, split_sizes
from ...ir.op.common import fmt_shape, static_int
from .. import tensor as _te
from ..tensor import Tensor
from .common import (
    broadcast_index, cast_value, is_static_one, normalize_axes, normalize_axis, shape_product, zero_index,
)

__all__ = [
    "arange", "astype", "broadcast_to", "checked_index", "concat", "expand_dims", "full", "gather_elements", "ones",
    "pad",
    "permute_dims", "repeat", "reshape", "split", "squeeze", "strided_slice", "take", "tril", "trilu", "triu", "zeros",
]


def astype(x: Tensor, dtype: str) -> Tensor:
    """Elementwise conversion to ``dtype`` (``numpy.ndarray.astype``): float -> int truncates
    toward zero, -> bool is ``x != 0``, 16-bit floats convert through float32 (exact)."""
    return _te.compute(x.shape, lambda *i: cast_value(x[i], dtype), name="T_cast")


def permute_dims(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Transpose (``numpy.transpose``): output dim ``j`` is input dim ``axes[j]``; ``None``
    reverses the dims. Raises ValueError when ``axes`` is not a permutation."""
    nd = x.ndim
    ax = list(range(nd))[::-1] if axes is None else [normalize_axis(a, nd, "permute_dims")
                                                     for a in axes]
    if sorted(ax) != list(range(nd)):
        raise ValueError(f"permute_dims: axes {axes} are not a permutation of {nd} dims")
    shape = [x.shape[a] for a in ax]

    def f(*idx):
        src = [None] * nd
        for j, a in enumerate(ax):
            src[a] = idx[j]
        return x[tuple(src)]

    return _te.compute(shape, f, name="T_transpose")


def _resolve_shape(shape: Sequence[PrimExpr], new_shape: Sequence) -> list[PrimExpr]:
    """``new_shape`` as int64 PrimExprs with one ``-1`` inferred from ``shape``."""
    new = [E.convert(d) for d in new_shape]
    new = [d.astype("int64") if d.dtype != "int64" else d for d in new]
    holes = [i for i, d in enumerate(new) if isinstance(d, E.IntImm) and d.value == -1]
    if len(holes) > 1:
        raise ValueError(f"reshape: at most one -1 allowed in {fmt_shape(new)}")
    if holes:
        known = [d for i, d in enumerate(new) if i != holes[0]]
        total, part = shape_product(shape), shape_product(known)
        if isinstance(total, E.IntImm) and isinstance(part, E.IntImm):
            if part.value == 0 or total.value % part.value:
                raise ValueError(f"reshape: cannot reshape {fmt_shape(shape)} to {fmt_shape(new)}")
            inferred: PrimExpr = E.IntImm(total.value // part.value, "int64")
        else:
            # cancel the known dims one by one against the dims of `shape`
            remaining = list(shape)
            rest = []
            for d in known:
                for j, s in enumerate(remaining):
                    if E.prove_equal(s, d):
                        del remaining[j]
                        break
                else:
                    rest.append(d)
            inferred = shape_product(remaining)
            if rest:
                inferred = E.simplify(inferred // shape_product(rest))
        new[holes[0]] = inferred
    return new


def reshape(x: Tensor, new_shape: Sequence) -> Tensor:
    """Row-major reshape (``numpy.reshape``, C order) to ``new_shape`` (ints / int PrimExprs, one
    ``-1`` allowed). Leading and trailing dims shared with the input are indexed directly; the
    middle dims go through the flat index (``FloorDiv`` / ``FloorMod`` by the input dims).
    Raises ValueError when the static element counts differ."""
    old = list(x.shape)
    new = _resolve_shape(old, new_shape)
    t_old, t_new = shape_product(old), shape_product(new)
    if isinstance(t_old, E.IntImm) and isinstance(t_new, E.IntImm) and t_old.value != t_new.value:
        raise ValueError(f"reshape: cannot reshape {fmt_shape(old)} ({t_old.value} elements) to "
                         f"{fmt_shape(new)} ({t_new.value} elements)")
    lim = builtins.min(len(old), len(new))
    p = 0
    while p < lim and E.prove_equal(old[p], new[p]):
        p += 1
    s = 0
    while s < lim - p and E.prove_equal(old[-1 - s], new[-1 - s]):
        s += 1
    mid_old = old[p:len(old) - s]
    mid_new = new[p:len(new) - s]

    def f(*idx):
        lead = list(idx[:p])
        trail = list(idx[len(new) - s:]) if s else []
        flat: PrimExpr = E.IntImm(0, "int64")
        for d, i in zip(mid_new, idx[p:len(new) - s]):
            flat = flat * d + i
        mid: list[PrimExpr] = []
        for d in reversed(mid_old[1:]):
            mid.append(E.IntImm(0, "int64") if is_static_one(d) else flat % d)
            flat = flat // d
        if mid_old:
            mid.append(E.IntImm(0, "int64") if is_static_one(mid_old[0]) else flat)
        mid.reverse()
        return x[tuple(lead + mid + trail)]

    return _te.compute(new, f, name="T_reshape")


def checked_index(j: PrimExpr, dim) -> PrimExpr:
    """``j`` as an index into a dim of extent ``dim``, checked when the code runs: the
    generated function returns an error (a ValueError from the runtime, "index out of range")
    for ``j`` outside ``[0, dim)`` instead of reading out of bounds. Both int64."""
    return E.Call("int64", "checked_index", [j.astype("int64"), E.convert(dim).astype("int64")])


def take(x: Tensor, indices: Tensor, axis: int = 0, mode: str = "fast") -> Tensor:
    """Gather along ``axis`` (``numpy.take``): ``out[pre, j..., post] = x[pre, indices[j...],
    post]`` with shape ``x.shape[:axis] + indices.shape + x.shape[axis + 1:]``.

    ``mode``: ``"fast"`` (TVM's default) does not clamp or wrap, and an index outside ``[0,
    dim)`` is an error when the code runs (:func:`checked_index`: ValueError, never a read out
    of bounds); ``"clip"`` clamps to ``[0, dim - 1]``, ``"wrap"`` takes the index modulo the
    dim (numpy's modes). Indices may be any integer dtype (int32 / int64). Raises TypeError for
    non-integer indices.
    """
    if not E.is_int_dtype(indices.dtype) or indices.dtype == "bool":
        raise TypeError(f"take: indices must be integers, got {indices.dtype}")
    if mode not in ("fast", "clip", "wrap"):
        raise ValueError(f"take: unknown mode {mode!r}")
    ax = normalize_axis(axis, x.ndim, "take")
    ni = indices.ndim
    shape = list(x.shape[:ax]) + list(indices.shape) + list(x.shape[ax + 1:])
    dim = x.shape[ax]

    def f(*idx):
        j = indices[tuple(idx[ax:ax + ni])].astype("int64")
        if mode == "clip":
            j = tir.minimum(tir.maximum(j, E.IntImm(0, "int64")), dim - 1)
        elif mode == "wrap":
            j = E.FloorMod(j, dim)
        else:
            j = checked_index(j, dim)
        return x[tuple(idx[:ax]) + (j,) + tuple(idx[ax + ni:])]

    return _te.compute(shape, f, name="T_take")


def gather_elements(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """``out[i...] = x[i with i[axis] replaced by indices[i...]]`` (``torch.gather``, ONNX
    ``GatherElements``, ``numpy.take_along_axis``): the output has the indices' shape. A negative
    index counts from the end (ONNX); an index outside ``[-dim, dim)``, and an index dim larger than
    the data's (symbolic ones), is an error when the code runs (:func:`checked_index`), never a read
    out of bounds. Raises TypeError for non-integer indices, ValueError for differing ranks."""
    if not E.is_int_dtype(indices.dtype) or indices.dtype == "bool":
        raise TypeError(f"gather_elements: indices must be integers, got {indices.dtype}")
    if indices.ndim != x.ndim:
        raise ValueError(f"gather_elements: data and indices need the same rank, got {x.ndim} and {indices.ndim}")
    ax = normalize_axis(axis, x.ndim, "gather_elements")
    dim = x.shape[ax]

    def f(*idx):
        j = indices[idx].astype("int64")
        j = checked_index(E.Select(E.LT(j, E.IntImm(0, "int64")), j + E.convert(dim).astype("int64"), j), dim)
        at = []
        for d, i in enumerate(idx):
            if d == ax:
                at.append(j)
            elif E.prove_equal(indices.shape[d], x.shape[d]):
                at.append(i)
            else:       # torch.gather allows a smaller index dim; a larger symbolic one is caught here
                at.append(checked_index(i, x.shape[d]))
        return x[tuple(at)]

    return _te.compute(indices.shape, f, name="T_gather_elements")


def _sum_exprs(dims) -> PrimExpr:
    out: PrimExpr = zero_index()
    for d in dims:
        out = out + d
    return E.simplify(out)


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenate along ``axis`` (``numpy.concatenate``): output ``axis`` index ``j`` reads the
    tensor whose range ``[offset_t, offset_t + d_t)`` holds ``j``, through ``if_then_else`` nested as
    a balanced binary search over the offsets (depth ``ceil(log2(len(tensors)))``, so a concat of
    thousands of inputs stays shallow for every recursive walk of the body: checks, printer, lowering,
    code generation; only the chosen tensor is loaded). Raises ValueError for an empty list or
    differing ranks, TypeError for differing dtypes."""
    ts = list(tensors)
    if not ts:
        raise ValueError("concat: needs at least one tensor")
    first = ts[0]
    for i, t in enumerate(ts[1:], start=1):
        if t.ndim != first.ndim:
            raise ValueError(f"concat: ranks differ: {fmt_shape(first.shape)} vs tensor {i} "
                             f"{fmt_shape(t.shape)}")
        if t.dtype != first.dtype:
            raise TypeError(f"concat: dtypes differ: {first.dtype} vs tensor {i} {t.dtype}")
    ax = normalize_axis(axis, first.ndim, "concat")
    offsets = [zero_index()]
    for t in ts:
        offsets.append(E.simplify(offsets[-1] + t.shape[ax]))
    shape = list(first.shape)
    shape[ax] = offsets[-1]

    def load(k: int, idx) -> PrimExpr:
        src = list(idx)
        src[ax] = E.simplify(idx[ax] - offsets[k]) if k else idx[ax]
        return ts[k][tuple(src)]

    def pick(lo: int, hi: int, idx) -> PrimExpr:
        """The load of tensor ``lo .. hi - 1`` whose range holds ``idx[ax]`` (recursion depth log2)."""
        if hi - lo == 1:
            return load(lo, idx)
        mid = (lo + hi) // 2
        return tir.if_then_else(E.LT(idx[ax], offsets[mid]), pick(lo, mid, idx), pick(mid, hi, idx))

    def f(*idx):
        return pick(0, len(ts), idx)

    return _te.compute(shape, f, name="T_concat")


def _split_sizes(length: PrimExpr, indices_or_sections) -> list[PrimExpr]:
    sl = static_int(length)
    sizes = split_sizes(sl if sl is not None else length, indices_or_sections, "split")
    return [E.IntImm(s, "int64") if isinstance(s, int) else s for s in sizes]


def split(x: Tensor, indices_or_sections, axis: int = 0) -> list[Tensor]:
    """Split along ``axis`` into several outputs (one compute each, ``T_split_<k>``): an int
    ``n`` gives pieces of ``ceil(d / n)`` with the rest in the last one (TVM / ``torch.chunk``),
    a list of indices cuts before each index (``numpy.split``). Raises ValueError for ``n < 1``
    or a static dim that the sections cannot cover."""
    ax = normalize_axis(axis, x.ndim, "split")
    sizes = _split_sizes(x.shape[ax], indices_or_sections)
    outs = []
    begin = zero_index()
    for k, size in enumerate(sizes):
        shape = list(x.shape)
        shape[ax] = size

        def f(*idx, _begin=begin):
            src = list(idx)
            src[ax] = E.simplify(idx[ax] + _begin)
            return x[tuple(src)]

        outs.append(_te.compute(shape, f, name=f"T_split_{k}"))
        begin = E.simplify(begin + size)
    return outs


def strided_slice(x: Tensor, axes: Sequence[int], begin: Sequence, end: Sequence,
                  strides: Sequence[int] | None = None, out_shape: Sequence | None = None) -> Tensor:
    """``x[..., begin:end:stride, ...]`` on each of ``axes`` (Python / numpy slicing, positive
    strides): ``out[..., i, ...] = x[..., start + i * stride, ...]`` with ``(start, length)``
    from :func:`builder.ir.op.slice_range` (static bounds on a static dim are clamped as numpy;
    otherwise bounds are assumed in range and each index read is checked when the code runs:
    :func:`checked_index`, an error instead of a read out of bounds). Bounds are ints or int
    PrimExprs over the variables of ``x``'s shape. ``out_shape`` (optional) is the output shape to
    declare instead of the computed one (the graph's, with kernel-local variables: the
    legalization passes it so that the kernel binds its variables from the output buffer).
    Raises ValueError for mismatched list lengths, a repeated axis or a non-positive stride."""
    axes = [normalize_axis(a, x.ndim, "strided_slice") for a in axes]
    strides = [1] * len(axes) if strides is None else [int(s) for s in strides]
    if not (len(axes) == len(begin) == len(end) == len(strides)) or len(set(axes)) != len(axes):
        raise ValueError(f"strided_slice: axes {axes} (distinct), begin {list(begin)}, end {list(end)} and "
                         f"strides {strides} need one value each per axis")
    shape = list(x.shape)
    plan = {}
    for ax, b, e, st in zip(axes, begin, end, strides):
        start, length = slice_range(x.shape[ax], b, e, st)
        checked = not (isinstance(start, int) and static_int(x.shape[ax]) is not None)
        plan[ax] = (E.convert(start).astype("int64") if not isinstance(start, int) else E.IntImm(start, "int64"),
                    st, checked)
        shape[ax] = E.convert(length)
    if out_shape is not None:
        shape = [E.convert(d) for d in out_shape]

    def f(*idx):
        src = list(idx)
        for ax, (start, st, checked) in plan.items():
            j = E.simplify(start + (idx[ax] if st == 1 else idx[ax] * st))
            src[ax] = checked_index(j, x.shape[ax]) if checked else j
        return x[tuple(src)]

    return _te.compute(shape, f, name="T_strided_slice")


def expand_dims(x: Tensor, axis) -> Tensor:
    """Insert size-1 dims at ``axis`` (an int or a list, positions in the result; negative
    counts from the end of the result) (``numpy.expand_dims``)."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    nd = x.ndim + len(axes)
    pos = sorted({normalize_axis(a, nd, "expand_dims") for a in axes})
    if len(pos) != len(axes):
        raise ValueError(f"expand_dims: repeated axis in {axes}")
    keep = [d for d in range(nd) if d not in pos]
    shape = [E.IntImm(1, "int64") if d in pos else x.shape[keep.index(d)] for d in range(nd)]
    return _te.compute(shape, lambda *i: x[tuple(i[d] for d in keep)], name="T_expand_dims")


def squeeze(x: Tensor, axis=None) -> Tensor:
    """Remove size-1 dims (``numpy.squeeze``): ``axis`` (int or list) names them; ``None`` drops
    every static size-1 dim. Raises ValueError for a named dim of static size other than 1."""
    if axis is None:
        axes = [d for d, s in enumerate(x.shape) if is_static_one(s)]
    else:
        axes = normalize_axes(axis, x.ndim, "squeeze")
        for a in axes:
            s = static_int(x.shape[a])
            if s is not None and s != 1:
                raise ValueError(f"squeeze: dim {a} of {fmt_shape(x.shape)} is {s}, not 1")
    kept = [d for d in range(x.ndim) if d not in axes]

    def f(*idx):
        src = [zero_index()] * x.ndim
        for d, i in zip(kept, idx):
            src[d] = i
        return x[tuple(src)]

    return _te.compute([x.shape[d] for d in kept], f, name="T_squeeze")


def broadcast_to(x: Tensor, shape: Sequence) -> Tensor:
    """Broadcast to ``shape`` (``numpy.broadcast_to``): dims align from the right and a static
    size-1 dim of ``x`` reads element 0. Raises ValueError for a lower target rank or a static
    dim that is neither 1 nor the target dim."""
    target = [E.convert(d) for d in shape]
    if len(target) < x.ndim:
        raise ValueError(f"broadcast_to: cannot broadcast {fmt_shape(x.shape)} to {fmt_shape(target)}")
    lead = len(target) - x.ndim
    for d, s in enumerate(x.shape):
        a, b = static_int(s), static_int(target[lead + d])
        if a is not None and b is not None and a != 1 and a != b:
            raise ValueError(f"broadcast_to: cannot broadcast {fmt_shape(x.shape)} to "
                             f"{fmt_shape(target)} (dim {a} vs {b})")
    return _te.compute(target, lambda *i: x[broadcast_index(i, x.shape)], name="T_broadcast_to")


def _unravel(flat: PrimExpr, shape: Sequence[PrimExpr]) -> list[PrimExpr]:
    """Row-major multi-index of the flat index ``flat`` in ``shape``."""
    out: list[PrimExpr] = []
    for d in reversed(list(shape)[1:]):
        out.append(zero_index() if is_static_one(d) else flat % d)
        flat = flat // d
    if len(shape):
        out.append(zero_index() if is_static_one(shape[0]) else flat)
    return list(reversed(out))


def repeat(x: Tensor, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``): output index
    ``j`` reads ``j // repeats``; ``axis=None`` works on the flattened tensor (1-D result).
    Raises ValueError for ``repeats < 0``."""
    r = int(repeats)
    if r < 0:
        raise ValueError(f"repeat: repeats must be >= 0, got {repeats}")
    if axis is None:
        n = E.simplify(shape_product(x.shape) * r)
        return _te.compute([n], lambda i: x[tuple(_unravel(i // r, x.shape))], name="T_repeat")
    ax = normalize_axis(axis, x.ndim, "repeat")
    shape = list(x.shape)
    shape[ax] = E.simplify(shape[ax] * r)

    def f(*idx):
        src = list(idx)
        src[ax] = idx[ax] // r
        return x[tuple(src)]

    return _te.compute(shape, f, name="T_repeat")


def pad(x: Tensor, pad_before: Sequence[int], pad_after: Sequence[int] | None = None,
        pad_value: float = 0.0, mode: str = "constant") -> Tensor:
    """Pad every dim by ``pad_before[d]`` / ``pad_after[d]`` elements (``numpy.pad``).

    ``mode``: ``"constant"`` fills ``pad_value`` (``if_then_else`` on the bounds, so the input
    is never read out of range); ``"edge"`` repeats the border element (the index is clamped);
    ``"reflect"`` mirrors without repeating the border (``-p`` below 0, ``2(d-1) - p`` above;
    pads must be smaller than the dim: for a symbolic dim the mirrored index is checked when the
    code runs, :func:`checked_index`); ``"wrap"`` continues periodically (``p mod d``: numpy's
    ``"wrap"``, PyTorch's ``"circular"``, ONNX ``Pad``'s ``"wrap"``; any pad size; a symbolic dim
    that is 0 when the code runs is an error there, never a division by zero). Raises ValueError
    for a wrong number of pads, a negative pad or an unknown mode.
    """
    nd = x.ndim
    lo = [int(p) for p in pad_before]
    hi = lo if pad_after is None else [int(p) for p in pad_after]
    if len(lo) != nd or len(hi) != nd:
        raise ValueError(f"pad: need {nd} pads before and after for {fmt_shape(x.shape)}, got "
                         f"{lo} and {hi}")
    if builtins.any(p < 0 for p in lo + hi):
        raise ValueError(f"pad: pads must be >= 0, got {lo} and {hi}")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ValueError(f"pad: unknown mode {mode!r} (constant, edge, reflect, wrap)")
    shape = [E.simplify(s + (a + b)) if (a or b) else s for s, a, b in zip(x.shape, lo, hi)]

    def f(*idx):
        src, conds = [], []
        for d in range(nd):
            i, p = idx[d], (idx[d] - lo[d] if lo[d] else idx[d])
            if not (lo[d] or hi[d]):
                src.append(i)
                continue
            dim = x.shape[d]
            if mode == "constant":
                if lo[d]:
                    conds.append(E.GE(i, E.IntImm(lo[d], "int64")))
                if hi[d]:
                    conds.append(E.LT(p, dim))
                src.append(p)
            elif mode == "edge":
                src.append(tir.minimum(tir.maximum(p, zero_index()), dim - 1))
            elif mode == "wrap":
                if isinstance(E.simplify(dim), E.IntImm):   # a static dim: nonzero (checked at build time)
                    src.append(E.FloorMod(p, dim))
                else:   # modulo at least 1, then the index checked against the dim (0: an error)
                    src.append(checked_index(E.FloorMod(p, tir.maximum(E.convert(dim).astype("int64"),
                                                                         E.IntImm(1, "int64"))), dim))
            else:
                top = dim - 1
                if isinstance(E.simplify(dim), E.IntImm):   # pads < dim checked at build time
                    p = E.Select(E.LT(p, zero_index()), -p, p) if lo[d] else p
                    src.append(E.Select(E.GT(p, top), top * 2 - p, p) if hi[d] else p)
                    continue
                # a symbolic dim: each mirrored index is checked when the code runs (it is out
                # of [0, dim) exactly when a pad is not smaller than the dim)
                if lo[d]:
                    p = tir.if_then_else(E.LT(p, zero_index()), checked_index(-p, dim), p)
                if hi[d]:
                    p = tir.if_then_else(E.GT(p, top), checked_index(top * 2 - p, dim), p)
                src.append(p)
        v = x[tuple(src)]
        if conds:
            v = tir.if_then_else(tir.all(*conds), v, E.convert(pad_value, x.dtype))
        return v

    return _te.compute(shape, f, name="PadInput" if mode == "constant" else f"T_pad_{mode}")


def trilu(x: Tensor, k=0, upper: bool = True) -> Tensor:
    """Upper (``numpy.triu``) or lower (``numpy.tril``) triangle of the last two dims: element
    ``[..., i, j]`` is kept when ``j - i >= k`` (upper) / ``j - i <= k`` (lower), else 0.
    ``k`` is an int or an int PrimExpr. Raises ValueError for ndim < 2."""
    if x.ndim < 2:
        raise ValueError(f"trilu: needs ndim >= 2, got {fmt_shape(x.shape)}")
    kk = E.convert(k).astype("int64")

    def f(*idx):
        i, j = idx[-2], idx[-1]
        keep = E.GE(j - i, kk) if upper else E.LE(j - i, kk)
        return E.Select(keep, x[idx], E.convert(0, x.dtype))

    return _te.compute(x.shape, f, name="trilu")


def triu(x: Tensor, k=0) -> Tensor:
    """``numpy.triu(x, k)`` (see :func:`trilu`)."""
    return trilu(x, k, True)


def tril(x: Tensor, k=0) -> Tensor:
    """``numpy.tril(x, k)`` (see :func:`trilu`)."""
    return trilu(x, k, False)


def full(shape: Sequence, dtype: str, fill_value) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value``: a Python number / PrimExpr constant, or
    a 0-d te.Tensor read once per element and converted to ``dtype`` (``numpy.full``)."""
    if isinstance(fill_value, Tensor):
        if fill_value.ndim != 0:
            raise ValueError(f"full: fill_value must be 0-d, got {fmt_shape(fill_value.shape)}")
        return _te.compute(shape, lambda *i: cast_value(fill_value[()], dtype), name="T_full")
    value = E.convert(fill_value, dtype)
    if value.dtype != dtype:
        value = cast_value(value, dtype)
    return _te.compute(shape, lambda *i: value, name="T_full")


def zeros(shape: Sequence, dtype: str = "float32") -> Tensor:
    """A tensor of zeros (``numpy.zeros``)."""
    return full(shape, dtype, 0)


def ones(shape: Sequence, dtype: str = "float32") -> Tensor:
    """A tensor of ones (``numpy.ones``)."""
    return full(shape, dtype, 1)


def arange(start, stop=None, step=1, dtype: str = "float32", length=None) -> Tensor:
    """``start + i * step`` for ``i < ceil((stop - start) / step)`` (``numpy.arange``; one bound
    means ``[0, start)``). Float results are computed in float64 and converted; ``stop`` may be
    a symbolic int dim, ``start`` / ``step`` must be numbers. ``length`` (an int or int64
    PrimExpr) overrides the element count computed from the bounds. Raises ValueError for
    step 0."""
    if stop is None and length is None:
        start, stop = 0, start
    for v, what in ((start, "start"), (step, "step")):
        if not isinstance(v, (int, float)):
            if isinstance(v, (E.IntImm, E.FloatImm)):
                continue
            raise ValueError(f"arange: {what} must be a number, got {v}")
    start = start.value if isinstance(start, (E.IntImm, E.FloatImm)) else start
    step = step.value if isinstance(step, (E.IntImm, E.FloatImm)) else step
    n = arange_length(start, stop, step) if length is None else length
    if E.is_float_dtype(dtype):
        work = "float64"
    else:
        work = "int64"
        if isinstance(start, float) or isinstance(step, float):
            work = "float64"

    def f(i):
        v = E.convert(start, work) + i.astype(work) * E.convert(step, work)
        return cast_value(v, dtype) if work != dtype else v

    return _te.compute([n], f, name="T_arange")
