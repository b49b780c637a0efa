"""LegalizeOps: rewrite every graph-level op call into ``R.call_tir`` of a loop-level PrimFunc.

Each op's rule builds tensor expressions with ``builder.te.topi`` through :func:`call_te`, which
turns graph tensors into ``te.placeholder``\\ s, builds the PrimFunc with
``te.create_prim_func`` and adds it to the module under the op's name (``matmul``,
``matmul1``, ...). Ops that move no data stay as they are for the VM: ``R.reshape`` (a view)
and ``R.null_value``.

One pattern is fused here because it decides the memory traffic of every Linear layer:
``matmul(x, permute_dims(w))`` with a 2-D ``w`` becomes one ``linear`` kernel that reads ``w``
in its stored (out, in) layout, so the transpose is never materialized (the ``permute_dims``
binding is then dead and removed by :func:`dead_code_elimination`).
"""
from __future__ import annotations

from typing import Callable

from .. import te
from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.struct_info import TensorStructInfo, normalize_dim
from ..te import topi

__all__ = ["LegalizeOps", "call_te", "dead_code_elimination", "LEGALIZE_RULES"]


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
    placeholders: list[te.Tensor] = []

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
            ph = te.placeholder([localize(d) for d in sinfo.shape], sinfo.dtype,
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
    func = te.create_prim_func(placeholders + out_list)
    gvar = bb.add_func(func, primfunc_name_hint or getattr(te_func, "__name__", "te_func"))
    back = {var: expr for expr, var in local}

    def graph_dim(d):
        d = normalize_dim(d)
        return d if isinstance(d, int) else normalize_dim(E.substitute(d, back)) if back else d

    sinfos = [TensorStructInfo([graph_dim(d) for d in t.shape], t.dtype) for t in out_list]
    call_tir = rx.Op.get("call_tir")
    return rx.Call(call_tir, [gvar, rx.Tuple(tensor_args)], sinfo_args=sinfos)


# ---------------------------------------------------------------------------------------------
# rules: (bb, call, bindings) -> new expression

Rule = Callable[[BlockBuilder, rx.Call, dict], rx.Expr]


def _te(fn: Callable, name: str | None = None, attrs: tuple[str, ...] = ()) -> Rule:
    def rule(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
        kwargs = {k: call.attrs[k] for k in attrs if k in call.attrs}
        return call_te(bb, fn, call.args, kwargs, name or call.op.name.split(".")[-1])

    return rule


def _matmul(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a, b = call.args
    out_dtype = call.attrs.get("out_dtype", "void")
    out_dtype = None if out_dtype in ("void", None) else out_dtype
    src = bindings.get(b) if isinstance(b, rx.Var) else None
    if (isinstance(src, rx.Call) and isinstance(src.op, rx.Op) and src.op.name == "relax.permute_dims"
            and src.args[0].struct_info.ndim == 2 and src.attrs.get("axes") in (None, [1, 0])
            and a.struct_info.ndim >= 1):
        return call_te(bb, topi.linear, (a, src.args[0]), {"out_dtype": out_dtype}, "matmul")
    return call_te(bb, topi.matmul, (a, b), {"out_dtype": out_dtype}, "matmul")


def _keep(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    return call


def _conv1d(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a = call.attrs
    out_dtype = None if a.get("out_dtype") in ("void", None) else a["out_dtype"]
    return call_te(bb, topi.conv1d, call.args, {
        "strides": a["strides"], "padding": a["padding"], "dilation": a["dilation"],
        "groups": a["groups"], "out_dtype": out_dtype}, "conv1d")


LEGALIZE_RULES: dict[str, Rule] = {
    "relax.matmul": _matmul,
    "relax.permute_dims": _te(topi.permute_dims, "transpose", ("axes",)),
    "relax.astype": _te(topi.astype, "cast", ("dtype",)),
    "relax.take": _te(topi.take, "take", ("axis",)),
    "relax.nn.layer_norm": _te(topi.layer_norm, "layer_norm", ("axes", "epsilon")),
    "relax.nn.rms_norm": _te(topi.rms_norm, "rms_norm", ("axes", "epsilon")),
    "relax.nn.softmax": _te(topi.softmax, "softmax", ("axis",)),
    "relax.nn.conv1d": _conv1d,
    "relax.nn.relu": _te(topi.relu, "relu"),
    "relax.nn.silu": _te(topi.silu, "silu"),
    "relax.nn.gelu": _te(topi.gelu, "gelu"),
    "relax.nn.gelu_tanh": _te(topi.gelu_tanh, "gelu_tanh"),
    "relax.reshape": _keep,
    "relax.null_value": _keep,
}
for _name in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "erf", "negative", "abs",
              "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal",
              "not_equal", "less", "less_equal", "greater", "greater_equal"):
    LEGALIZE_RULES[f"relax.{_name}"] = _te(getattr(topi, _name), _name)


class LegalizeOps:
    """Pass: every op call -> ``R.call_tir`` (+ PrimFuncs in the module). ``LegalizeOps()(mod)``.

    Raises ValueError naming the op when an op has no legalization (e.g. ``ccl_*``, which need
    a multi-worker runtime).
    """

    def __call__(self, mod: rx.IRModule) -> rx.IRModule:
        out = rx.IRModule({}, mod.attrs)
        bb = BlockBuilder(out)
        for name, func in mod.functions.items():
            if not isinstance(func, rx.Function):
                bb.add_func(func, name)
        for name, func in mod.functions.items():
            if isinstance(func, rx.Function):
                out[name] = self._function(bb, func, name)
        return dead_code_elimination(out)

    def _function(self, bb: BlockBuilder, func: rx.Function, name: str) -> rx.Function:
        bindings: dict[rx.Var, rx.Expr] = {}
        vmap: dict[rx.Var, rx.Var] = {}
        blocks = []
        for block in func.body.blocks:
            new = type(block)()
            for b in block.bindings:
                value = _remap(b.value, vmap)
                bindings[b.var] = value
                if isinstance(value, rx.Call) and isinstance(value.op, rx.Op) and value.op.name != "relax.call_tir":
                    rule = LEGALIZE_RULES.get(value.op.name)
                    if rule is None:
                        raise ValueError(f"{name}: operator {value.op.name} has no legalization to loop-level "
                                         "code on this runtime")
                    value = rule(bb, value, bindings)
                var = type(b.var)(b.var.name_hint, value.struct_info)
                vmap[b.var] = var
                bindings[var] = bindings[b.var]
                new.bindings.append(rx.VarBinding(var, value))
            blocks.append(new)
        body = rx.SeqExpr(blocks, _remap(func.body.body, vmap))
        return rx.Function(func.params, body, func.ret_struct_info, func.attrs, func.is_pure, name=name)


def _remap(e: rx.Expr, vmap: dict) -> rx.Expr:
    if isinstance(e, rx.Var):
        return vmap.get(e, e)
    if isinstance(e, rx.Tuple):
        return rx.Tuple([_remap(f, vmap) for f in e.fields])
    if isinstance(e, rx.TupleGetItem):
        return rx.TupleGetItem(_remap(e.tuple_value, vmap), e.index)
    if isinstance(e, rx.Call):
        args = [_remap(a, vmap) for a in e.args]
        return rx.Call(e.op, args, e.attrs, e.sinfo_args, e.struct_info)
    return e


def dead_code_elimination(mod: rx.IRModule) -> rx.IRModule:
    """Remove pure bindings whose variable is never used, and PrimFuncs no call refers to."""
    used_funcs: set[str] = set()
    for name, func in list(mod.functions.items()):
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


def _is_pure(value: rx.Expr) -> bool:
    if isinstance(value, rx.Call) and isinstance(value.op, rx.Op):
        return value.op.purity
    return not isinstance(value, rx.Call)



# === section A: tensor creation / manipulation / reduction ops (issue 3) ===


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===
