"""Converters of the matrix products: MatMul and Gemm (a constant 2-D weight becomes ``nn.Linear``'s
``matmul(x, permute_dims(W.T))``, the pattern kernel selection maps to the linear kernels), Einsum.
"""
from __future__ import annotations

import numpy as np

from ...nn import op
from ...nn.core import Tensor
from .errors import ONNXImportError
from .importer import _Importer
from .registry import _check_inputs, _register
from .shape_folding import MAX_FOLD_ELEMENTS, _fold_ok


@_register("Einsum")
def _einsum(im, node, ins, at):
    """ONNX ``Einsum`` (opset 12): attribute ``equation`` (explicit or implicit output, ``...`` broadcast dims),
    :func:`builder.nn.op.einsum`. Raises ONNXImportError for an equation it refuses."""
    _check_inputs(ins, node)
    eq = at.get("equation", "")
    eq = eq.decode() if isinstance(eq, bytes) else eq
    try:
        return op.einsum(eq, [im.tensor(v) for v in ins])
    except ValueError as e:
        raise ONNXImportError(str(e)) from e


def _linear(im: _Importer, x: Tensor, w_nk: np.ndarray) -> Tensor:
    """``x @ w_nk.T`` as nn.Linear writes it: ``matmul(x, permute_dims(W))`` with ``W (N, K)`` constant."""
    w = im.const(np.ascontiguousarray(w_nk))
    return op.matmul(x, op.permute_dims(w))


@_register("MatMul")
def _matmul(im, node, ins, at):
    """ONNX ``MatMul`` (opset 13): numpy's ``matmul`` rules; a constant 2-D float weight takes the linear form
    (:func:`_matmul_operands`)."""
    _check_inputs(ins, node)
    return _matmul_operands(im, *ins)


def _matmul_operands(im, a, b):
    """``a @ b`` (numpy's matmul) of two importer values: a constant 2-d float ``b`` is a linear layer's
    weight (the linear kernels), two small constants fold."""
    if isinstance(b, np.ndarray) and b.ndim == 2 and b.dtype.kind == "f" and not isinstance(a, np.ndarray) \
            and len(im.shape_of(a)) >= 2:
        ta = im.tensor(a)
        if ta.dtype == str(b.dtype):
            return _linear(im, ta, b.T)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.ndim >= 1 and b.ndim >= 1 and \
            _fold_ok(a.shape, b.shape) and a.size * b.size <= MAX_FOLD_ELEMENTS:
        return np.matmul(a, b).astype(a.dtype)
    return op.matmul(im.tensor(a), im.tensor(b))


@_register("Gemm")
def _gemm(im, node, ins, at):
    """ONNX ``Gemm`` (opset 13): ``alpha * A' B' + beta * C`` with attributes ``transA``, ``transB``, ``alpha``,
    ``beta``; a constant 2-D float ``B`` of A's dtype becomes the linear form (``alpha`` folded into it), ``C``
    broadcast (unidirectionally) to the product."""
    _check_inputs(ins, node)
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    ta = im.tensor(a)
    if int(at.get("transA", 0)):
        ta = op.permute_dims(ta, [1, 0])
    if isinstance(b, np.ndarray) and b.ndim == 2 and b.dtype.kind == "f" and str(b.dtype) == ta.dtype:
        w = b if int(at.get("transB", 0)) else b.T
        if alpha != 1.0:
            w = (w * np.asarray(alpha, dtype=b.dtype)).astype(b.dtype)
        out = _linear(im, ta, w)
    else:
        tb = im.tensor(b)
        if int(at.get("transB", 0)):
            tb = op.permute_dims(tb, [1, 0])
        out = op.matmul(ta, tb)
        if alpha != 1.0:
            out = op.multiply(out, im.const(np.asarray(alpha, dtype=out.dtype)))
    if c is not None and beta != 0.0:
        if isinstance(c, np.ndarray):
            if beta != 1.0:
                c = (c * np.asarray(beta, dtype=c.dtype)).astype(c.dtype)
            out = op.add(out, im.const(c))
        else:
            tc = im.tensor(c)
            if beta != 1.0:
                tc = op.multiply(tc, im.const(np.asarray(beta, dtype=tc.dtype)))
            out = op.add(out, tc)
    return out
