"""``matmul`` (``numpy.matmul`` semantics, batch dims broadcast) and ``linear`` (``x @ W.T + b``), with
float32 accumulation for 16-bit floats.
"""
from __future__ import annotations


from ...ir import expr as E
from ...ir.expr import promote_dtype
from ...ir.op.common import fmt_shape, static_int
from .. import tensor as _te
from ..tensor import Tensor
from .common import (
    accumulator_dtype, broadcast_index, broadcast_shape, cast_value, output_dtype, two_stage_compute,
)

__all__ = ["linear", "matmul"]


def matmul(a: Tensor, b: Tensor, out_dtype: str | None = None) -> Tensor:
    """Matrix product with ``numpy.matmul`` semantics
    (https://numpy.org/doc/stable/reference/generated/numpy.matmul.html): a 1-D ``a`` is a row
    vector and a 1-D ``b`` a column vector (the added dim is removed from the result), and the
    batch dims (all but the last two) broadcast.

    ``out_dtype`` (default: the input dtype; ``"void"`` means default) is the result dtype. The
    sum runs in float32 for 16-bit floats (an accumulator stage ``matmul_acc`` then a cast stage
    ``matmul``), in the result dtype otherwise. Raises ValueError for 0-d operands or static
    reduction dims that differ; symbolic ones that the shapes cannot prove equal are compared
    when the code runs (an error, see :func:`builder.te.create_prim_func`).
    """
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must have ndim >= 1")
    in_dtype = promote_dtype(a.dtype, b.dtype)
    odt = output_dtype(in_dtype, out_dtype)
    acc = accumulator_dtype(in_dtype, odt)
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim >= 2 else b.shape[0]
    sa_, sb_ = static_int(ka), static_int(kb)
    if sa_ is not None and sb_ is not None and sa_ != sb_:
        raise ValueError(f"matmul: reduction dims differ: {fmt_shape(a.shape)} @ "
                         f"{fmt_shape(b.shape)}")
    a_batch = list(a.shape[:-2])
    b_batch = list(b.shape[:-2])
    batch = list(broadcast_shape(a_batch, b_batch, "matmul"))
    shape = batch + ([a.shape[-2]] if a.ndim >= 2 else []) + ([b.shape[-1]] if b.ndim >= 2 else [])
    nb = len(batch)

    def fbody(*idx):
        k = _te.reduce_axis((0, ka), name="k")
        bidx = idx[:nb]
        rest = list(idx[nb:])
        ai = broadcast_index(bidx, a_batch) + ((rest.pop(0),) if a.ndim >= 2 else ()) + (k.var,)
        if b.ndim >= 2:
            bi = broadcast_index(bidx, b_batch) + (k.var, rest.pop(0))
        else:
            bi = (k.var,)
        return _te.sum(cast_value(a[ai], acc) * cast_value(b[bi], acc), axis=k)

    # reduction dims the graph could not prove equal (two different symbols): the run-time
    # read check gives ka <= kb, this the other half, so a mismatch is an error as in numpy
    attrs = None if E.prove_equal(ka, kb) else {"mb.assert_le": [(kb, ka)]}
    return two_stage_compute(shape, fbody, acc, odt, "matmul", attrs=attrs)


def linear(x: Tensor, w: Tensor, bias: Tensor | None = None,
           out_dtype: str | None = None) -> Tensor:
    """``x @ w.T (+ bias)`` (``torch.nn.functional.linear``) with ``w`` in (out, in) layout, read
    directly as ``w[j, k]``: the fused form of ``matmul(x, permute_dims(w))``.

    ``x`` has any number of leading dims (``(..., in)``), ``w`` is ``(out, in)`` and ``bias``
    ``(out,)``. Precision as in :func:`matmul`; the bias is added in the accumulator dtype in the
    cast stage. Raises ValueError for a non-2-D weight or static ``in`` dims that differ.
    """
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out, in), got {fmt_shape(w.shape)}")
    if x.ndim == 0:
        raise ValueError("linear: input must have ndim >= 1")
    if bias is not None and bias.ndim != 1:
        raise ValueError(f"linear: bias must be 1-D (out,), got {fmt_shape(bias.shape)}")
    kx, kw = static_int(x.shape[-1]), static_int(w.shape[1])
    if kx is not None and kw is not None and kx != kw:
        raise ValueError(f"linear: input {fmt_shape(x.shape)} does not match weight "
                         f"{fmt_shape(w.shape)}")
    in_dtype = promote_dtype(x.dtype, w.dtype)
    odt = output_dtype(in_dtype, out_dtype)
    acc = accumulator_dtype(in_dtype, odt)
    shape = list(x.shape[:-1]) + [w.shape[0]]
    kdim = x.shape[-1]

    def fbody(*idx):
        k = _te.reduce_axis((0, kdim), name="k")
        return _te.sum(cast_value(x[tuple(idx[:-1]) + (k.var,)], acc) * cast_value(w[idx[-1], k.var], acc),
                       axis=k)

    def add_bias(v, idx):
        return v + cast_value(bias[idx[-1]], acc)

    return two_stage_compute(shape, fbody, acc, odt, "NT_matmul", None if bias is None else add_bias)
