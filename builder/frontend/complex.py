"""Complex tensors in imported PyTorch programs, carried as real ones (``torch.export`` graphs).

Our IR has no complex dtype. PyTorch models use complex numbers mostly for rotary position embeddings
written as in Meta's reference LLaMA / Mistral code: ``view_as_complex`` of (..., D / 2, 2) pairs, a
product with ``freqs_cis = polar(1, angles)`` (a complex64 buffer, or computed in ``forward``),
``view_as_real`` back. :class:`ComplexTensor` holds such a value as its float (..., 2) real view
(``torch.view_as_real``'s layout: real parts at ``[..., 0]``, imaginary parts at ``[..., 1]``), and
:data:`COMPLEX_OPS` translates the ATen ops on complex values by packet name onto real arithmetic:

* ``view_as_complex`` / ``view_as_real`` / ``complex`` / ``polar`` / ``real`` / ``imag`` / ``abs`` / ``angle``;
* ``mul`` / ``div`` / ``add`` / ``sub`` / ``neg`` of complex values with complex, real tensors or numbers
  (``(a + bi)(c + di) = (ac - bd) + (ad + bc)i``; ``/`` by ``c^2 + d^2``), ``conj`` (``_conj``,
  ``conj_physical``; ``resolve_conj`` is the identity);
* shape ops on the complex dims (``view`` / ``reshape``, ``unsqueeze`` / ``squeeze``, ``slice`` / ``select``,
  ``expand``, ``permute`` / ``transpose``, ``flatten``, ``cat`` / ``stack``, ``clone`` and the copies): the
  same op on the pairs with the trailing 2 kept last.

A complex weight (``ep.constants`` / ``state_dict``) is bound as its real view. Any other op of a complex
value, and a complex program input or output, raises UnsupportedNodeError.
"""
from __future__ import annotations

from collections.abc import Callable

from ..nn import op
from ..nn.core import Tensor
from .errors import UnsupportedNodeError
from .torch_ops.elementwise import atan2
from .torch_ops.manipulation import select, slice_
from .torch_ops.operands import norm_dim, sizes, static

__all__ = ["ComplexTensor", "COMPLEX_OPS", "is_complex_dtype"]


def is_complex_dtype(dtype) -> bool:
    """Whether a torch dtype is complex (``torch.complex64`` / ``complex128`` / ``complex32``)."""
    return bool(getattr(dtype, "is_complex", False))


class ComplexTensor:
    """A complex tensor of shape ``pairs.shape[:-1]`` held as ``pairs`` (a float tensor whose last dim is 2:
    real, imaginary)."""

    def __init__(self, pairs: Tensor) -> None:
        if pairs.ndim < 1 or static(pairs.shape[-1]) != 2:
            raise UnsupportedNodeError(f"a complex value needs (..., 2) real pairs, got shape {list(pairs.shape)}")
        self.pairs = pairs

    @property
    def ndim(self) -> int:
        """The complex tensor's number of dims (the pairs' less the trailing 2)."""
        return self.pairs.ndim - 1

    @property
    def shape(self) -> list:
        """The complex tensor's shape: the pairs' without the trailing 2."""
        return list(self.pairs.shape[:-1])

    @property
    def real(self) -> Tensor:
        """The real parts, a float tensor of :attr:`shape`."""
        return _part(self.pairs, 0)

    @property
    def imag(self) -> Tensor:
        """The imaginary parts, a float tensor of :attr:`shape`."""
        return _part(self.pairs, 1)


def _part(pairs: Tensor, i: int) -> Tensor:
    return op.squeeze(op.strided_slice(pairs, [pairs.ndim - 1], [i], [i + 1]), [pairs.ndim - 1])


def _join(re, im) -> ComplexTensor:
    return ComplexTensor(op.concat([op.unsqueeze(re, -1), op.unsqueeze(im, -1)], dim=-1))


def _parts(v):
    """``(re, im)`` of a complex value, a real tensor (imaginary part None) or a number."""
    if isinstance(v, ComplexTensor):
        return v.real, v.imag
    return v, None


def _add(a, b, sign: float = 1.0):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    bs = (lambda v: v) if sign > 0 else (lambda v: _neg_real(v))
    re = _radd(ar, bs(br))
    im = ai if bi is None else (bs(bi) if ai is None else op.add(ai, bs(bi)))
    return _join(re, im if im is not None else op.multiply(re, 0.0))


def _neg_real(v):
    return -v if isinstance(v, (int, float)) else op.negative(v)


def _radd(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a + b
    if isinstance(a, (int, float)):
        a, b = b, a
    return op.add(a, b)


def _mul(a, b):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    if ai is None:
        ar, ai, br, bi = br, bi, ar, ai
    if bi is None:      # complex times a real tensor or number
        return _join(_rmul(ar, br), _rmul(ai, br))
    return _join(op.subtract(op.multiply(ar, br), op.multiply(ai, bi)),
                 op.add(op.multiply(ar, bi), op.multiply(ai, br)))


def _scaled(v, alpha):
    """``alpha * v`` for ``add`` / ``sub``'s ``alpha`` (a complex value, a real tensor or a number)."""
    if alpha == 1:
        return v
    if isinstance(v, ComplexTensor):
        return _mul(v, alpha)
    return v * alpha if isinstance(v, (int, float)) else op.multiply(v, alpha)


def _rmul(a, b):
    return op.multiply(b, a) if isinstance(a, (int, float)) else op.multiply(a, b)


def _div(a, b):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    if bi is None:
        if ai is None:
            raise UnsupportedNodeError("div of two real values in the complex translation")
        return _join(op.divide(ar, br), op.divide(ai, br))
    den = op.add(op.multiply(br, br), op.multiply(bi, bi))
    if ai is None:      # a real numerator: a / (c + di) = a (c - di) / (c^2 + d^2)
        return _join(op.divide(_rmul(ar, br), den), op.divide(op.negative(_rmul(ar, bi)), den))
    return _join(op.divide(op.add(op.multiply(ar, br), op.multiply(ai, bi)), den),
                 op.divide(op.subtract(op.multiply(ai, br), op.multiply(ar, bi)), den))


def _cdim(c: ComplexTensor, d: int) -> int:
    return norm_dim(d, c.ndim)


def _view(t, c, *shape):
    shape = sizes(shape)
    return ComplexTensor(op.reshape(c.pairs, list(shape) + [2]))


def _unsqueeze(t, c, dim):
    return ComplexTensor(op.unsqueeze(c.pairs, norm_dim(dim, c.ndim + 1)))


def _squeeze(t, c, dim=None):
    if dim is None:
        dims = [i for i, d in enumerate(c.shape) if static(d) == 1]
    else:
        dims = [_cdim(c, d) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        dims = [d for d in dims if static(c.shape[d]) == 1]
    return ComplexTensor(op.squeeze(c.pairs, dims)) if dims else c


def _slice(t, c, dim=0, start=None, end=None, step=1):
    return ComplexTensor(slice_(t, c.pairs, _cdim(c, dim), start, end, step))


def _select(t, c, dim, index):
    return ComplexTensor(select(t, c.pairs, _cdim(c, dim), index))


def _expand(t, c, *shape):
    shape = [c.shape[i - (len(sizes(shape)) - c.ndim)] if static(s) == -1 else s
             for i, s in enumerate(sizes(shape))]
    return ComplexTensor(op.broadcast_to(c.pairs, list(shape) + [2]))


def _permute(t, c, *dims):
    dims = [_cdim(c, d) for d in sizes(dims)]
    return ComplexTensor(op.permute_dims(c.pairs, dims + [c.ndim]))


def _transpose(t, c, d0, d1):
    dims = list(range(c.ndim))
    a, b = _cdim(c, d0), _cdim(c, d1)
    dims[a], dims[b] = dims[b], dims[a]
    return ComplexTensor(op.permute_dims(c.pairs, dims + [c.ndim]))


def _flatten(t, c, start_dim=0, end_dim=-1):
    s, e = _cdim(c, start_dim), _cdim(c, end_dim)
    shape = c.shape
    merged = shape[s]
    for d in shape[s + 1:e + 1]:
        merged = merged * d
    return ComplexTensor(op.reshape(c.pairs, shape[:s] + [merged] + shape[e + 1:] + [2]))


def _cat(t, tensors, dim=0):
    if not all(isinstance(v, ComplexTensor) for v in tensors):
        raise UnsupportedNodeError("cat of complex and real tensors")
    return ComplexTensor(op.concat([v.pairs for v in tensors], dim=_cdim(tensors[0], dim)))


def _stack(t, tensors, dim=0):
    if not all(isinstance(v, ComplexTensor) for v in tensors):
        raise UnsupportedNodeError("stack of complex and real tensors")
    d = norm_dim(dim, tensors[0].ndim + 1)
    return ComplexTensor(op.concat([op.unsqueeze(v.pairs, d) for v in tensors], dim=d))


def _view_as_complex(t, x):
    if isinstance(x, ComplexTensor):
        raise UnsupportedNodeError("view_as_complex of a complex tensor")
    if x.dtype not in ("float32", "float64", "float16"):
        raise UnsupportedNodeError(f"view_as_complex of {x.dtype} (float32 / float64 / float16)")
    return ComplexTensor(x)


def _copy(t, c, *args, **kwargs):
    dtype = kwargs.get("dtype", args[0] if args and not isinstance(args[0], bool) else None)
    if dtype is not None and not is_complex_dtype(dtype):
        raise UnsupportedNodeError(f"a complex tensor converted to {dtype} (PyTorch drops the imaginary part)")
    return c


def _conj(t, c):
    return _join(c.real, op.negative(c.imag))


COMPLEX_OPS: dict[str, Callable] = {
    "view_as_complex": _view_as_complex,
    "view_as_real": lambda t, c: c.pairs,
    "complex": lambda t, re, im: _join(re, im),
    "polar": lambda t, r, theta: _join(op.multiply(r, op.cos(theta)), op.multiply(r, op.sin(theta))),
    "real": lambda t, c: c.real,
    "imag": lambda t, c: c.imag,
    "abs": lambda t, c: op.sqrt(op.add(op.multiply(c.real, c.real), op.multiply(c.imag, c.imag))),
    "angle": lambda t, c: atan2(t, c.imag, c.real),
    "mul": lambda t, a, b: _mul(a, b),
    "div": lambda t, a, b: _div(a, b),
    "add": lambda t, a, b, alpha=1: _add(a, _scaled(b, alpha)),
    "sub": lambda t, a, b, alpha=1: _add(a, _scaled(b, alpha), -1.0),
    "neg": lambda t, c: ComplexTensor(op.negative(c.pairs)),
    "_conj": _conj, "conj": _conj, "conj_physical": _conj, "resolve_conj": lambda t, c: c,
    "view": _view, "reshape": _view, "_unsafe_view": _view,
    "unsqueeze": _unsqueeze, "squeeze": _squeeze, "slice": _slice, "select": _select, "expand": _expand,
    "permute": _permute, "transpose": _transpose, "flatten": _flatten, "cat": _cat, "stack": _stack,
    "clone": _copy, "contiguous": _copy, "alias": _copy, "detach": _copy, "lift_fresh_copy": _copy,
    "_to_copy": _copy, "to": _copy,
}
