"""``call_te``: a tensor-expression function as ``R.call_tir`` of the PrimFunc it builds -- the glue
between graph-level values and ``builder.te`` (TVM's ``BlockBuilder.call_te``)."""
from __future__ import annotations

from typing import Callable

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.struct_info import TensorStructInfo, normalize_dim
from .prim_func import create_prim_func
from .tensor import Tensor, placeholder

__all__ = ["call_te"]


def call_te(bb: BlockBuilder, te_func: Callable, args: tuple, kwargs: dict,
            primfunc_name_hint: str | None = None) -> rx.Call:
    """``R.call_tir`` of the PrimFunc built by ``te_func`` on placeholders for ``args``.

    Graph tensors (Exprs with TensorStructInfo, also inside lists) become placeholders named
    after their variables; other arguments pass through. A compound symbolic dim (``batch * seq``)
    becomes one PrimFunc-local variable so that the kernel can bind it from a buffer shape.
    Returns the call; its struct info is the te output's shape in graph-level variables.
    """
    local: list[tuple[E.PrimExpr, E.Var]] = []
    names: dict[str, int] = {}
    tensor_args: list[rx.Expr] = []
    placeholders: list[Tensor] = []

    def localize(d):
        if isinstance(d, int) or isinstance(d, E.Var):
            return d
        for expr, var in local:
            if E.prove_equal(expr, d):
                return var
        var = E.Var(f"v{len(local)}", "int64")
        local.append((d, var))
        return var

    def to_te(value):
        if isinstance(value, rx.Expr) and isinstance(value.struct_info, TensorStructInfo):
            sinfo = value.struct_info
            hint = value.name_hint if isinstance(value, rx.Var) else "A"
            k = names.get(hint, 0)
            names[hint] = k + 1
            ph = placeholder([localize(d) for d in sinfo.shape], sinfo.dtype,
                                name=hint if k == 0 else f"{hint}_{k}")
            tensor_args.append(value)
            placeholders.append(ph)
            return ph
        if isinstance(value, (list, tuple)) and any(isinstance(v, rx.Expr) for v in value):
            return type(value)(to_te(v) for v in value)
        return value

    te_args = [to_te(a) for a in args]
    te_kwargs = {k: to_te(v) for k, v in kwargs.items()}
    outs = te_func(*te_args, **te_kwargs)
    out_list = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    func = create_prim_func(placeholders + out_list)
    gvar = bb.add_func(func, primfunc_name_hint or getattr(te_func, "__name__", "te_func"))
    back = {var: expr for expr, var in local}

    def graph_dim(d):
        d = normalize_dim(d)
        return d if isinstance(d, int) else normalize_dim(E.substitute(d, back)) if back else d

    sinfos = [TensorStructInfo([graph_dim(d) for d in t.shape], t.dtype) for t in out_list]
    call_tir = rx.Op.get("call_tir")
    return rx.Call(call_tir, [gvar, rx.Tuple(tensor_args)], sinfo_args=sinfos)


BlockBuilder.set_te_bridge(call_te)   # bb.call_te / bb.emit_te, without ir importing te
