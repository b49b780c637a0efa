"""The extern registry: the Python functions that ``nn.op.extern(name, ...)`` (``R.call_dps_packed``)
calls, registered by name with :func:`register_extern` (the collectives of :mod:`runtime.distributed`
register theirs on import), and how a call's argument specs are evaluated (also a builtin's).

A call is ``["call_extern", ext_name, [arg specs], [out regs], [[dtype, dims], ...]]`` in the
bytecode (:mod:`runtime.bytecode`); its plan step (:mod:`runtime.vm_plan`) allocates the outputs and
calls :func:`_call_extern`, which raises ValueError naming the function when ``ext_name`` is not
registered. TVM's counterpart is the global function registry (``tvm.register_func``).
"""
from __future__ import annotations

from typing import Any

from .native import eval_dim

__all__ = ["register_extern"]

_EXTERNS: dict[str, Any] = {}


def register_extern(name: str, fn=None, override: bool = False):
    """Register the Python function that ``nn.op.extern(name, ...)`` (``R.call_dps_packed``) calls.

    ``fn(*args, *outputs)`` gets the arguments (numpy arrays, ints, floats, strings) then the
    output arrays, already allocated with the declared shapes and dtypes, and must write its
    results into them (destination-passing style); its return value is ignored. Usable as a
    decorator: ``@register_extern("my.op")``. Raises ValueError when ``name`` is already
    registered and ``override`` is false, TypeError when ``fn`` is not callable.
    """
    def add(f):
        if not callable(f):
            raise TypeError(f"register_extern('{name}'): expected a callable, got {type(f).__name__}")
        if name in _EXTERNS and not override:
            raise ValueError(f"extern function '{name}' is already registered; pass override=True "
                             "to replace it")
        _EXTERNS[name] = f
        return f

    return add if fn is None else add(fn)


def _extern_arg(spec: list, regs: list, env: dict) -> Any:
    kind, value = spec
    if kind == "reg":
        return regs[value]
    if kind == "dim":
        return eval_dim(value, env)
    if kind == "shape":
        return tuple(eval_dim(t, env) for t in value)
    return value


def _call_extern(func_name: str, ext_name: str, args: list, outs: list) -> None:
    fn = _EXTERNS.get(ext_name)
    if fn is None:
        raise ValueError(f"{func_name}: extern function '{ext_name}' is not registered; register it "
                         f"with runtime.register_extern('{ext_name}', fn)")
    fn(*args, *outs)

