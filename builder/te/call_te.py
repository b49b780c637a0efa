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
            primfunc_name_hint: str | None = None, on_new: Callable | None = None) -> rx.Call:
    """``R.call_tir`` of the PrimFunc built by ``te_func`` on placeholders for ``args``.

    Graph tensors (Exprs with TensorStructInfo, also inside lists) become placeholders named
    after their variables; other arguments pass through. A compound symbolic dim (``batch * seq``)
    becomes one PrimFunc-local variable so that the kernel can bind it from a buffer shape.
    Returns the call; its struct info is the te output's shape in graph-level variables.
    ``on_new(func)`` is called with a newly built PrimFunc (not for a reused one).

    A call identical to an earlier one on the same BlockBuilder (the same ``te_func``, name hint and
    arguments: struct infos of the graph tensors with the same symbolic variables, equal other values)
    reuses that call's PrimFunc instead of building another (TVM's ``BlockBuilder.add_func`` reuses a
    structurally equal function): the 32 identical layers of a model legalize once.
    """
    key = _memo_key(te_func, primfunc_name_hint, args, kwargs)
    memo = bb.__dict__.setdefault("_call_te_memo", {})
    if key is not None and key in memo:
        gvar, sinfos, _ = memo[key]
        if gvar.name_hint in bb.get().functions:
            tensor_args = _tensor_args(args, kwargs)
            return rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple(tensor_args)], sinfo_args=sinfos)
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
    if on_new is not None:
        on_new(func)
    gvar = bb.add_func(func, primfunc_name_hint or getattr(te_func, "__name__", "te_func"))
    back = {var: expr for expr, var in local}

    def graph_dim(d):
        d = normalize_dim(d)
        return d if isinstance(d, int) else normalize_dim(E.substitute(d, back)) if back else d

    sinfos = [TensorStructInfo([graph_dim(d) for d in t.shape], t.dtype) for t in out_list]
    if key is not None:
        memo[key] = (gvar, sinfos, (args, kwargs))   # the arguments keep the keyed variables alive
    call_tir = rx.Op.get("call_tir")
    return rx.Call(call_tir, [gvar, rx.Tuple(tensor_args)], sinfo_args=sinfos)


def _tensor_args(args: tuple, kwargs: dict) -> list[rx.Expr]:
    """The graph tensors among ``args`` / ``kwargs``, in the order :func:`call_te` makes placeholders."""
    out: list[rx.Expr] = []

    def visit(value) -> None:
        if isinstance(value, rx.Expr) and isinstance(value.struct_info, TensorStructInfo):
            out.append(value)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, rx.Expr) for v in value):
            for v in value:
                visit(v)

    for a in args:
        visit(a)
    for v in kwargs.values():
        visit(v)
    return out


class _Unkeyable(Exception):
    """An argument :func:`_memo_key` cannot describe (the call is then built afresh)."""


def _memo_key(te_func: Callable, name: str | None, args: tuple, kwargs: dict):
    """A hashable description of a :func:`call_te` call, or None when an argument has no such
    description. Graph tensors count by dtype and shape, symbolic variables by identity (two functions'
    ``batch`` are different variables), everything else by value."""
    def expr(e: E.PrimExpr):
        if isinstance(e, E.Var):
            return ("var", id(e))
        if isinstance(e, (E.IntImm, E.FloatImm)):
            return (type(e).__name__, e.value, e.dtype)
        op = getattr(e, "op", None)
        return (type(e).__name__, e.dtype, op if isinstance(op, str) else None,
                tuple(expr(c) for c in E._children(e)))

    def value(v):
        if isinstance(v, rx.Expr):
            sinfo = v.struct_info
            if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None:
                return ("tensor", sinfo.dtype, tuple(d if isinstance(d, int) else expr(d) for d in sinfo.shape))
            if isinstance(v, rx.PrimValue):
                return ("prim", expr(v.value))
            raise _Unkeyable
        if isinstance(v, E.PrimExpr):
            return ("expr", expr(v))
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(value(x) for x in v))
        if v is None or isinstance(v, (bool, int, float, str)):
            return (type(v).__name__, v)
        params = getattr(type(v), "__dataclass_params__", None)
        if params is not None and params.frozen:   # kernel specs, epilogue trees: compared by value
            hash(v)
            return (type(v), v)
        raise _Unkeyable

    try:
        return (te_func, name, tuple(value(a) for a in args),
                tuple(sorted((k, value(v)) for k, v in kwargs.items())))
    except (_Unkeyable, TypeError):
        return None


BlockBuilder.set_te_bridge(call_te)   # bb.call_te / bb.emit_te, without ir importing te
