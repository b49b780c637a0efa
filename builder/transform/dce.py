"""DeadCodeElimination: remove pure bindings whose variable is never used, and loop-level functions
no call refers to (TVM's ``relax.transform.DeadCodeElimination``)."""
from __future__ import annotations

from ..ir import relax as rx
from .pass_infra import Pass

__all__ = ["DeadCodeElimination", "dead_code_elimination"]


def _is_pure(value: rx.Expr) -> bool:
    if isinstance(value, rx.Call) and isinstance(value.op, rx.Op):
        return value.op.purity
    return not isinstance(value, rx.Call)


def dead_code_elimination(mod: rx.IRModule) -> rx.IRModule:
    """Remove, in place, pure bindings whose variable is never used and PrimFuncs no call refers to;
    returns ``mod``."""
    used_funcs: set[str] = set()
    for func in list(mod.functions.values()):
        if not isinstance(func, rx.Function):
            continue
        live: set = set(rx.used_vars(func.body.body))
        blocks = []
        for block in reversed(func.body.blocks):
            kept = []
            for b in reversed(block.bindings):
                if b.var in live or not _is_pure(b.value):
                    live.update(rx.used_vars(b.value))
                    kept.append(b)
            blocks.append(type(block)(list(reversed(kept))))
        func.body = rx.SeqExpr([b for b in reversed(blocks) if b.bindings], func.body.body)
        for block in func.body.blocks:
            for b in block.bindings:
                if isinstance(b.value, rx.Call) and b.value.args and isinstance(b.value.args[0], rx.GlobalVar):
                    used_funcs.add(b.value.args[0].name_hint)
    for name in [n for n, f in mod.functions.items() if not isinstance(f, rx.Function) and n not in used_funcs]:
        del mod.functions[name]
    return mod


class DeadCodeElimination(Pass):
    """Pass form of :func:`dead_code_elimination`."""

    name = "dead_code_elimination"

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """``mod`` without its unused pure bindings and unreferenced PrimFuncs (:func:`dead_code_elimination`,
        which edits ``mod`` in place and returns it)."""
        return dead_code_elimination(mod)
