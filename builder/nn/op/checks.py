"""The argument checks every public functional op runs before it builds anything."""
from __future__ import annotations

import builtins
import functools
import inspect
from typing import Callable


from ..core import Tensor
from .common import describe


def _tensor_params(fn: Callable) -> tuple[inspect.Signature, list[tuple[str, str]]]:
    sig = inspect.signature(fn)
    kinds = {"Tensor": "tensor", "Tensor | None": "optional", "Sequence[Tensor]": "sequence",
             "str": "str", "str | None": "optional str"}
    return sig, [(p.name, kinds[p.annotation]) for p in sig.parameters.values()
                 if p.annotation in ("Tensor", "Tensor | None", "Sequence[Tensor]")
                 or (p.name == "name" and p.annotation in ("str", "str | None"))]


def checked(fn: Callable) -> Callable:
    """``fn`` checking, before it runs, that each parameter annotated ``Tensor`` is a Tensor
    (``Tensor | None``: or None; ``Sequence[Tensor]``: a list or tuple of Tensors) and that ``name``
    is a string (``str | None``: or None). Raises TypeError naming the op and the parameter (a
    recipe's ``silu(3)`` or ``matmul(x, 2)`` reached ``x._expr`` and failed with AttributeError;
    ``subtract(x, x, x)`` bound a Tensor as the name)."""
    sig, params = _tensor_params(fn)
    if not params:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)    # TypeError for arguments fn does not take, as fn itself
        for pname, kind in params:
            if pname not in bound.arguments:
                continue
            value = bound.arguments[pname]
            if kind == "tensor":
                ok = isinstance(value, Tensor)
            elif kind == "optional":
                ok = value is None or isinstance(value, Tensor)
            elif kind == "sequence":
                ok = isinstance(value, (list, tuple)) and builtins.all(isinstance(v, Tensor) for v in value)
            elif kind == "str":
                ok = isinstance(value, str)
            else:
                ok = value is None or isinstance(value, str)
            if not ok:
                what = {"tensor": "a Tensor", "optional": "a Tensor or None", "sequence": "a list of Tensors",
                        "str": "a string (the result's name hint)",
                        "optional str": "a string (the result's name hint) or None"}[kind]
                raise TypeError(f"{fn.__name__}: {pname} must be {what}, got {describe(value)}")
        return fn(*args, **kwargs)

    return wrapper
