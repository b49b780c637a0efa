"""Well-formedness checks of graph-level IRModules (run after export and after every pass).

Checks, per function: parameters are distinct; every variable is defined before it is used and
bound once; DataflowVars are used only inside the dataflow block that binds them; a binding's
variable has the struct info of its value; ``call_tir`` names a PrimFunc of the module; the
return value matches the declared return struct info. A failure raises :class:`IRVerifyError`
whose message shows the printed function around the offending binding.
"""
from __future__ import annotations

from . import relax as rx
from .printer import print_function, print_struct_info

__all__ = ["IRVerifyError", "verify"]


class IRVerifyError(ValueError):
    """An ill-formed IRModule; the message names the function and shows the IR around the error."""


def verify(mod: rx.IRModule) -> rx.IRModule:
    """Check every graph-level function of ``mod``; returns ``mod``. Raises IRVerifyError."""
    for name, func in mod.functions.items():
        if isinstance(func, rx.Function):
            _verify_function(mod, name, func)
    return mod


def _fail(name: str, func: rx.Function, binding_var: rx.Var | None, message: str) -> None:
    text = print_function(func, name).split("\n")
    context = text
    if binding_var is not None:
        marker = f"{binding_var.name_hint}: "
        for i, line in enumerate(text):
            if line.strip().startswith(marker):
                lo, hi = max(0, i - 3), min(len(text), i + 3)
                context = [("--> " if j == i else "    ") + text[j] for j in range(lo, hi)]
                break
    raise IRVerifyError(f"function '{name}': {message}\n" + "\n".join(context))


def _verify_function(mod: rx.IRModule, name: str, func: rx.Function) -> None:
    defined: set = set()
    for p in func.params:
        if p in defined:
            _fail(name, func, None, f"parameter '{p.name_hint}' appears twice")
        defined.add(p)
    for block in func.body.blocks:
        local: set = set()
        for b in block.bindings:
            for v in rx.used_vars(b.value):
                if v not in defined and v not in local:
                    _fail(name, func, b.var, f"'{v.name_hint}' is used before it is defined")
            if b.var in defined or b.var in local:
                _fail(name, func, b.var, f"'{b.var.name_hint}' is bound twice")
            if isinstance(b.var, rx.DataflowVar) and not block.is_dataflow:
                _fail(name, func, b.var, f"DataflowVar '{b.var.name_hint}' bound outside a dataflow block")
            vs, es = b.var.struct_info, b.value.struct_info
            if vs is not None and es is not None and not vs.same_as(es):
                _fail(name, func, b.var, f"'{b.var.name_hint}' is annotated {print_struct_info(vs)} but its "
                                         f"value has {print_struct_info(es)}")
            if isinstance(b.value, rx.Call) and isinstance(b.value.op, rx.Op) and b.value.op.name == "relax.call_tir":
                target = b.value.args[0].name_hint
                if target not in mod.functions or isinstance(mod.functions[target], rx.Function):
                    _fail(name, func, b.var, f"call_tir target '{target}' is not a PrimFunc of the module")
            (local if isinstance(b.var, rx.DataflowVar) else defined).add(b.var)
    for v in rx.used_vars(func.body.body):
        if v not in defined:
            _fail(name, func, None, f"the return value uses '{v.name_hint}', which is not visible there "
                                    "(a DataflowVar must be emitted with emit_output)")
    ret, body = func.ret_struct_info, func.body.body.struct_info
    if ret is not None and body is not None and not ret.same_as(body):
        _fail(name, func, None, f"returns {print_struct_info(body)} but declares {print_struct_info(ret)}")
