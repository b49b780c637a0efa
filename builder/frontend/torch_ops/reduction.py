"""Translations of torch's reductions along dims: sums, means, extremes with their indices, variances,
norms, softmax, sorting and top-k, cumulative sums, unique and nonzero.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from ...nn import op
from ..dtypes import as_dtype, is_float, torch_dtype
from ..errors import FrontendError, UnsupportedNodeError
from .operands import at_least_1d, binary, is_tensor, norm_dim, reduce_axes, static, to_tensor, ValuesIndices


def logsumexp(t, x, dim, keepdim=False):
    """``torch.logsumexp(x, dim, keepdim=False)``: ``log(sum(exp(x)))`` along ``dim`` (computed stably by
    :func:`builder.nn.op.logsumexp`), ``dim`` an int, a list of them or None (every dim), ``keepdim`` keeps the
    reduced dims as 1."""
    return op.logsumexp(x, reduce_axes(x, dim), bool(keepdim))


def vector_norm(t, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """``torch.linalg.vector_norm(x, ord=2, dim=None, keepdim=False)``: ``ord`` 2 (``sqrt(sum(x^2))``), 1, inf / -inf
    (the largest / smallest ``|x|``), 0 (the count of nonzeros, in ``x``'s dtype) or any other ``p``
    (``sum(|x|^p)^(1/p)``) along ``dim`` (every dim when None), ``keepdim`` keeping them as 1."""
    axes = reduce_axes(x, dim)
    a = op.abs(x)
    o = float(ord)
    if o == 2:
        return op.sqrt(op.sum(op.multiply(x, x), axis=axes, keepdims=bool(keepdim)))
    if o == 1:
        return op.sum(a, axis=axes, keepdims=bool(keepdim))
    if math.isinf(o):
        return (op.max if o > 0 else op.min)(a, axis=axes, keepdims=bool(keepdim))
    if o == 0:
        return op.sum(as_dtype(op.not_equal(x, 0.0), x.dtype), axis=axes, keepdims=bool(keepdim))
    return op.power(op.sum(op.power(a, o), axis=axes, keepdims=bool(keepdim)), 1.0 / o)


def any_all(kind: str):
    """The translation of ``torch.any`` / ``torch.all`` (``kind``): ``fn(t, x, dim=None, keepdim=False)``, a bool
    tensor (nonzero is True) reduced along ``dim``; ``dim`` an int, a list of them or None (every dim), ``keepdim``
    keeps the reduced dims as 1."""
    def run(t, x, dim=None, keepdim=False):
        v = as_dtype(x if x.dtype == "bool" else op.not_equal(x, 0), "int32")
        r = (op.max if kind == "any" else op.min)(v, axis=reduce_axes(x, dim), keepdims=bool(keepdim))
        return op.not_equal(r, 0)
    run.__name__ = kind
    return run


def std_mean(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``torch.std_mean(x, dim, unbiased / correction, keepdim)``: ``(std, mean)`` (:func:`std`, the mean along the
    same dims)."""
    return std(t, x, dim, unbiased, keepdim, correction=correction), reduce("mean")(t, x, dim, keepdim)


def var_mean(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``torch.var_mean(x, dim, unbiased / correction, keepdim)``: ``(var, mean)`` (:func:`var`, the mean along the
    same dims)."""
    return var(t, x, dim, unbiased, keepdim, correction=correction), reduce("mean")(t, x, dim, keepdim)


def bucketize(t, x, boundaries, *, out_int32=False, right=False):
    """``torch.bucketize(x, boundaries, right=False, out_int32=False)``: per value of ``x``, the number of the 1-D
    sorted ``boundaries`` below it (``<=`` with ``right``), i.e. its bucket; ``x``'s shape, int64 (int32 with
    ``out_int32``)."""
    cmp = op.greater_equal if right else op.greater
    hits = as_dtype(cmp(op.unsqueeze(x, x.ndim), boundaries), "int32" if out_int32 else "int64")
    return op.sum(hits, axis=[x.ndim])


def normalize(t, x, p=2.0, dim=1, eps=1e-12, out=None):
    """``F.normalize(x, p=2, dim=1, eps=1e-12)``: ``x / max(||x||_p, eps)`` along ``dim``
    (:func:`builder.nn.op.normalize`); same shape and dtype. Raises FrontendError for a dim out of range."""
    return op.normalize(x, float(p), norm_dim(dim, x.ndim), float(eps))


def softmin(t, x, dim=None, _stacklevel=3, dtype=None):
    """``F.softmin(x, dim)``: ``softmax(-x)`` along ``dim`` (the last when None); ``dtype`` casts first. Same shape."""
    return softmax(t, op.negative(x), dim if dim is not None else -1, dtype)


def softmax(t, x, dim=None, dtype=None, _stacklevel=3, half_to_float=False):
    """``F.softmax(x, dim, dtype=None)`` / ``Tensor.softmax``: along ``dim`` (the last when None), ``x`` cast to
    ``dtype`` first when given; same shape. Raises FrontendError for a dtype we do not have."""
    if dtype is not None:
        x = as_dtype(x, torch_dtype(dtype))
    return op.softmax(x, axis=-1 if dim is None else dim)


def aten_softmax(t, x, dim, half_to_float=False):
    """``aten._softmax(x, dim, half_to_float)``: softmax along ``dim`` in ``x``'s dtype (``half_to_float`` is False in
    exported inference graphs)."""
    return op.softmax(x, axis=dim)


def log_softmax(t, x, dim=None, dtype=None, _stacklevel=3):
    """``F.log_softmax(x, dim, dtype=None)``: ``x - logsumexp(x)`` along ``dim`` (the last when None), ``x`` cast to
    ``dtype`` first when given; same shape."""
    if dtype is not None:
        x = as_dtype(x, torch_dtype(dtype))
    return op.log_softmax(x, axis=-1 if dim is None else dim)


def reduce(name: str):
    """The translation of ``torch.<name>`` for ``name`` in ``"mean"``, ``"sum"``, ``"prod"``: ``fn(t, x, dim=None,
    keepdim=False, dtype=None)``, ``dim`` an int, a list of them or None (every dim), ``keepdim`` keeps the reduced
    dims as 1; ``dtype`` casts first. As in PyTorch, a sum of bool or of integers narrower than int64 is int64.
    Raises FrontendError for the mean of a non-float tensor (PyTorch refuses it too)."""
    def fn(t, x, dim=None, keepdim=False, *, dtype=None, out=None):
        if dtype is not None:
            x = as_dtype(x, torch_dtype(dtype))
        if name == "mean" and not is_float(x.dtype):
            raise FrontendError(f"mean of a {x.dtype} tensor (torch requires a float dtype)")
        if name == "sum" and x.dtype in ("bool", "int32", "int16", "int8", "uint8"):
            x = as_dtype(x, "int64")
        return getattr(op, name)(x, axis=reduce_axes(x, dim), keepdims=bool(keepdim))
    fn.__name__ = name
    return fn


def amax(t, x, dim=(), keepdim=False):
    """``torch.amax(x, dim=(), keepdim=False)``: the largest value along ``dim`` (every dim for ``()``), ``dim`` an
    int, a list of them or None (every dim), ``keepdim`` keeps the reduced dims as 1; same dtype."""
    return op.max(x, axis=reduce_axes(x, dim), keepdims=bool(keepdim))


def amin(t, x, dim=(), keepdim=False):
    """``torch.amin(x, dim=(), keepdim=False)``: the smallest value along ``dim`` (every dim for ``()``), ``dim`` an
    int, a list of them or None (every dim), ``keepdim`` keeps the reduced dims as 1; same dtype."""
    return op.min(x, axis=reduce_axes(x, dim), keepdims=bool(keepdim))


def max_min(kind: str) -> Callable:
    """``torch.max`` / ``torch.min`` (and the Tensor methods): of the whole tensor; along ``dim``,
    the named tuple ``(values, indices)`` (indices int64, the first extreme on ties); of two tensors,
    elementwise."""
    reduce_, arg, pair_ = (op.max, op.argmax, "maximum") if kind == "max" else (op.min, op.argmin, "minimum")

    def run(t, x, dim=None, keepdim=False):
        if is_tensor(dim):
            return binary(pair_, x, dim)
        if dim is None:
            return reduce_(x)
        axis = norm_dim(dim, x.ndim)
        return ValuesIndices((reduce_(x, axis=[axis], keepdims=bool(keepdim)),
                              arg(x, axis=axis, keepdims=bool(keepdim))))
    run.__name__ = kind
    return run


def sort(t, x, dim=-1, descending=False, *, stable=None):
    """``torch.sort`` (also the ``stable=`` overload): ``(values, indices)``, indices int64. Ours is always
    stable (equal values keep their order), which ``stable=False`` allows; NaN sorts as the largest, as
    in PyTorch."""
    axis = norm_dim(dim, x.ndim)
    order = op.argsort(x, axis=axis, descending=bool(descending), dtype="int64")
    return ValuesIndices((op.gather_elements(x, order, axis=axis), order))


def argsort(t, x, dim=-1, descending=False, *, stable=None):
    """``torch.argsort(x, dim=-1, descending=False)``: the int64 positions that sort ``x`` along ``dim``, stable (equal
    values keep their order, see :func:`sort`); ``x``'s shape."""
    return op.argsort(x, axis=norm_dim(dim, x.ndim), descending=bool(descending), dtype="int64")


def topk(t, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    """``torch.topk``: ``(values, indices)``, indices int64, always sorted (``sorted=False`` allows any
    order); ties give the lower position first."""
    kk = static(k)
    if kk is None:
        raise UnsupportedNodeError("topk with a k computed at run time")
    return ValuesIndices(op.topk(x, kk, axis=norm_dim(dim, x.ndim), largest=bool(largest), dtype="int64"))


def kthvalue(t, x, k, dim=-1, keepdim=False):
    """``torch.kthvalue``: ``(values, indices)`` of the ``k``-th smallest element along ``dim`` (1-based; NaN
    counts as the largest), the last of the ``k`` smallest (:func:`builder.nn.op.topk`; with ties the index is
    one of the tied positions, which PyTorch leaves unspecified too). ``k`` static."""
    kk = static(k)
    if kk is None:
        raise UnsupportedNodeError("kthvalue with a k computed at run time")
    axis = norm_dim(dim, x.ndim) if x.ndim else 0
    x1 = op.reshape(x, [1]) if x.ndim == 0 else x
    vals, idx = op.topk(x1, kk, axis=axis, largest=False, dtype="int64")
    pick = lambda v: op.strided_slice(v, [axis], [kk - 1], [kk])
    vals, idx = pick(vals), pick(idx)
    if not keepdim or x.ndim == 0:
        vals, idx = op.squeeze(vals, [axis]), op.squeeze(idx, [axis])
    return ValuesIndices((vals, idx))


def median(t, x, dim=None, keepdim=False):
    """``torch.median``: the lower median (the ``(n + 1) // 2``-th smallest) along ``dim``, ``(values, indices)``,
    or of all elements (a 0-d value) without ``dim``; a slice holding a NaN gives NaN and the position of its
    first NaN, as PyTorch. The reduced size must be static (:func:`kthvalue`)."""
    if dim is None:
        return median(t, op.reshape(x, [-1]), 0)[0]
    if x.ndim == 0:      # (a 0-d input: its own median at index 0, 0-d)
        return median(t, op.reshape(x, [1]), 0)
    axis = norm_dim(dim, x.ndim)
    n = static(x.shape[axis])
    if n is None:
        raise UnsupportedNodeError(f"median over the symbolic size {x.shape[axis]}")
    vals, idx = kthvalue(t, x, (n + 1) // 2, dim, keepdim)
    if x.dtype not in ("float32", "float16", "bfloat16", "float64"):
        return ValuesIndices((vals, idx))
    nan = op.astype(op.not_equal(x, x), "int32")
    has = op.max(nan, axis=[axis], keepdims=bool(keepdim))         # (where casts it to bool)
    first = op.argmax(nan, axis=axis, keepdims=bool(keepdim))
    return ValuesIndices((op.where(has, float("nan"), vals), op.where(has, first, idx)))


def arg_reduce(kind: str) -> Callable:
    """The translation of ``torch.argmax`` / ``argmin`` (``kind``): ``fn(t, x, dim=None, keepdim=False)``, the int64
    index of the first extreme along ``dim``, or into the flattened tensor when ``dim`` is None (shape ``(1,) *
    ndim`` with ``keepdim``)."""
    fn = op.argmax if kind == "argmax" else op.argmin

    def run(t, x, dim=None, keepdim=False):
        if dim is None:
            out = fn(x)
            return op.reshape(out, [1] * x.ndim) if keepdim else out
        return fn(x, axis=norm_dim(dim, x.ndim), keepdims=bool(keepdim))
    run.__name__ = kind
    return run


def var(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``torch.var(x, dim=None, unbiased=None, keepdim=False, correction=None)``: the mean squared deviation along
    ``dim`` times ``n / (n - correction)`` (``correction`` 1 unless ``unbiased=False`` or given, PyTorch 2's rule);
    ``dim`` an int, a list of them or None (every dim), ``keepdim`` keeps the reduced dims as 1. Raises
    FrontendError for a correction over symbolic dims (``n`` unknown at import time)."""
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    axes = reduce_axes(x, dim)
    m = op.mean(x, axis=axes, keepdims=True)
    d = op.subtract(x, m)
    v = op.mean(op.multiply(d, d), axis=axes, keepdims=bool(keepdim))
    if correction:
        n = 1
        for a in (axes if axes is not None else range(x.ndim)):
            n = n * x.shape[a]
        if static(n) is None:
            raise FrontendError("var / std with a correction over symbolic dims is not supported")
        v = op.multiply(v, float(static(n)) / max(static(n) - correction, 1))
    return v


def std(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``torch.std(...)``: the square root of :func:`var` with the same arguments."""
    return op.sqrt(var(t, x, dim, unbiased, keepdim, correction=correction))


def nonzero(t, x):
    """``torch.nonzero``: the (n, ndim) int64 indices of the nonzero elements, row-major, ``n`` a dim bound
    when the model runs (:func:`builder.nn.op.nonzero`); a 0-d x as one element."""
    return op.permute_dims(op.nonzero(at_least_1d(t, x)), [1, 0])


def argwhere(t, x):
    """``torch.argwhere(x)``: :func:`nonzero`, the int64 ``(count, ndim)`` indices of the nonzero elements (a
    data-dependent count)."""
    return nonzero(t, x)


def count_nonzero(t, x, dim=None):
    """``torch.count_nonzero``: int64 counts of the nonzero elements over ``dim`` (int, list or None:
    all)."""
    axis = None if dim is None else [norm_dim(d, x.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    return op.sum(op.astype(op.not_equal(x, to_tensor(0, x.dtype)) if x.dtype != "bool" else x, "int64"), axis=axis)


def unique(t, x, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """``torch.unique`` (no ``dim``): the distinct values flattened, ascending, with the inverse indices in
    x's shape and the counts when asked (:func:`builder.nn.op.unique`: the count is bound when the model
    runs)."""
    if dim is not None:
        raise UnsupportedNodeError("torch.unique with dim")
    values, _first, inverse, counts = op.unique(x, sorted=bool(sorted))
    out = [values]
    if return_inverse:
        out.append(t.reshape(inverse, list(x.shape)))
    if return_counts:
        out.append(counts)
    return out[0] if len(out) == 1 else tuple(out)


def aten_unique2(t, x, sorted=True, return_inverse=False, return_counts=False):  # noqa: A002
    """``aten._unique2``: always ``(values, inverse in x's shape, counts)``."""
    values, _first, inverse, counts = op.unique(x, sorted=bool(sorted))
    return values, t.reshape(inverse, list(x.shape)), counts


def cumulative(kind: str) -> Callable:
    """``torch.cumsum`` / ``torch.cumprod``: integers and bools accumulate in int64 unless a ``dtype`` is
    given, as PyTorch does."""
    fn = getattr(op, f"cum{kind}")

    def run(t, x, dim, dtype=None):
        if dtype is not None:
            x = as_dtype(x, torch_dtype(dtype))
        elif x.dtype in ("bool", "int32", "int16", "int8", "uint8"):
            x = as_dtype(x, "int64")
        return fn(x, axis=norm_dim(dim, x.ndim))
    run.__name__ = f"cum{kind}"
    return run


cumsum = cumulative("sum")
