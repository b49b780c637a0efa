"""Python operators on ``nn.Tensor`` (``+ - * /``, comparisons, ``astype``, ``reshape``, ...),
each one functional op of ``builder.nn.op`` with TVM's default name hint."""
from __future__ import annotations


def _op():
    from . import op

    return op


class _TensorOp:
    """Mixin giving Tensor its operators (as ``tvm.relax.frontend.nn._tensor_op``)."""

    def __add__(self, other):
        return _op().add(self, other)

    def __radd__(self, other):
        return _op().add(self, other)

    def __sub__(self, other):
        return _op().subtract(self, other)

    def __rsub__(self, other):
        return _op().subtract(other, self)

    def __mul__(self, other):
        return _op().multiply(self, other)

    def __rmul__(self, other):
        return _op().multiply(self, other)

    def __truediv__(self, other):
        return _op().divide(self, other)

    def __rtruediv__(self, other):
        return _op().divide(other, self)

    def __matmul__(self, other):
        return _op().matmul(self, other)

    def __neg__(self):
        return _op().negative(self)

    def __lt__(self, other):
        return _op().less(self, other)

    def __le__(self, other):
        return _op().less_equal(self, other)

    def __gt__(self, other):
        return _op().greater(self, other)

    def __ge__(self, other):
        return _op().greater_equal(self, other)

    def astype(self, dtype: str):
        """``op.astype(self, dtype)``."""
        return _op().astype(self, dtype)

    def maximum(self, other):
        """``op.maximum(self, other)``."""
        return _op().maximum(self, other)

    def minimum(self, other):
        """``op.minimum(self, other)``."""
        return _op().minimum(self, other)

    def reshape(self, *shape):
        """``op.reshape(self, shape)``; accepts ``reshape(a, b)`` or ``reshape((a, b))``."""
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = shape[0]
        return _op().reshape(self, list(shape))

    def permute_dims(self, *axes):
        """``op.permute_dims(self, axes)``."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = axes[0]
        return _op().permute_dims(self, list(axes) if axes else None)
