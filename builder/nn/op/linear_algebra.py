"""Linear algebra: ``matmul`` (``numpy.matmul`` semantics)."""
from __future__ import annotations



from ..core import Tensor, wrap_nested
from .common import op_call


def matmul(a: Tensor, b: Tensor, out_dtype: str | None = None, name: str = "matmul") -> Tensor:
    """``numpy.matmul(a, b)``: ``(..., m, k) @ (..., k, n) -> (..., m, n)``, batch dims broadcast.

    ``out_dtype`` (default: the inputs' dtype) is the result dtype; float16 inputs accumulate
    in float32. Raises ValueError when the reduction dims differ.
    """
    return wrap_nested(op_call("matmul", [a._expr, b._expr], out_dtype=out_dtype or "void"), name)
