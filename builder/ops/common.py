"""Helpers that op records use to write their legalizations."""
from __future__ import annotations

from typing import Callable

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.struct_info import TupleStructInfo
from ..te.call_te import call_te

__all__ = ["Legalize", "te_rule", "out_sinfo", "localize_shape", "tensor_fields", "keep", "void_none"]

Legalize = Callable[[BlockBuilder, rx.Call], rx.Expr]
"""A legalization: ``(bb, call) -> Expr``, the loop-level code of one call (usually ``R.call_tir``)."""


def te_rule(fn: Callable, name: str | None = None, attrs: tuple[str, ...] = ()) -> Legalize:
    """The legalization that calls topi compute ``fn`` on the call's arguments, passing the call's
    attributes ``attrs`` as keywords; the PrimFunc is named ``name`` (default: the op's last name)."""
    def rule(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        kwargs = {k: call.attrs[k] for k in attrs if k in call.attrs}
        return call_te(bb, fn, call.args, kwargs, name or call.op.name.split(".")[-1])

    return rule


def keep(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    """The legalization of an op that moves no data or that the VM runs itself: the call unchanged."""
    return call


def void_none(dtype):
    """None for TVM's "no dtype" spellings (``void``, ``""``), else the dtype."""
    return None if dtype in ("void", None, "") else dtype


def out_sinfo(new: rx.Call, sinfo) -> rx.Call:
    """``new`` (a call_tir) with the original call's graph-level output struct info, so that the
    legalized binding keeps the exact shape expressions the graph inferred."""
    fields = list(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else [sinfo]
    return rx.Call(new.op, new.args, new.attrs, sinfo_args=fields)


def localize_shape(shape) -> list:
    """Output dims for a kernel: compound symbolic dims (``n * 2``) become fresh kernel-local
    variables, so that the kernel binds them from its output buffer's shape."""
    local: list[tuple[E.PrimExpr, E.Var]] = []
    out = []
    for d in shape:
        if isinstance(d, (int, E.Var)):
            out.append(d)
            continue
        for expr, var in local:
            if E.prove_equal(expr, d):
                out.append(var)
                break
        else:
            var = E.Var(f"w{len(local)}", "int64")
            local.append((d, var))
            out.append(var)
    return out


def tensor_fields(e: rx.Expr) -> list[rx.Expr]:
    """The fields of a tuple-valued expression (a literal tuple, or ``e[i]`` for each field)."""
    if isinstance(e, rx.Tuple):
        return list(e.fields)
    return [rx.TupleGetItem(e, i) for i in range(len(e.struct_info.fields))]
