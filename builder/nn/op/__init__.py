"""Functional operators on ``nn.Tensor`` (``tvm.relax.frontend.nn.op``): each call emits one
graph-level binding named by ``name`` (TVM's default hints: ``add``, ``mul``, ``matmul``, ...).

There is one function per op record of the op library (:mod:`builder.ops`) that has a ``frontend``
name, and no other list of ops: the elementwise and broadcast ones are made from their records
(:mod:`.elementwise`; a hand-written function may replace one only when marked
:func:`.common.replaces_record`, else the import fails naming both, as it does for two families writing
one name), the others are written by family (:mod:`.manipulation`, :mod:`.creation`,
:mod:`.reduction`, :mod:`.linear_algebra`, :mod:`.nn`, :mod:`.extern`, :mod:`.quantize`,
:mod:`.attention`); a few helpers combine several ops (``chunk``, ``unsqueeze``,
``get_timestep_embedding``, ``rotary_embedding``, ``normalize``, ``mean_pooling``) or call a runtime
builtin (``kv_cache_append``).

:func:`recipe_functions` lists what a recipe's ``forward:`` may call: the functions of the op records
marked ``in_recipes`` and the composite functions marked with :func:`.common.recipe_function`.

Shapes and dtypes are checked when the op is emitted; a mismatch raises ValueError / TypeError
naming both sides. Python scalars combine with tensors as constants of the tensor's dtype (a value the
dtype cannot hold is a ValueError, as in numpy 2 and PyTorch). Every public op checks its arguments
before it builds anything: a parameter annotated ``Tensor`` must be a Tensor (``Tensor | None``: or
``None``; ``Sequence[Tensor]``: a sequence of Tensors) and ``name`` a string, else TypeError naming the
op and the parameter (:func:`.checks.checked`). A result may have at most
:data:`core.limits.MAX_NDIM` dims.
"""
from __future__ import annotations

import inspect
from typing import Callable

from ... import ops as _ops  # noqa: F401 - the op library: every record registered before the functions are made
from ...ir.op import registered_ops
from . import attention, creation, elementwise, extern, linear_algebra, manipulation, nn, quantize, reduction, sorting
from .checks import checked

_FAMILIES = (elementwise, linear_algebra, manipulation, creation, reduction, nn, extern, quantize, attention,
             sorting)


def _public(module) -> dict:
    return {name: fn for name, fn in vars(module).items()
            if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_")
            and name not in ("unary_function", "binary_function", "record_functions")}


def _hand_written(families) -> dict:
    """``name -> function`` of the public functions the family modules define. ImportError when two
    families define one name (one would silently shadow the other), naming both modules."""
    out: dict = {}
    for module in families:
        for name, fn in _public(module).items():
            if name in out:
                raise ImportError(f"nn.op: {module.__name__}.{name} and {out[name].__module__}.{name} are both "
                                  "hand-written; keep one")
            out[name] = fn
    return out


_functions = _hand_written(_FAMILIES)
_functions.update(elementwise.record_functions(_functions))
_missing = sorted(op.frontend for op in registered_ops() if op.frontend and op.frontend not in _functions)
if _missing:   # a record names a frontend function nobody wrote (a bug in builder/ops, found at import)
    raise ImportError(f"nn.op has no function for the op records' frontend names {_missing}")
globals().update({name: checked(fn) for name, fn in _functions.items()})
__all__ = sorted(_functions)
del _missing


def recipe_functions() -> dict[str, Callable]:
    """Every function a recipe's ``forward:`` may call, by name, sorted: the ``nn.op`` functions of
    the op records marked ``in_recipes`` and the composite functions marked with
    :func:`.common.recipe_function` (``chunk``, ``normalize``, ``mean_pooling``, ...). Each is the
    checked public function (``inspect.signature`` gives its parameters; the first line of its
    docstring says what it does)."""
    names = {op.frontend for op in registered_ops() if op.in_recipes}
    names |= {name for name, fn in _functions.items() if getattr(fn, "__recipe__", False)}
    return {name: globals()[name] for name in sorted(names)}


def recipe_summary(fn: Callable) -> str:
    """The first sentence of ``fn``'s docstring on one line (the first paragraph's lines joined,
    cut after the first ``". "``): what ``build --list-ops`` can print next to the signature."""
    para = inspect.cleandoc(fn.__doc__ or "").split("\n\n")[0]
    text = " ".join(line.strip() for line in para.splitlines()).rstrip(":")
    cut = text.find(". ")
    return text if cut < 0 else text[:cut + 1]


__all__ += ["recipe_functions", "recipe_summary"]
