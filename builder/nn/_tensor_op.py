"""Python operators on ``nn.Tensor`` (``+ - * /``, comparisons, ``astype``, ``reshape``, ...),
each one functional op of ``builder.nn.op`` with TVM's default name hint."""
from __future__ import annotations


def _op():
    from . import op

    return op


def _binary(name: str, reflected: bool = False):
    """A method ``(self, other) -> op.<name>(self, other)``, or ``op.<name>(other, self)`` when
    ``reflected`` (``__rsub__``: ``other - self``)."""
    if reflected:
        def method(self, other):
            return getattr(_op(), name)(other, self)
    else:
        def method(self, other):
            return getattr(_op(), name)(self, other)
    method.__doc__ = f"``op.{name}({'other, self' if reflected else 'self, other'})``."
    return method


def _varargs(args: tuple) -> list:
    """``f(a, b)`` and ``f((a, b))`` alike: the values as a list."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = args[0]
    return list(args)


class _TensorOp:
    """Mixin giving Tensor its operators (as ``tvm.relax.frontend.nn._tensor_op``)."""

    __add__ = _binary("add")
    __radd__ = _binary("add")
    __sub__ = _binary("subtract")
    __rsub__ = _binary("subtract", reflected=True)
    __mul__ = _binary("multiply")
    __rmul__ = _binary("multiply")
    __truediv__ = _binary("divide")
    __rtruediv__ = _binary("divide", reflected=True)
    __matmul__ = _binary("matmul")
    __lt__ = _binary("less")
    __le__ = _binary("less_equal")
    __gt__ = _binary("greater")
    __ge__ = _binary("greater_equal")
    maximum = _binary("maximum")
    minimum = _binary("minimum")

    def __getitem__(self, key):
        """``x[key]``, numpy basic indexing: ints (the dim is removed; negative counts from the
        end), symbolic int expressions (``x[:, seq - 1]``), slices ``start:stop:step`` with
        positive steps and int / symbolic bounds, ``...`` and missing trailing dims. Emitted as
        ``op.strided_slice`` (name ``strided_slice``) plus ``op.squeeze`` for int indices (see
        :func:`builder.nn.op.strided_slice` for bounds on symbolic dims). Raises TypeError for
        other index kinds (None, tensors) and ValueError for too many indices, a static int index
        out of range, or a non-positive step."""
        return _op().manipulation._tensor_getitem(self, key)

    def __iter__(self):
        """Refused (TypeError): a Tensor has no length to iterate over (index it, or ``split``)."""
        raise TypeError("an nn.Tensor is not iterable; index it (x[i]) or use op.split / op.chunk")

    def __neg__(self):
        return _op().negative(self)

    def astype(self, dtype: str):
        """``op.astype(self, dtype)``."""
        return _op().astype(self, dtype)

    def reshape(self, *shape):
        """``op.reshape(self, shape)``; accepts ``reshape(a, b)`` or ``reshape((a, b))``."""
        return _op().reshape(self, _varargs(shape))

    def permute_dims(self, *axes):
        """``op.permute_dims(self, axes)``."""
        return _op().permute_dims(self, _varargs(axes) or None)
