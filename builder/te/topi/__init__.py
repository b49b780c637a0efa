"""Tensor-expression definitions of the graph-level operators (our TOPI), one module per
family as TVM's topi is: :mod:`.elementwise`, :mod:`.broadcast`, :mod:`.transform`,
:mod:`.linear_algebra`, :mod:`.reduction`, :mod:`.norm`, :mod:`.conv`, :mod:`.pool`, :mod:`.resize`,
:mod:`.attention`, :mod:`.quantize`, :mod:`.scatter`, :mod:`.sort`, :mod:`.recurrent`, and :mod:`.fusion` (the fused-kernel builders); shared helpers
in :mod:`.common`. ``from builder.te import topi; topi.silu(x)`` reaches every family's functions.

Each function takes :class:`~builder.te.tensor.Tensor`\\ s plus Python attributes and returns the
output :class:`~builder.te.tensor.Tensor`; intermediate stages (reduction accumulators, softmax's
max / exp / sum, ...) are ordinary computes that :func:`builder.te.create_prim_func` turns into
``alloc_buffer``\\ s. The legalizer lowers every graph-level call with one of these.

Conventions

* Shapes may hold symbolic int64 dims (:class:`builder.ir.expr.Var` or expressions of them); every
  function works from the shapes of its inputs and never assumes static sizes.
* Broadcasting follows numpy (https://numpy.org/doc/stable/user/basics.broadcasting.html): shapes
  align from the right, a dim of static size 1 broadcasts, and two symbolic dims that cannot be
  proven equal are assumed equal (the left one is kept, as the graph-level shape inference does).
* Precision: ``float16`` / ``bfloat16`` values are converted to ``float32`` when loaded; math,
  reductions and accumulations run in ``float32`` and the result is converted back to the output
  dtype at the end (a separate cast stage after a reduction). ``float64`` stays ``float64``.
* Compute names follow TVM's TOPI (``T_add``, ``T_transpose``, ``T_softmax_norm``, ``matmul``,
  ``conv1d_ncw``, ...); accumulators feeding a cast stage are named ``<name>_acc``.
"""
from . import (attention, broadcast, common, conv, elementwise, fusion, linear_algebra, norm, pool, quantize,
               recurrent, reduction, resize, scatter, sort, transform)

# captured before the star imports below rebind a family's name to a function of the same name
_FAMILIES = (attention, broadcast, common, conv, elementwise, fusion, linear_algebra, norm, pool, quantize,
             recurrent, reduction, resize, scatter, sort, transform)

from .attention import *  # noqa: F401,F403
from .broadcast import *  # noqa: F401,F403
from .common import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .fusion import *  # noqa: F401,F403
from .linear_algebra import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .quantize import *  # noqa: F401,F403
from .recurrent import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .resize import *  # noqa: F401,F403
from .scatter import *  # noqa: F401,F403
from .sort import *  # noqa: F401,F403
from .transform import *  # noqa: F401,F403

__all__ = [name for module in _FAMILIES for name in module.__all__]
