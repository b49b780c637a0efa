"""Translations of torch's matrix products: ``linear`` / ``matmul`` in the form kernel selection maps to
the linear kernels (``matmul(x, permute_dims(W))`` for a weight), ``addmm``, ``einsum``, distances.
"""
from __future__ import annotations

from ...ir import expr as E
from ...nn import op
from ..errors import UnsupportedNodeError
from .operands import binary, norm_dim, to_tensor
from .reduction import vector_norm


def weight_norm(t, v, g, dim=0):
    """``torch._weight_norm`` (Salimans & Kingma 2016; ``nn.utils.weight_norm``): ``v * g / ||v||`` with the
    norm over every dim but ``dim`` (all of them for ``dim=-1``), ``g`` shaped to broadcast."""
    if dim is None or int(dim) == -1:
        axes = list(range(v.ndim))
    else:
        d = norm_dim(dim, v.ndim)
        axes = [a for a in range(v.ndim) if a != d]
    norm = op.sqrt(op.sum(op.multiply(v, v), axis=axes, keepdims=True))
    return op.multiply(v, op.divide(g, norm))


def einsum(t, equation, *operands):
    """``torch.einsum(equation, *operands)`` (or a list of operands): :func:`builder.nn.op.einsum`."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return op.einsum(equation, list(operands))


def outer(t, a, b):
    """``torch.outer(a, b)`` / ``ger``: ``a (n,)`` times ``b (m,)`` -> ``(n, m)``, torch's type promotion."""
    return binary("multiply", op.unsqueeze(a, 1), op.unsqueeze(b, 0))


def cosine_similarity(t, x1, x2, dim=1, eps=1e-8):
    """``F.cosine_similarity``: ``sum(x1 * x2) / max(||x1|| * ||x2||, eps)`` along ``dim``."""
    d = norm_dim(dim, max(x1.ndim, x2.ndim))
    dot = op.sum(binary("multiply", x1, x2), axis=[d])
    n1 = op.sum(op.multiply(x1, x1), axis=[norm_dim(dim, x1.ndim)])
    n2 = op.sum(op.multiply(x2, x2), axis=[norm_dim(dim, x2.ndim)])
    return binary("divide", dot, op.maximum(op.sqrt(binary("multiply", n1, n2)), to_tensor(float(eps), dot.dtype)))


def cdist(t, x1, x2, p=2.0, compute_mode=None):
    """``torch.cdist`` (p = 2: Euclidean; 1; inf; other p) of (..., P, M) and (..., R, M) -> (..., P, R),
    by broadcasting the differences (P x R x M values)."""
    diff = op.abs(binary("subtract", op.unsqueeze(x1, x1.ndim - 1), op.unsqueeze(x2, x2.ndim - 2)))
    return vector_norm(t, diff, p, -1, False)


def linear(t, x, w, b=None):
    """``F.linear(x, w, b=None)`` / ``nn.Linear``: ``x (..., K)`` times ``w (N, K)`` transposed, plus ``b (N,)`` ->
    ``(..., N)``, written as ``matmul(x, permute_dims(w, [1, 0]))``, the pattern kernel selection maps to the linear
    kernels."""
    y = op.matmul(x, t.permute(w, [1, 0]))
    return y if b is None else op.add(y, b)


def matmul(t, a, b):
    """``torch.matmul(a, b)`` / ``mm`` / ``bmm`` / ``a @ b`` with PyTorch's rules for 1-D operands: two vectors give
    their dot product (0-d), a vector on the left is a row and on the right a column, removed from the result; batch
    dims broadcast."""
    if a.ndim == 1 and b.ndim == 1:
        return op.sum(op.multiply(a, b))
    if a.ndim == 1:
        return op.squeeze(op.matmul(op.unsqueeze(a, 0), b), -2)
    if b.ndim == 1:
        return op.squeeze(op.matmul(a, op.unsqueeze(b, 1)), -1)
    return op.matmul(a, b)


def addmm(t, bias, a, b, beta=1, alpha=1):
    """``torch.addmm(bias, a, b, beta=1, alpha=1)``: ``beta * bias + alpha * (a @ b)`` (``bias`` dropped for
    ``beta=0``, as PyTorch ignores it then); broadcast to ``a @ b``'s shape."""
    y = op.matmul(a, b)
    if alpha != 1:
        y = op.multiply(y, alpha)
    if beta == 0:
        return y
    return op.add(y, bias if beta == 1 else op.multiply(bias, beta))


def baddbmm(t, bias, a, b, beta=1, alpha=1):
    """``torch.baddbmm(bias, a, b, beta=1, alpha=1)``: :func:`addmm` of batched ``a (B, n, k)`` and ``b (B, k, m)``."""
    return addmm(t, bias, a, b, beta, alpha)


def bilinear(t, x1, x2, weight, bias=None):
    """``F.bilinear`` / ``nn.Bilinear``: ``y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]``, as one
    matmul of ``x1`` with ``W`` laid out ``(i, o * j)``, a product with ``x2`` and a sum over ``j``."""
    if weight.ndim != 3 or x1.ndim < 1 or x2.ndim < 1:
        raise UnsupportedNodeError("bilinear needs a 3-D weight and inputs of at least 1 dim")
    o, i, j = weight.shape
    w = op.reshape(op.permute_dims(weight, [1, 0, 2]), [i, E.simplify(E.convert(o) * j)])
    y = op.reshape(op.matmul(x1, w), list(x1.shape[:-1]) + [o, j])
    y = op.sum(op.multiply(y, op.unsqueeze(x2, -2)), axis=-1)
    return y if bias is None else op.add(y, bias)


def pairwise_distance(t, x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``F.pairwise_distance``: the ``p``-norm of ``x1 - x2 + eps`` over the last dim."""
    d = binary("add", binary("subtract", x1, x2), float(eps))
    return vector_norm(t, d, p, [-1], keepdim)
