"""Translations of torch's shape and layout functions: views and reshapes, permutations, broadcasts,
concatenation and splits, slices and selects, flips and rolls, padding, sizes.
"""
from __future__ import annotations

import numpy as np

from ...ir import expr as E
from ...ir.op import broadcast_shapes
from ...nn import op
from ..dtypes import as_dtype, torch_promote
from ..errors import FrontendError, UnsupportedNodeError
from .operands import at_least_1d, is_tensor, norm_dim, sizes, static, to_tensor

#: A slice bound at or past this is "to the end" (torch writes ``sys.maxsize``).
_BIG = 2 ** 62


def flip(t, x, dims):
    """``torch.flip(x, dims)``: ``x`` reversed along each of ``dims`` (an int or a list); same shape and dtype. Raises
    FrontendError for a dim out of range."""
    return op.flip(x, [norm_dim(d, x.ndim) for d in (dims if isinstance(dims, (list, tuple)) else [dims])])


def roll(t, x, shifts, dims=None):
    """``torch.roll``: elements shifted along ``dims`` (static shifts; the flattened tensor without dims)."""
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        flat = op.reshape(x, [-1])
        return op.reshape(roll(t, flat, shifts[0], 0), list(x.shape))
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    for s_, d in zip(shifts, dims):
        d = norm_dim(d, x.ndim)
        size, s_ = static(x.shape[d]), static(s_)
        if s_ is None:
            raise UnsupportedNodeError("roll by a symbolic shift")
        if size is not None:
            s_ %= size
            if s_ == 0:
                continue
            x = op.concat([slice_(t, x, d, size - s_, None), slice_(t, x, d, 0, size - s_)], dim=d)
        elif s_ != 0:       # a symbolic size: the last s (first -s) elements first, negative bounds from the end
            x = op.concat([slice_(t, x, d, -s_, None), slice_(t, x, d, 0, -s_)], dim=d)
    return x


def meshgrid(t, *tensors, indexing=None):
    """``torch.meshgrid``: N 1-D (or 0-D) tensors give N tensors of their sizes' grid; ``indexing="ij"``
    (PyTorch's default) puts input ``i`` along output dim ``i``, ``"xy"`` swaps the first two (numpy's
    default)."""
    ts = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    indexing = indexing or "ij"
    if indexing not in ("ij", "xy"):
        raise UnsupportedNodeError(f"meshgrid indexing {indexing!r} (ij or xy)")
    ts = [op.reshape(x, [1]) if x.ndim == 0 else x for x in ts]
    if not ts or any(x.ndim != 1 for x in ts):
        raise UnsupportedNodeError("meshgrid of tensors that are not 1-D")
    order = list(range(len(ts)))     # output dim d varies along input order[d]
    if indexing == "xy" and len(ts) > 1:
        order[0], order[1] = 1, 0
    shape = [ts[i].shape[0] for i in order]
    out = []
    for i, x in enumerate(ts):
        view = [1] * len(ts)
        view[order.index(i)] = x.shape[0]
        out.append(op.broadcast_to(op.reshape(x, view), shape))
    return out


def broadcast_tensors(t, *tensors):
    """``torch.broadcast_tensors(*tensors)``: the list of the tensors, each broadcast to their common (numpy-rule)
    shape. Raises ValueError for shapes that do not broadcast."""
    tensors = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    shape = tuple(tensors[0].shape)
    for x in tensors[1:]:
        shape = broadcast_shapes(shape, tuple(x.shape), "broadcast_tensors")
    return [x if list(x.shape) == list(shape) else op.broadcast_to(x, list(shape)) for x in tensors]


def view(t, x, *shape):
    """``Tensor.view(*shape)``: :meth:`GraphTranslator.reshape` (one ``-1`` inferred, symbolic dims allowed). Raises
    UnsupportedNodeError for ``view(dtype)`` (a reinterpretation of the bytes)."""
    shape = sizes(shape)
    if len(shape) == 1 and isinstance(shape[0], str):
        raise UnsupportedNodeError("view(dtype)")
    return t.reshape(x, shape)


def reshape(t, x, *shape):
    """``torch.reshape(x, shape)`` / ``Tensor.reshape(*shape)``: :meth:`GraphTranslator.reshape` (one ``-1`` inferred;
    ``x`` itself when the shape does not change). Raises FrontendError when the sizes do not match."""
    return t.reshape(x, sizes(shape))


def permute(t, x, *dims):
    """``Tensor.permute(*dims)``: :meth:`GraphTranslator.permute` (composed with a permutation that made ``x``, so
    round trips vanish); the shape is ``x``'s dims in the order ``dims``."""
    return t.permute(x, [norm_dim(d, x.ndim) for d in sizes(dims)])


def transpose(t, x, dim0, dim1):
    """``torch.transpose(x, dim0, dim1)``: the two dims swapped (a permutation, :meth:`GraphTranslator.permute`)."""
    axes = list(range(x.ndim))
    a, b = norm_dim(dim0, x.ndim), norm_dim(dim1, x.ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return t.permute(x, axes)


def t_(t, x):
    """``Tensor.t()``: the two dims of a 2-D tensor swapped; a 0-d or 1-d tensor is itself (PyTorch's rule)."""
    return x if x.ndim < 2 else transpose(t, x, 0, 1)


def numpy_t(t, x):
    """``Tensor.T`` (``aten.numpy_T``): every dim reversed, as numpy's ``.T`` (for 2-d the same as
    ``t()``)."""
    return x if x.ndim < 2 else t.permute(x, list(range(x.ndim))[::-1])


def unsqueeze(t, x, dim):
    """``torch.unsqueeze(x, dim)``: a new dim of size 1 at ``dim`` (in ``[-ndim - 1, ndim]``)."""
    return op.unsqueeze(x, norm_dim(dim, x.ndim + 1))


def squeeze(t, x, dim=None):
    """``torch.squeeze(x, dim=None)``: the size-1 dims removed (of ``dim``, an int or a list, when given); a named dim
    whose size is not 1, or is symbolic, stays (PyTorch leaves it)."""
    if dim is None:
        axes = [i for i, d in enumerate(x.shape) if static(d) == 1]
    else:
        axes = [norm_dim(d, x.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        axes = [a for a in axes if static(x.shape[a]) == 1]   # torch leaves a non-1 dim alone
    return x if not axes else op.squeeze(x, axes)


def flatten(t, x, start_dim=0, end_dim=-1):
    """``torch.flatten(x, start_dim=0, end_dim=-1)``: the dims from ``start_dim`` to ``end_dim`` merged into one (their
    product, symbolic dims as a PrimExpr); a 0-d ``x`` becomes ``(1,)``."""
    if x.ndim == 0:
        return t.reshape(x, [1])
    s, e = norm_dim(start_dim, x.ndim), norm_dim(end_dim, x.ndim)
    if s == e:
        return x
    n = 1
    for d in x.shape[s:e + 1]:
        n = n * d
    return t.reshape(x, [*x.shape[:s], E.simplify(n) if isinstance(n, E.PrimExpr) else n, *x.shape[e + 1:]])


def unflatten(t, x, dim, sizes_):
    """``torch.unflatten(x, dim, sizes)``: dim ``dim`` split into ``sizes`` (one ``-1`` inferred,
    :meth:`GraphTranslator.reshape`)."""
    d = norm_dim(dim, x.ndim)
    return t.reshape(x, [*x.shape[:d], *sizes_, *x.shape[d + 1:]])


def expand(t, x, *shape, implicit=False):
    """``Tensor.expand(*shape)``: ``x`` broadcast to ``shape`` (``-1`` keeps a dim; new dims only in front); ``x``
    itself when nothing changes. Raises FrontendError for fewer sizes than ``x`` has dims or a ``-1`` for a new dim."""
    shape = sizes(shape)
    lead = len(shape) - x.ndim
    if lead < 0:
        raise FrontendError(f"expand: {len(shape)} sizes for a tensor of {x.ndim} dims")
    out = []
    for i, s in enumerate(shape):
        if static(s) == -1:
            if i < lead:
                raise FrontendError("expand: -1 is not allowed for a new leading dim")
            out.append(x.shape[i - lead])
        else:
            out.append(s)
    if len(out) == x.ndim and all(E.prove_equal(a, b) for a, b in zip(out, x.shape)):
        return x
    return op.broadcast_to(x, out)


def tile(t, x, *reps):
    """``Tensor.repeat(*sizes)`` / ``torch.tile`` (``numpy.tile``, :func:`builder.nn.op.tile`): each dim times its
    repeat (leading new dims for extra repeats). Raises FrontendError for a symbolic repeat."""
    reps = [static(r) for r in sizes(reps)]
    if any(r is None for r in reps):
        raise FrontendError(f"repeat: the repeats must be static ints, got {reps}")
    return op.tile(x, reps)


def repeat_interleave(t, x, repeats=None, dim=None, *, output_size=None):
    """``torch.repeat_interleave``: with an int ``repeats``, ``numpy.repeat``; with a tensor of repeats (one per
    element along ``dim``, or one for all), a gather at index ``i`` repeated ``repeats[i]`` times
    (:func:`builder.nn.op.repeat_interleave_indices`: the length is bound when the model runs); with only a
    tensor (``torch.repeat_interleave(repeats)``), those indices."""
    if is_tensor(x) and repeats is None:      # repeat_interleave(repeats): the indices themselves
        return op.repeat_interleave_indices(as_dtype(at_least_1d(t, x), "int64"))
    if not is_tensor(repeats):
        r = static(repeats)
        if r is None:
            raise UnsupportedNodeError("repeat_interleave with symbolic repeats")
        return op.repeat(x, r, axis=None if dim is None else norm_dim(dim, x.ndim))
    if dim is None:
        x, d = t.reshape(x, [-1]), 0
    else:
        d = norm_dim(dim, x.ndim)
    r = as_dtype(at_least_1d(t, repeats), "int64")
    if static(r.shape[0]) == 1 and static(x.shape[d]) != 1:   # one count for every element
        r = op.broadcast_to(r, [x.shape[d]])
    return op.take(x, op.repeat_interleave_indices(r), axis=d)


def expand_as(t, x, other):
    """``Tensor.expand_as(other)``: :func:`expand` to ``other``'s shape."""
    return expand(t, x, other.shape)


def broadcast_to(t, x, shape):
    """``torch.broadcast_to(x, shape)``: :func:`expand` to ``shape``."""
    return expand(t, x, shape)


def cat(t, tensors, dim=0):
    """``torch.cat(tensors, dim=0)``: concatenated along ``dim`` after torch's type promotion of their dtypes;
    PyTorch's legacy empty ``(0,)`` operands are dropped, and one remaining tensor is returned as it is. Raises
    FrontendError for a dim out of range."""
    tensors = [v for v in tensors if not (is_tensor(v) and v.ndim == 1 and static(v.shape[0]) == 0)]
    if len(tensors) == 1:
        return tensors[0]
    dt = tensors[0].dtype
    for v in tensors[1:]:
        dt = torch_promote(dt, v.dtype)
    tensors = [as_dtype(v, dt) for v in tensors]
    return op.concat(tensors, dim=norm_dim(dim, tensors[0].ndim))


def stack(t, tensors, dim=0):
    """``torch.stack(tensors, dim=0)``: each unsqueezed at ``dim`` then :func:`cat` along it; the result has one more
    dim."""
    d = norm_dim(dim, tensors[0].ndim + 1)
    return cat(t, [op.unsqueeze(v, d) for v in tensors], d)


def unfold_windows(t, x, dimension, size, step):
    """``Tensor.unfold(dimension, size, step)`` (``aten.unfold``): the windows of ``size`` elements every
    ``step`` along ``dimension`` -- that dim becomes the window count ``(L - size) // step + 1`` and a last
    dim of ``size`` is added -- as one gather by the index grid ``arange(n) * step + arange(size)``."""
    d = norm_dim(dimension, x.ndim)
    size, step = int(size), int(step)
    if size < 0 or step <= 0:
        raise UnsupportedNodeError(f"Tensor.unfold with size {size}, step {step}")
    n = (x.shape[d] - size) // step + 1
    start = op.multiply(op.unsqueeze(op.arange(0, n, 1, dtype="int64"), 1), to_tensor(step, "int64"))
    grid = op.add(start, op.unsqueeze(op.arange(0, size, 1, dtype="int64"), 0))           # (n, size)
    win = op.take(x, grid, axis=d)                                       # (..., n, size, ...)
    axes = list(range(x.ndim + 1))
    axes.append(axes.pop(d + 1))
    return win if d == x.ndim - 1 else t.permute(win, axes)


def _split_indices(total, sections: list[int]) -> list[int]:
    idx, at = [], 0
    for s in sections[:-1]:
        at += int(s)
        idx.append(at)
    return idx


def split(t, x, split_size_or_sections, dim=0):
    """``torch.split``: an int is the size of each piece (the last one smaller), a list the sizes."""
    d = norm_dim(dim, x.ndim)
    n = static(x.shape[d])
    if isinstance(split_size_or_sections, (list, tuple)):
        secs = [int(s) for s in split_size_or_sections]
        if len(secs) == 1:
            return (x,)
        return tuple(op.split(x, _split_indices(n, secs), axis=d))
    size = int(split_size_or_sections)
    if n is None:
        raise FrontendError(f"split into pieces of {size} along a symbolic dim {x.shape[d]}")
    if size >= n:
        return (x,)
    return tuple(op.split(x, list(range(size, n, size)), axis=d))


def split_with_sizes(t, x, split_sizes, dim=0):
    """``Tensor.split_with_sizes(sizes, dim=0)``: :func:`split` into pieces of the given sizes."""
    return split(t, x, list(split_sizes), dim)


def chunk(t, x, chunks, dim=0):
    """``torch.chunk(x, chunks, dim=0)``: a tuple of ``chunks`` pieces along ``dim`` of ``ceil(n / chunks)`` each (the
    last smaller, fewer pieces when n is small, as in PyTorch); a symbolic ``n`` goes through
    :func:`builder.nn.op.chunk`."""
    d = norm_dim(dim, x.ndim)
    n = static(x.shape[d])
    if n is None:
        return tuple(op.chunk(x, int(chunks), d))
    size = -(-n // int(chunks))
    return split(t, x, size, d)


def unbind(t, x, dim=0):
    """``torch.unbind(x, dim=0)``: the tuple of slices :func:`select` ``(x, dim, i)`` for every ``i``. Raises
    FrontendError along a symbolic dim (the count is unknown at import time)."""
    d = norm_dim(dim, x.ndim)
    n = static(x.shape[d])
    if n is None:
        raise FrontendError(f"unbind along a symbolic dim {x.shape[d]}")
    return tuple(select(t, x, d, i) for i in range(n))


def slice_bounds(x, dim, start, end):
    """``(dim, begin, end)`` of ``x[start:end]`` along ``dim`` with torch's rules: bounds clamp to the
    size, a huge ``end`` is the end, a negative bound counts from the end (symbolic sizes too)."""
    d = norm_dim(dim, x.ndim)
    size = x.shape[d]

    def bound(v, default):
        if v is None:
            return default
        s = static(v)
        if s is None:
            return v
        if s >= _BIG or (static(size) is not None and s >= static(size)):
            return size
        if s < 0:
            if static(size) is not None:
                return max(static(size) + s, 0)
            return E.simplify(E.convert(size) + s)
        return s

    return d, bound(start, 0), bound(end, size)


def slice_(t, x, dim=0, start=None, end=None, step=1):
    """``x[start:end:step]`` along ``dim`` (torch semantics: bounds clamp, huge ``end`` = the end)."""
    step = 1 if step is None else int(step)
    if step <= 0:
        raise FrontendError(f"slice step must be positive, got {step}")
    d, b, e = slice_bounds(x, dim, start, end)
    if static(b) == 0 and E.prove_equal(e, x.shape[d]) and step == 1:
        return x
    return op.strided_slice(x, [d], [b], [e], [step])


def select(t, x, dim, index):
    """``Tensor.select(dim, index)`` / ``x[..., i]``: the slice at ``index`` (negative counts from the end, a symbolic
    index allowed) with dim ``dim`` removed."""
    d = norm_dim(dim, x.ndim)
    size = x.shape[d]
    i = static(index)
    if i is not None and i < 0:
        i = static(size) + i if static(size) is not None else E.simplify(E.convert(size) + i)
    elif i is None:
        i = index
    y = op.strided_slice(x, [d], [i], [i + 1 if isinstance(i, int) else E.simplify(i + 1)], [1])
    return op.squeeze(y, [d])


def diff(t, x, n=1, dim=-1, prepend=None, append=None):
    """``torch.diff``: ``x[1:] - x[:-1]`` along ``dim``, ``n`` times, after concatenating ``prepend`` /
    ``append``; bool tensors give ``!=`` as in PyTorch."""
    d = norm_dim(dim, x.ndim)
    parts = [v for v in (prepend, x, append) if v is not None]
    if len(parts) > 1:
        x = cat(t, parts, d)
    for _ in range(int(n)):
        hi = slice_(t, x, d, 1, None)
        lo = slice_(t, x, d, 0, -1)
        x = op.not_equal(hi, lo) if x.dtype == "bool" else op.subtract(hi, lo)
    return x


def narrow(t, x, dim, start, length):
    """``torch.narrow(x, dim, start, length)``: :func:`slice_` from ``start`` to ``start + length`` along ``dim``."""
    return slice_(t, x, dim, start, start + length)


def diagonal(t, x, offset=0, dim1=0, dim2=1):
    """``torch.diagonal``: the (``offset``) diagonal of dims ``dim1`` / ``dim2`` as a last dim, the other dims
    kept in order; static sizes of those two dims. One gather from the flattened pair."""
    a, b = norm_dim(dim1, x.ndim), norm_dim(dim2, x.ndim)
    n1, n2 = static(x.shape[a]), static(x.shape[b])
    if n1 is None or n2 is None:
        raise UnsupportedNodeError("diagonal of symbolic dims")
    off = int(offset)
    length = max(0, min(n1, n2 - off) if off >= 0 else min(n1 + off, n2))
    rows = np.arange(length) + max(0, -off)
    flat_idx = rows * n2 + rows + off
    rest = [d for d in range(x.ndim) if d not in (a, b)]
    moved = t.permute(x, rest + [a, b])
    flat = t.reshape(moved, [x.shape[d] for d in rest] + [n1 * n2])
    return op.take(flat, to_tensor(flat_idx.astype(np.int64), "int64"), axis=len(rest))


def size(t, x, dim=None):
    """``Tensor.size(dim=None)`` / ``x.shape``: the list of sizes, or the size of ``dim``: ints and int64 PrimExprs
    (symbolic dims), not tensors."""
    if dim is None:
        return list(x.shape)
    return x.shape[norm_dim(dim, x.ndim)]


def dim_(t, x):
    """``Tensor.dim()`` / ``ndim``: the number of dims, an int."""
    return x.ndim


def numel(t, x):
    """``Tensor.numel()``: the product of the sizes, an int or a simplified PrimExpr."""
    n = 1
    for d in x.shape:
        n = n * d
    return E.simplify(n) if isinstance(n, E.PrimExpr) else n


def tril(t, x, diagonal=0):
    """``torch.tril(x, diagonal=0)``: the lower triangle of the last two dims (above ``diagonal`` zeroed); same shape
    and dtype."""
    return op.tril(x, int(diagonal))


def triu(t, x, diagonal=0):
    """``torch.triu(x, diagonal=0)``: the upper triangle of the last two dims (below ``diagonal`` zeroed); same shape
    and dtype."""
    return op.triu(x, int(diagonal))


def pad(t, x, pad_, mode="constant", value=None):
    """``F.pad``: ``pad_`` is (last dim's before, after, the one before's, ...); modes ``constant``,
    ``replicate``, ``reflect`` and ``circular`` (numpy's ``wrap``)."""
    pairs = [(pad_[i], pad_[i + 1]) for i in range(0, len(pad_), 2)]
    width = [0] * (2 * x.ndim)
    for k, (b, a) in enumerate(pairs):
        ax = x.ndim - 1 - k
        width[2 * ax], width[2 * ax + 1] = int(b), int(a)
    modes = {"constant": "constant", "replicate": "edge", "reflect": "reflect", "circular": "wrap"}
    if mode not in modes:
        raise UnsupportedNodeError(f"pad mode {mode!r}")
    return op.pad(x, width, mode=modes[mode], value=0.0 if value is None else float(value))


def contiguous(t, x, *args, **kwargs):
    """``Tensor.contiguous()`` / ``clone()`` / ``detach()``: ``x`` itself (values here have no memory layout and are
    never mutated)."""
    return x
