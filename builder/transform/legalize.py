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
                value = rx.substitute_vars(b.value, vmap)
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
        body = rx.SeqExpr(blocks, rx.substitute_vars(func.body.body, vmap))
        return rx.Function(func.params, body, func.ret_struct_info, func.attrs, func.is_pure, name=name)


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
from ..ir.struct_info import TupleStructInfo as _TupleSInfo  # noqa: E402


def _out_sinfo(new: rx.Call, sinfo) -> rx.Call:
    """``new`` (a call_tir) with the original call's graph-level output struct info, so that the
    legalized binding keeps the exact shape expressions the graph inferred."""
    fields = list(sinfo.fields) if isinstance(sinfo, _TupleSInfo) else [sinfo]
    return rx.Call(new.op, new.args, new.attrs, sinfo_args=fields)


def _localize_shape(shape) -> list:
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


def _tensor_fields(e: rx.Expr) -> list[rx.Expr]:
    if isinstance(e, rx.Tuple):
        return list(e.fields)
    return [rx.TupleGetItem(e, i) for i in range(len(e.struct_info.fields))]


def _concat(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    fields = _tensor_fields(call.args[0])
    new = call_te(bb, topi.concat, (fields,), {"axis": call.attrs.get("axis", 0)}, "concatenate")
    return _out_sinfo(new, call.struct_info)


def _split(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    new = call_te(bb, topi.split, (call.args[0],), {
        "indices_or_sections": call.attrs["indices_or_sections"],
        "axis": call.attrs.get("axis", 0)}, "split")
    return _out_sinfo(new, call.struct_info)


def _as_reshape(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    """expand_dims / squeeze move no data: a ``R.reshape`` view to the inferred shape."""
    return rx.Call(rx.Op.get("reshape"), [call.args[0], rx.ShapeExpr(call.struct_info.shape)])


def _broadcast_to(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    shape = _localize_shape(call.args[1].values)
    return _out_sinfo(call_te(bb, topi.broadcast_to, (call.args[0],), {"shape": shape},
                              "broadcast_to"), call.struct_info)


def _repeat(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    new = call_te(bb, topi.repeat, (call.args[0],), {"repeats": call.attrs["repeats"],
                                                      "axis": call.attrs.get("axis")}, "repeat")
    return _out_sinfo(new, call.struct_info)


def _pad(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    width = list(call.attrs["pad_width"])
    new = call_te(bb, topi.pad, (call.args[0],), {
        "pad_before": width[0::2], "pad_after": width[1::2],
        "pad_value": call.attrs.get("pad_value", 0.0),
        "mode": call.attrs.get("pad_mode", "constant")}, "pad")
    return _out_sinfo(new, call.struct_info)


def _trilu(upper: bool) -> Rule:
    def rule(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
        k = call.args[1].value
        if not isinstance(k, E.IntImm):
            raise ValueError(f"{call.op.name}: a symbolic diagonal offset k={k} is not supported "
                             "by this runtime")
        fn = topi.triu if upper else topi.tril
        return _out_sinfo(call_te(bb, fn, (call.args[0],), {"k": k.value},
                                  "triu" if upper else "tril"), call.struct_info)

    return rule


def _creation(kind: str) -> Rule:
    """zeros / ones / full / empty: a kernel with only an output buffer (plus the fill value
    when ``full`` gets a computed tensor). ``empty`` is filled with zeros."""
    def rule(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
        sinfo = call.struct_info
        shape = _localize_shape(sinfo.shape)
        if kind == "full":
            fill = call.args[1]
            if isinstance(fill, rx.Constant):
                value = fill.values().item()
                new = call_te(bb, topi.full, (), {"shape": shape, "dtype": sinfo.dtype,
                                                  "fill_value": value}, "full")
            else:
                new = call_te(bb, topi.full, (), {"shape": shape, "dtype": sinfo.dtype,
                                                  "fill_value": fill}, "full")
        else:
            value = 1 if kind == "ones" else 0
            new = call_te(bb, topi.full, (), {"shape": shape, "dtype": sinfo.dtype,
                                              "fill_value": value}, kind)
        return _out_sinfo(new, sinfo)

    return rule


def _arange(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    start, end, step = (a.value for a in call.args)
    for v, what in ((start, "start"), (step, "step")):
        if not isinstance(v, (E.IntImm, E.FloatImm)):
            raise ValueError(f"R.arange: a symbolic {what} ({v}) is not supported by this runtime; "
                             "only the end may be symbolic")
    sinfo = call.struct_info
    (n,) = _localize_shape(sinfo.shape)
    new = call_te(bb, topi.arange, (), {"start": start.value, "step": step.value,
                                        "dtype": sinfo.dtype, "length": n}, "arange")
    return _out_sinfo(new, sinfo)


def _scalar_or_tensor(e: rx.Expr):
    """A 0-d constant as its Python value (inlined into the kernel), anything else unchanged."""
    if isinstance(e, rx.Constant) and e.data.ndim == 0:
        return e.values().item()
    return e


def _where(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    c, a, b = call.args
    dtype = call.struct_info.dtype
    sa, sb = _scalar_or_tensor(a), _scalar_or_tensor(b)
    if not isinstance(sa, rx.Expr) and not isinstance(sb, rx.Expr):
        sa = a  # keep one tensor operand so the kernel knows the dtype
    new = call_te(bb, _where_te, (c, sa, sb), {"dtype": dtype}, "where")
    return _out_sinfo(new, call.struct_info)


def _where_te(cond, a, b, dtype):
    """``topi.where`` with Python scalars converted to ``dtype`` constants."""
    a = E.const(a, dtype) if isinstance(a, (bool, int, float)) else a
    b = E.const(b, dtype) if isinstance(b, (bool, int, float)) else b
    return topi.where(cond, a, b)


def _statistical(fn, name: str) -> Rule:
    def rule(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
        new = call_te(bb, fn, (call.args[0],), {"axis": call.attrs.get("axis"),
                                                "keepdims": bool(call.attrs.get("keepdims"))}, name)
        return _out_sinfo(new, call.struct_info)

    return rule


def _cumsum(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    x = call.args[0]
    sinfo = x.struct_info
    ph = te.placeholder(_localize_shape(sinfo.shape), sinfo.dtype,
                        name=x.name_hint if isinstance(x, rx.Var) else "data")
    dtype = call.attrs.get("dtype")
    func = topi.cumsum_prim_func(ph, call.attrs.get("axis"), None if dtype in (None, "void") else dtype,
                                 bool(call.attrs.get("exclusive")))
    gvar = bb.add_func(func, "cumsum")
    return rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple([x])], sinfo_args=[call.struct_info])


LEGALIZE_RULES.update({
    "relax.concat": _concat,
    "relax.split": _split,
    "relax.expand_dims": _as_reshape,
    "relax.squeeze": _as_reshape,
    "relax.broadcast_to": _broadcast_to,
    "relax.repeat": _repeat,
    "relax.nn.pad": _pad,
    "relax.triu": _trilu(True),
    "relax.tril": _trilu(False),
    "relax.full": _creation("full"),
    "relax.zeros": _creation("zeros"),
    "relax.ones": _creation("ones"),
    "relax.builtin.alloc_tensor": _creation("empty"),
    "relax.arange": _arange,
    "relax.where": _where,
    "relax.sum": _statistical(topi.sum, "sum"),
    "relax.mean": _statistical(topi.mean, "mean"),
    "relax.max": _statistical(topi.max, "max"),
    "relax.min": _statistical(topi.min, "min"),
    "relax.prod": _statistical(topi.prod, "prod"),
    "relax.argmax": _statistical(topi.argmax, "argmax"),
    "relax.argmin": _statistical(topi.argmin, "argmin"),
    "relax.cumsum": _cumsum,
})


# === section B: neural-network ops, extern and TE/TIR ops (issue 3) ===


def _void_none(dtype):
    return None if dtype in ("void", None, "") else dtype


def _conv2d(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a = call.attrs
    return call_te(bb, topi.conv2d, call.args, {
        "strides": a["strides"], "padding": a["padding"], "dilation": a["dilation"],
        "groups": a["groups"], "out_dtype": _void_none(a.get("out_dtype"))}, "conv2d")


def _conv1d_transpose(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a = call.attrs
    return call_te(bb, topi.conv1d_transpose, call.args, {
        "strides": a["strides"], "padding": a["padding"], "output_padding": a["output_padding"],
        "dilation": a["dilation"], "groups": a["groups"],
        "out_dtype": _void_none(a.get("out_dtype"))}, "conv1d_transpose")


def _group_norm(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a = call.attrs
    x, gamma, beta = call.args
    return call_te(bb, topi.group_norm, (x, gamma if a.get("scale", True) else None,
                                         beta if a.get("center", True) else None), {
        "num_groups": a["num_groups"], "channel_axis": a["channel_axis"], "axes": a["axes"],
        "epsilon": a["epsilon"]}, "group_norm")


def _resize2d(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a = call.attrs
    if a.get("method") not in ("nearest_neighbor", "linear"):
        raise ValueError(f"R.image.resize2d: method {a.get('method')!r} has no legalization on this "
                         "runtime (nearest_neighbor and linear are supported)")
    return call_te(bb, topi.resize2d, (call.args[0],), {
        "size": list(call.args[1].values), "layout": a.get("layout", "NCHW"),
        "method": a["method"],
        "coordinate_transformation_mode": a.get("coordinate_transformation_mode", "half_pixel"),
        "rounding_method": a.get("rounding_method", "round"),
        "out_dtype": _void_none(a.get("out_dtype"))}, "resize2d")


def _attention(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a = call.attrs
    scale = a.get("scale")
    return call_te(bb, topi.attention, call.args, {
        "scale": None if scale is None else float(scale),
        "causal_mask": a.get("causal_mask")}, "attention")


def _needs_workers(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    raise ValueError(f"R.{call.op.name[len('relax.'):]} is a collective communication op: it needs "
                     "a multi-worker (disco / CCL) runtime, which this single-process runtime does "
                     "not provide; export the model without it to compile here")


LEGALIZE_RULES.update({
    "relax.nn.conv2d": _conv2d,
    "relax.nn.conv1d_transpose": _conv1d_transpose,
    "relax.nn.group_norm": _group_norm,
    "relax.image.resize2d": _resize2d,
    "relax.nn.attention": _attention,
    "relax.call_dps_packed": _keep,
    "relax.ccl.allreduce": _needs_workers,
    "relax.ccl.broadcast_from_worker0": _needs_workers,
})


# runtime calls (KV cache, debug effects) stay as they are; the VM runs them as builtins
LEGALIZE_RULES["relax.call_pure_packed"] = _keep
LEGALIZE_RULES["relax.call_inplace_packed"] = _keep


# === section C: quantization ops (issue 4) ===
#
# ``R.group_dequantize`` on its own becomes a ``T_dequantize`` kernel (a real float buffer). Its
# usual consumers are fused with it instead, so that the weight is dequantized in registers:
# ``matmul(x, permute_dims(group_dequantize(q, s)))`` (a quantized Linear) becomes one
# ``dequantize_matmul`` kernel and ``take(group_dequantize(q, s), ids, axis=0)`` (a quantized
# Embedding) one ``dequantize_take`` kernel. The dequantize and permute_dims bindings are then
# dead and removed by dead_code_elimination, together with their PrimFuncs.


def _quant_attrs(call: rx.Call) -> dict:
    a = call.attrs
    return {"bits": int(a["bits"]), "group_size": int(a["group_size"]),
            "zero_point": int(a["zero_point"]), "in_features": int(a["in_features"])}


def _producer(bindings: dict, e: rx.Expr, op_name: str) -> rx.Call | None:
    """The call bound to ``e`` when it is a call of ``op_name``, else None."""
    src = bindings.get(e) if isinstance(e, rx.Var) else None
    if isinstance(src, rx.Call) and isinstance(src.op, rx.Op) and src.op.name == op_name:
        return src
    return None


def _group_dequantize(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    return call_te(bb, topi.group_dequantize, call.args, _quant_attrs(call), "dequantize")


_UNFUSED_MATMUL = LEGALIZE_RULES["relax.matmul"]
_UNFUSED_TAKE = LEGALIZE_RULES["relax.take"]


def _matmul_of_dequantized(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a, b = call.args
    perm = _producer(bindings, b, "relax.permute_dims")
    dq = _producer(bindings, perm.args[0], "relax.group_dequantize") if perm is not None else None
    if dq is not None and perm.attrs.get("axes") in (None, [1, 0]) and a.struct_info.ndim >= 1:
        out_dtype = _void_none(call.attrs.get("out_dtype"))
        return call_te(bb, topi.dequantize_linear, (a, dq.args[0], dq.args[1]),
                       {**_quant_attrs(dq), "out_dtype": out_dtype}, "dequantize_matmul")
    return _UNFUSED_MATMUL(bb, call, bindings)


def _take_of_dequantized(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    data, indices = call.args
    dq = _producer(bindings, data, "relax.group_dequantize")
    if dq is not None and call.attrs.get("axis", 0) in (0, -2) and call.attrs.get("mode", "fast") == "fast":
        return call_te(bb, topi.dequantize_take, (dq.args[0], dq.args[1], indices), _quant_attrs(dq),
                       "dequantize_take")
    return _UNFUSED_TAKE(bb, call, bindings)


LEGALIZE_RULES.update({
    "relax.group_dequantize": _group_dequantize,
    "relax.matmul": _matmul_of_dequantized,
    "relax.take": _take_of_dequantized,
})


# === section D: matmul kernels (issue 5) ===
#
# ``matmul(x, permute_dims(W))`` with a 2-D float ``W`` or ``W = group_dequantize(q, s)`` (a
# Linear, plain or quantized) becomes ``topi.linear_kernel``: the same reference loops as
# ``topi.linear`` / ``topi.dequantize_linear``, plus ``attrs["mb.kernel"]``, so that the code
# generator compiles it with the GEMV / GEMM kernels of ``builder/codegen/kernels/linear.py``.
# FuseOps (which runs first in ``builder.compile``) does the same for a matmul together with
# its elementwise consumers; this rule covers the matmuls it left and LegalizeOps used alone.


def linear_kernel_call(bb: BlockBuilder, x: rx.Expr, tensors: list, weights: list[dict],
                       epilogue=("linear", 0), out_dtype: str | None = None,
                       name: str = "matmul") -> rx.Call:
    """``R.call_tir`` of a :func:`builder.te.topi.linear_kernel` PrimFunc with its kernel
    attribute: ``x`` and ``tensors`` are graph values (``weights`` index into ``tensors``, see
    ``linear_kernel``). Raises ValueError / TypeError as the topi ops do."""
    spec: dict = {}

    def fused(xt, *ts):
        return topi.linear_kernel(xt, *ts, weights=weights, epilogue=epilogue, out_dtype=out_dtype,
                                  spec=spec)

    call = call_te(bb, fused, (x, *tensors), {}, name)
    bb.get()[call.args[0].name_hint].attrs["mb.kernel"] = spec
    return call


def linear_weight(bindings: dict, b: rx.Expr, tensors: list) -> dict | None:
    """The weight description of ``b`` when it is ``permute_dims(W)`` of a 2-D float ``W`` or of
    ``group_dequantize(q, s)`` (appending the weight's tensors to ``tensors``), else None."""
    def bound(e: rx.Expr, op: str):
        v = bindings.get(e) if isinstance(e, rx.Var) else None
        ok = isinstance(v, rx.Call) and isinstance(v.op, rx.Op) and v.op.name == op
        return v if ok else None

    perm = bound(b, "relax.permute_dims")
    if perm is None or perm.attrs.get("axes") not in (None, [1, 0]):
        return None
    w = perm.args[0]
    wsi = w.struct_info
    if not isinstance(wsi, TensorStructInfo) or wsi.ndim != 2:
        return None
    dq = bound(w, "relax.group_dequantize")
    if dq is not None:
        q, s = dq.args
        tensors.extend([q, s])
        at = dq.attrs
        return {"format": "group", "q": len(tensors) - 2, "scale": len(tensors) - 1,
                "bits": int(at["bits"]), "group_size": int(at["group_size"]),
                "zero_point": int(at["zero_point"]), "in_features": int(at["in_features"]),
                "activation": str(at.get("activation_quantization", "none"))}
    if wsi.dtype not in ("float16", "bfloat16", "float32"):
        return None
    tensors.append(w)
    return {"format": "dense", "w": len(tensors) - 1}


_MATMUL_BEFORE_KERNELS = LEGALIZE_RULES["relax.matmul"]


def _matmul_kernel(bb: BlockBuilder, call: rx.Call, bindings: dict) -> rx.Expr:
    a, b = call.args
    asi = a.struct_info
    tensors: list = []
    desc = linear_weight(bindings, b, tensors)
    if (desc is not None and isinstance(asi, TensorStructInfo) and asi.ndim >= 1
            and asi.dtype in ("float16", "bfloat16", "float32")):
        out_dtype = call.attrs.get("out_dtype", "void")
        out_dtype = None if out_dtype in ("void", None, "") else out_dtype
        try:
            if desc["format"] == "group":
                return _dequantize_matmul_kernel(bb, a, tensors, desc, out_dtype)
            return linear_kernel_call(bb, a, tensors, [desc], out_dtype=out_dtype, name="matmul")
        except (ValueError, TypeError):
            pass
    return _MATMUL_BEFORE_KERNELS(bb, call, bindings)


def _dequantize_matmul_kernel(bb: BlockBuilder, a: rx.Expr, tensors: list, desc: dict,
                              out_dtype: str | None) -> rx.Call:
    """Section C's ``dequantize_linear`` kernel (its reference loops, unchanged) with the
    kernel attribute, so that it compiles to the quantized GEMV / GEMM."""
    from ..ir import tir as _tir

    q, s = tensors[desc["q"]], tensors[desc["scale"]]
    attrs = {k: desc[k] for k in ("bits", "group_size", "zero_point", "in_features")}
    call = call_te(bb, topi.dequantize_linear, (a, q, s), {**attrs, "out_dtype": out_dtype},
                   "dequantize_matmul")
    func = bb.get()[call.args[0].name_hint]
    reductions = []
    _tir.walk_stmt(func.body, lambda st: reductions.append(st.block.name)
                   if isinstance(st, _tir.BlockRealize) and st.block.init is not None else None)
    if len(reductions) == 1:
        func.attrs["mb.kernel"] = {"kind": "linear", "x": 0, "out": 3, "acc": reductions,
                                   "weights": [{**desc, "q": 1, "scale": 2}]}
    return call


LEGALIZE_RULES["relax.matmul"] = _matmul_kernel
