"""Graph-level operators: the registry of op records and the struct-info inference rules.

- :mod:`.registry`: :func:`register_op`, :func:`registered_ops`, :class:`OpPattern` (the records
  themselves are written in ``builder/ops/``, one per op);
- inference rules by family: :mod:`.elementwise`, :mod:`.manipulation`, :mod:`.reduction`, :mod:`.nn`,
  :mod:`.quantize`, :mod:`.runtime`; their shared helpers in :mod:`.common`.

Inference runs eagerly when a ``Call`` is built and raises ``ValueError`` (shape) or ``TypeError``
(dtype) naming the op and both sides. Shape semantics follow TVM Relax / numpy: binary elementwise ops
broadcast numpy-style and require equal dtypes; ``matmul`` follows ``numpy.matmul``.
"""
from .elementwise import broadcast_shapes
from .manipulation import arange_length, resolve_reshape, slice_range, split_sizes
from .nn import conv_out_dim, conv_transpose_out_dim, exact_scaled_size, pool_out_dim
from .registry import OpPattern, register_op, registered_ops

__all__ = ["OpPattern", "register_op", "registered_ops", "broadcast_shapes", "arange_length", "resolve_reshape",
           "slice_range", "split_sizes", "conv_out_dim", "conv_transpose_out_dim", "exact_scaled_size", "pool_out_dim"]
