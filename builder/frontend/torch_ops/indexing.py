"""Translations of torch's indexing: ``x[key]`` (ints, slices, tensors, masks), gather / scatter,
``index_put`` and the writes through views that in-place assignments make.
"""
from __future__ import annotations

from ...ir import expr as E
from ...ir.op import broadcast_shapes
from ...nn import op
from ...nn.core import Tensor
from ..dtypes import as_dtype
from ..errors import FrontendError, UnsupportedNodeError
from .creation import copy_
from .manipulation import select, slice_, slice_bounds
from .operands import binary, is_size, is_tensor, norm_dim, static, to_tensor


def gather(t, x, dim, index, *, sparse_grad=False):
    """``torch.gather(x, dim, index)``: ``out[i][j] = x[index[i][j]][j]`` along ``dim``
    (:func:`builder.nn.op.gather_elements`); the result has ``index``'s shape and ``x``'s dtype. Raises
    FrontendError for a dim out of range."""
    return op.gather_elements(x, index, axis=norm_dim(dim, x.ndim))


_TORCH_SCATTER = {None: "update", "add": "add", "multiply": "mul", "sum": "add", "prod": "mul", "amax": "max",
                  "amin": "min"}


def scatter(t, x, dim, index, src=None, value=None, *, reduce=None, include_self=True):
    """``Tensor.scatter`` (a ``src`` tensor or a scalar ``value``; ``reduce`` "add" / "multiply"),
    ``scatter_add`` and ``scatter_reduce`` ("sum", "prod", "amax", "amin"; ``include_self=True``):
    :func:`builder.nn.op.scatter_elements` (duplicates apply in index order). A scalar becomes updates of
    the index's shape. Raises UnsupportedNodeError for "mean" or ``include_self=False``."""
    if not include_self:
        raise UnsupportedNodeError("scatter_reduce with include_self=False")
    if reduce not in _TORCH_SCATTER:
        raise UnsupportedNodeError(f"scatter reduce={reduce!r}")
    upd = src if src is not None else value
    if not is_tensor(upd):
        upd = op.broadcast_to(to_tensor(upd, x.dtype), list(index.shape))
    return op.scatter_elements(x, index, as_dtype(upd, x.dtype), axis=norm_dim(dim, x.ndim),
                               reduction=_TORCH_SCATTER[reduce])


def masked_select(t, x, mask):
    """``torch.masked_select``: the elements of ``x`` where the bool ``mask`` is true (both broadcast to
    one shape), row-major, as a 1-D tensor whose length is bound when the model runs."""
    shape = list(broadcast_shapes(tuple(x.shape), tuple(mask.shape), "masked_select"))
    xb = x if list(x.shape) == shape else op.broadcast_to(x, shape)
    mb = mask if list(mask.shape) == shape else op.broadcast_to(mask, shape)
    return op.take(t.reshape(xb, [-1]), _mask_positions(t, mb), axis=0)


def scatter_view(t, base, view: tuple, value) -> Tensor:
    """``base`` with the region of ``view`` replaced by ``value`` (broadcast to the region, in ``base``'s
    dtype): what an in-place op on a view (``x[:, 1:] = y``, ``x[:, 0].fill_(v)``) does to the tensor
    it views. ``view`` is ``("slice", dim, start, end, step)`` (step 1) or ``("select", dim, index)``.
    Emitted as a concatenation of ``base``'s parts before and after the region around ``value``.
    Raises UnsupportedNodeError for a strided slice."""
    kind, dim = view[0], view[1]
    if kind == "slice":
        step = 1 if view[4] is None else static(view[4])
        if step != 1:
            raise UnsupportedNodeError(f"assignment into a slice with step {view[4]}")
        d, b, e = slice_bounds(base, dim, view[2], view[3])
        region = slice_(t, base, d, b, e)
    else:
        d = norm_dim(dim, base.ndim)
        i = static(view[2])
        if i is None:
            raise UnsupportedNodeError("assignment at a symbolic index")
        if i < 0:
            if static(base.shape[d]) is None:
                raise UnsupportedNodeError("assignment at a negative index of a symbolic dim")
            i += static(base.shape[d])
        b, e = i, i + 1
        region = op.strided_slice(base, [d], [b], [e], [1])
    value = to_tensor(value, base.dtype)
    if kind == "select":
        value = op.unsqueeze(value, d) if value.ndim >= region.ndim - 1 and value.ndim else value
    value = op.broadcast_to(value, list(region.shape)) if list(value.shape) != list(region.shape) else value
    parts = []
    if static(b) != 0:
        parts.append(slice_(t, base, d, 0, b))
    parts.append(value)
    if not E.prove_equal(e, base.shape[d]):
        parts.append(slice_(t, base, d, e, None))
    return parts[0] if len(parts) == 1 else op.concat(parts, dim=d)


def key_view(ndim: int, key) -> tuple | None:
    """The view (:func:`scatter_view`'s form) that ``x[key]`` is for an ``ndim``-d ``x``, when ``key`` is
    full slices and one int or slice of one dim (``...`` allowed); else None."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1 or any(k is None for k in key):
        return None
    if any(k is Ellipsis for k in key):
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1:]
    picked = [(d, k) for d, k in enumerate(key) if not (isinstance(k, slice) and k == slice(None))]
    if len(picked) != 1 or len(key) > ndim:
        return None
    d, k = picked[0]
    if isinstance(k, slice):
        return ("slice", d, k.start, k.stop, k.step)
    if isinstance(k, (int, E.PrimExpr)) and not isinstance(k, bool):
        return ("select", d, k)
    return None


def fill(t, x, value):
    """``Tensor.fill_`` / ``aten.fill``: ``value`` (a number or a 0-d tensor) everywhere in ``x``'s shape
    and dtype."""
    v = to_tensor(value, x.dtype)
    return op.broadcast_to(v, list(x.shape)) if list(v.shape) != list(x.shape) else v


def take_along(t, x, axis: int, idx: Tensor) -> Tensor:
    """``x`` indexed by the int tensor ``idx`` along ``axis`` (result dims: x's before, idx's, x's
    after); negative indices count from the end."""
    if idx.dtype == "bool":   # x[..., mask]: the dims the mask covers, flattened, at its nonzero elements
        return op.take(_mask_dims_flat(t, x, axis, idx), _mask_positions(t, idx), axis=axis)
    idx = as_dtype(idx, "int64")
    idx = op.where(op.less(idx, 0), op.add(idx, to_tensor(x.shape[axis], "int64")), idx)
    if idx.ndim == 1:
        return op.take(x, idx, axis=axis)
    flat = op.take(x, t.reshape(idx, [-1]), axis=axis)
    return t.reshape(flat, [*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]])


def _mask_dims_flat(t, x, axis: int, mask: Tensor) -> Tensor:
    """``x`` with the ``mask.ndim`` dims from ``axis`` (those a bool index covers; their sizes must match)
    merged into one."""
    covered = x.shape[axis:axis + mask.ndim]
    if len(covered) != mask.ndim or any(static(a) is not None and static(b) is not None and static(a) != static(b)
                                        for a, b in zip(covered, mask.shape)):
        raise ValueError(f"a bool index of shape {tuple(mask.shape)} does not fit dims {axis}.. of a tensor of "
                         f"shape {tuple(x.shape)}")
    merged = 1
    for d in covered:
        merged = merged * d
    merged = E.simplify(merged) if isinstance(merged, E.PrimExpr) else merged
    return t.reshape(x, [*x.shape[:axis], merged, *x.shape[axis + mask.ndim:]])


def _mask_positions(t, mask: Tensor) -> Tensor:
    """The flat positions of a bool mask's true elements (row-major), an (n,) int64 tensor with ``n`` bound
    when the model runs."""
    flat = op.nonzero(t.reshape(mask, [-1]))
    return t.reshape(flat, [flat.shape[1]])


def index_select(t, x, dim, index):
    """``torch.index_select(x, dim, index)``: the slices of ``x`` at the 1-D int64 ``index`` along ``dim``
    (:func:`take_along`); dim ``dim`` becomes ``len(index)``."""
    return take_along(t, x, norm_dim(dim, x.ndim), index)


def index(t, x, indices):
    """``aten.index.Tensor``: ``x[i0, i1, ...]`` with index tensors (None skips a dim). Adjacent
    index tensors broadcast together and select one element of the merged dims."""
    pos = [i for i, v in enumerate(indices) if v is not None]
    if not pos:
        return x
    if pos != list(range(pos[0], pos[-1] + 1)):
        raise UnsupportedNodeError("index tensors separated by full slices")
    a = pos[0]
    tensors = [indices[i] for i in pos]
    if len(tensors) == 1:
        return take_along(t, x, a, tensors[0])
    linear = None
    merged = 1
    for i, idx in zip(pos, tensors):
        if not is_tensor(idx) or idx.dtype == "bool":
            raise UnsupportedNodeError("boolean mask indexing (a data-dependent shape)")
        idx = as_dtype(idx, "int64")
        idx = op.where(op.less(idx, 0), op.add(idx, to_tensor(x.shape[i], "int64")), idx)
        linear = idx if linear is None else op.add(op.multiply(linear, to_tensor(x.shape[i], "int64")), idx)
        merged = merged * x.shape[i]
    merged = E.simplify(merged) if isinstance(merged, E.PrimExpr) else merged
    flat = t.reshape(x, [*x.shape[:a], merged, *x.shape[pos[-1] + 1:]])
    return take_along(t, flat, a, linear)


def index_put(t, x, indices, values, accumulate=False):
    """``aten.index_put`` (``x[i0, i1, ...] = values``, ``+=`` with ``accumulate``): a bool mask (one, covering
    the leading dims it indexes) writes ``values`` where it is true (a broadcast value); int index tensors
    (None skips a dim) broadcast together and become one :func:`builder.nn.op.scatter_nd` over the dims they
    index, moved to the front. Raises UnsupportedNodeError for a mask with a tensor of values picked in mask
    order (a data-dependent count)."""
    pos = [i for i, v in enumerate(indices) if v is not None]
    if not pos:
        return copy_(t, x, values) if not accumulate else binary("add", x, values)
    tensors = [indices[i] for i in pos]
    if any(idx.dtype == "bool" for idx in tensors):
        if len(tensors) != 1:
            raise UnsupportedNodeError("index_put with a bool mask and other indices")
        mask, a = tensors[0], pos[0]
        v = to_tensor(values, x.dtype)
        if v.ndim > 1 or (v.ndim == 1 and static(v.shape[0]) != 1):
            # x[mask] = values, one row of values per true element in row-major order
            # (values broadcast to x[mask]'s shape: x's dims before the mask, the count, x's dims after it)
            flat = _mask_dims_flat(t, x, a, mask)
            where_ = _mask_positions(t, mask)
            n = where_.shape[0]
            indexed = [*flat.shape[:a], n, *flat.shape[a + 1:]]
            v = op.broadcast_to(v, indexed) if len(v.shape) != len(indexed) or any(
                static(p) != static(q) or static(p) is None for p, q in zip(v.shape, indexed)) else v
            to_front = [a] + [d for d in range(flat.ndim) if d != a]
            front = t.permute(flat, to_front) if a else flat
            v = t.permute(v, to_front) if a else v
            out = op.scatter_nd(front, t.reshape(where_, [n, 1]), v, reduction="add" if accumulate else "update")
            if a:
                out = t.permute(out, [d for d in range(1, a + 1)] + [0] + list(range(a + 1, flat.ndim)))
            return t.reshape(out, list(x.shape))
        m = t.reshape(mask, [1] * a + list(mask.shape) + [1] * (x.ndim - a - mask.ndim))
        v = t.reshape(v, [])
        return op.where(m, binary("add", x, v) if accumulate else op.broadcast_to(v, list(x.shape)), x)
    others = [d for d in range(x.ndim) if d not in pos]
    perm = pos + others
    front = t.permute(x, perm) if perm != list(range(x.ndim)) else x
    idx = [as_dtype(i, "int64") for i in tensors]
    shape = list(idx[0].shape)
    for i in idx[1:]:
        shape = list(broadcast_shapes(tuple(shape), tuple(i.shape), "index_put"))
    grid = op.concat([op.unsqueeze(op.broadcast_to(i, shape), len(shape)) for i in idx], len(shape))   # (*J, q)
    rest = [front.shape[d] for d in range(len(pos), x.ndim)]
    nj = len(shape)
    values = to_tensor(values, x.dtype)
    if pos == list(range(pos[0], pos[-1] + 1)) and pos[0] > 0:
        # ``values`` is laid out as ``x[..., idx, ...]`` is: the index dims where the indexed ones were
        a = pos[0]
        upd = op.broadcast_to(values, rest[:a] + shape + rest[a:])
        upd = t.permute(upd, list(range(a, a + nj)) + list(range(a)) + list(range(a + nj, nj + len(rest))))
    else:
        upd = op.broadcast_to(values, shape + rest)
    out = op.scatter_nd(front, grid, upd, reduction="add" if accumulate else "update")
    if perm == list(range(x.ndim)):
        return out
    return t.permute(out, [perm.index(d) for d in range(x.ndim)])


def slice_scatter(t, x, src, dim=0, start=None, end=None, step=1):
    """``torch.slice_scatter`` / ``aten.slice_scatter``: ``x`` with ``x[start:end:step]`` along ``dim``
    replaced by ``src``: pieces concatenated for ``step`` 1, else one :func:`builder.nn.op.scatter_elements`."""
    d = norm_dim(dim, x.ndim)
    n = x.shape[d]
    lo = 0 if start is None else start
    hi = n if end is None or (isinstance(end, int) and isinstance(n, int) and end > n) else end
    if isinstance(lo, int) and lo < 0:
        lo += n
    if isinstance(hi, int) and hi < 0:
        hi += n
    src = as_dtype(src, x.dtype)
    if int(step) == 1:
        parts = []
        if not (isinstance(lo, int) and lo == 0):
            parts.append(op.strided_slice(x, [d], [0], [lo]))
        parts.append(src)
        if not (isinstance(hi, int) and isinstance(n, int) and hi >= n):
            parts.append(op.strided_slice(x, [d], [hi], [n]))
        return parts[0] if len(parts) == 1 else op.concat(parts, d)
    pos = op.add(op.multiply(op.arange(0, src.shape[d], 1, dtype="int64"), to_tensor(int(step), "int64")),
                 to_tensor(lo, "int64"))
    pos = t.reshape(pos, [1] * d + [src.shape[d]] + [1] * (x.ndim - d - 1))
    return op.scatter_elements(x, op.broadcast_to(pos, list(src.shape)), src, axis=d)


def select_scatter(t, x, src, dim, index):
    """``torch.select_scatter``: ``x`` with ``x.select(dim, index)`` replaced by ``src``."""
    d = norm_dim(dim, x.ndim)
    i = index + x.shape[d] if isinstance(index, int) and index < 0 else index
    return slice_scatter(t, x, op.unsqueeze(to_tensor(src, x.dtype), d), d, i, i + 1, 1)


def getitem(t, x, key):
    """``x[key]``: Python indexing of a tuple / list / size list, or tensor indexing with ints,
    slices, None, ``...`` and one int index tensor."""
    if not is_tensor(x):
        return x[key]    # (an Unavailable element is an error where a node uses it: GraphTranslator.value)
    key = key if isinstance(key, tuple) else (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (x.ndim - n_real) + key[at + 1:]
    if n_real > x.ndim:
        raise FrontendError(f"{n_real} indices for a tensor of {x.ndim} dims")
    ax = 0
    tensors = 0
    for k in key:
        if k is None:
            x = op.unsqueeze(x, ax)
            ax += 1
        elif isinstance(k, slice):
            x = slice_(t, x, ax, k.start, k.stop, k.step)
            ax += 1
        elif is_tensor(k):
            tensors += 1
            if tensors > 1:
                raise UnsupportedNodeError("indexing with more than one index tensor")
            x = take_along(t, x, ax, k)
            ax += k.ndim
        elif is_size(k):
            x = select(t, x, ax, k)
        else:
            raise UnsupportedNodeError(f"index {k!r} of type {type(k).__name__}")
    return x
