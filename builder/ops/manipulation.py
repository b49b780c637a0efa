"""Data movement, dtype and creation ops: astype, permute_dims, reshape, take, gather / scatter, where, concat, split,
strided_slice,
expand_dims / squeeze, broadcast_to, repeat, pad, triu / tril, full / zeros / ones / empty, arange."""
from __future__ import annotations

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import OpPattern, register_op
from ..ir.op.elementwise import infer_astype, infer_where
from ..ir.op.manipulation import (infer_alloc_tensor, infer_arange, infer_broadcast_to, infer_concat,
    infer_expand_dims, infer_full, infer_gather_elements, infer_pad, infer_permute_dims, infer_repeat, infer_reshape,
    infer_scatter_elements, infer_scatter_nd, infer_split,
    infer_squeeze, infer_strided_slice, infer_take, infer_trilu, infer_zeros_ones)
from ..te import placeholder, topi
from ..te.call_te import call_te
from .common import keep, localize_shape, out_sinfo, te_rule, tensor_fields

INJECTIVE = OpPattern.INJECTIVE


def _astype(x, dtype):
    return topi.astype(x, dtype)


register_op("astype", infer_astype, ("dtype",), pattern=OpPattern.ELEMWISE, compute=_astype,
            legalize=te_rule(topi.astype, "cast", ("dtype",)), frontend="astype", in_recipes=True, doc="Convert to ``dtype``.")
def _permute_dims(x, axes=None):
    return topi.permute_dims(x, None if axes is None else list(axes))


# (the compute: kernel selection folds a transpose of a matmul's result into the kernel's store)
register_op("permute_dims", infer_permute_dims, ("axes",), pattern=INJECTIVE, compute=_permute_dims,
            legalize=te_rule(topi.permute_dims, "transpose", ("axes",)), frontend="permute_dims", in_recipes=True,
            doc="Permute the dims (``numpy.transpose``).")
register_op("reshape", infer_reshape, pattern=INJECTIVE, legalize=keep, frontend="reshape", in_recipes=True,
            doc="A view with another shape (row-major; no data moves: the VM reshapes).")
register_op("take", infer_take, ("axis", "mode"), pattern=INJECTIVE,
            legalize=te_rule(topi.take, "take", ("axis",)), frontend="take", in_recipes=True,
            doc="Gather along ``axis`` by indices (``numpy.take``); an index out of range is an error.")
register_op("gather_elements", infer_gather_elements, ("axis",), pattern=INJECTIVE,
            legalize=te_rule(topi.gather_elements, "gather_elements", ("axis",)), frontend="gather_elements",
            doc="``out[i...] = data[i with i[axis] = indices[i...]]`` (``torch.gather``, ONNX ``GatherElements``); "
                "an index out of range is an error.")


def _scatter(kind: str):
    """The legalization of ``scatter_elements`` / ``scatter_nd``: a call_tir of the loops of
    :mod:`builder.te.topi.scatter` (a copy of the data, then the updates in order)."""
    def rule(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        phs = []
        for arg, label in zip(call.args, ("data", "indices", "updates")):
            si = arg.struct_info
            phs.append(placeholder(localize_shape(si.shape), si.dtype, name=label))
        a = call.attrs
        if kind == "scatter_elements":
            func = topi.scatter_elements_prim_func(*phs, int(a.get("axis", 0)), a.get("reduction", "update"))
        else:
            func = topi.scatter_nd_prim_func(*phs, a.get("reduction", "update"))
        gvar = bb.add_func(func, kind)
        return rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple(list(call.args))], sinfo_args=[call.struct_info])

    return rule


register_op("scatter_elements", infer_scatter_elements, ("axis", "reduction"), pattern=OpPattern.OPAQUE,
            legalize=_scatter("scatter_elements"), frontend="scatter_elements", in_recipes=True,
            doc="``out = data``, then ``out[i with i[axis] = indices[i]] (reduction)= updates[i]`` for every ``i`` in "
                "order (``torch.Tensor.scatter``, ONNX ``ScatterElements``); an index out of range is an error.")
register_op("scatter_nd", infer_scatter_nd, ("reduction",), pattern=OpPattern.OPAQUE,
            legalize=_scatter("scatter_nd"), frontend="scatter_nd", in_recipes=True,
            doc="``out = data``, then ``out[indices[j]] (reduction)= updates[j]`` for every ``j`` in order (ONNX "
                "``ScatterND``); an index out of range is an error.")


def _where(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    c, a, b = call.args
    dtype = call.struct_info.dtype
    sa, sb = _scalar_or_tensor(a), _scalar_or_tensor(b)
    if not isinstance(sa, rx.Expr) and not isinstance(sb, rx.Expr):
        sa = a  # keep one tensor operand so the kernel knows the dtype
    return out_sinfo(call_te(bb, _where_te, (c, sa, sb), {"dtype": dtype}, "where"), call.struct_info)


def _scalar_or_tensor(e: rx.Expr):
    """A 0-d constant as its Python value (inlined into the kernel), anything else unchanged."""
    if isinstance(e, rx.Constant) and e.data.ndim == 0:
        return e.values().item()
    return e


def _where_te(cond, a, b, dtype):
    """``topi.where`` with Python scalars converted to ``dtype`` constants."""
    a = E.const(a, dtype) if isinstance(a, (bool, int, float)) else a
    b = E.const(b, dtype) if isinstance(b, (bool, int, float)) else b
    return topi.where(cond, a, b)


register_op("where", infer_where, pattern=OpPattern.BROADCAST, legalize=_where, frontend="where", in_recipes=True,
            doc="``x1`` where ``condition`` else ``x2``, with broadcasting.")


def _concat(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    new = call_te(bb, topi.concat, (tensor_fields(call.args[0]),), {"axis": call.attrs.get("axis", 0)}, "concatenate")
    return out_sinfo(new, call.struct_info)


def _split(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    new = call_te(bb, topi.split, (call.args[0],), {
        "indices_or_sections": call.attrs["indices_or_sections"], "axis": call.attrs.get("axis", 0)}, "split")
    return out_sinfo(new, call.struct_info)


def _as_reshape(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    """expand_dims / squeeze move no data: a ``R.reshape`` view to the inferred shape."""
    return rx.Call(rx.Op.get("reshape"), [call.args[0], rx.ShapeExpr(call.struct_info.shape)])


def _broadcast_to(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    shape = localize_shape(call.args[1].values)
    return out_sinfo(call_te(bb, topi.broadcast_to, (call.args[0],), {"shape": shape}, "broadcast_to"),
                     call.struct_info)


def _repeat(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    new = call_te(bb, topi.repeat, (call.args[0],), {"repeats": call.attrs["repeats"],
                                                      "axis": call.attrs.get("axis")}, "repeat")
    return out_sinfo(new, call.struct_info)


def _pad(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    width = list(call.attrs["pad_width"])
    new = call_te(bb, topi.pad, (call.args[0],), {
        "pad_before": width[0::2], "pad_after": width[1::2], "pad_value": call.attrs.get("pad_value", 0.0),
        "mode": call.attrs.get("pad_mode", "constant")}, "pad")
    return out_sinfo(new, call.struct_info)


def _trilu(upper: bool):
    def rule(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        k = call.args[1].value
        if not isinstance(k, E.IntImm):
            raise ValueError(f"{call.op.name}: a symbolic diagonal offset k={k} is not supported by this runtime")
        fn = topi.triu if upper else topi.tril
        return out_sinfo(call_te(bb, fn, (call.args[0],), {"k": k.value}, "triu" if upper else "tril"),
                         call.struct_info)

    return rule


def _solve_bounds(bounds: list, known: set, equations: list) -> list:
    """``bounds`` (ints / PrimExprs) with every variable outside ``known`` rewritten through
    ``equations`` (``(kernel_var, graph_dim)``: ``kernel_var == graph_dim``): a variable ``u`` with
    ``graph_dim = u + r`` (``r`` free of ``u``, over known variables) becomes ``kernel_var - r``
    (``graph_dim = r - u``: ``r - kernel_var``).
    Returns the rewritten bounds; ValueError when a variable cannot be expressed."""
    subst: dict = {}
    progress = True
    while progress:
        progress = False
        for var, dim in equations:
            for u in E.free_vars(dim):
                if id(u) in known or u in subst:
                    continue
                for sign in (1, -1):     # dim = u + rest, or dim = rest - u
                    rest = E.simplify(dim - u if sign == 1 else dim + u)
                    if any(w is u for w in E.free_vars(rest)) or \
                            not all(id(w) in known or w in subst for w in E.free_vars(rest)):
                        continue
                    rest = E.substitute(rest, subst)
                    subst[u] = E.simplify(var - rest if sign == 1 else rest - var)
                    progress = True
                    break
    out = []
    for b in bounds:
        if isinstance(b, E.PrimExpr):
            missing = [v for v in E.free_vars(b) if id(v) not in known and v not in subst]
            if missing:
                raise ValueError(f"R.strided_slice: the bound {b} uses '{missing[0].name}', which neither the "
                                 "sliced tensor's shape nor the result's shape determines; this runtime binds a "
                                 "kernel's variables from its tensors' shapes")
            b = E.simplify(E.substitute(b, subst)) if subst else b
        out.append(b)
    return out


def _strided_slice(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    """``topi.strided_slice`` declaring the graph's output shape; bounds over variables that only
    appear inside compound dims (``past`` of a dim ``past + seq``) are rewritten in the kernel's
    own variables (:func:`_solve_bounds`)."""
    a = call.attrs
    x = call.args[0]
    x_shape, o_shape = list(x.struct_info.shape), list(call.struct_info.shape)

    def kernel(xt, axes, begin, end, strides):
        known = {id(d) for d in list(xt.shape) + list(out_shape) if isinstance(d, E.Var)}
        equations = [(kd, gd) for kd, gd in zip(list(xt.shape) + list(out_shape), x_shape + o_shape)
                     if isinstance(kd, E.Var) and not isinstance(gd, (int, E.Var))]
        begin, end = _solve_bounds(list(begin), known, equations), list(end)
        end = [e if not isinstance(e, E.PrimExpr) or all(id(v) in known for v in E.free_vars(e))
               else E.IntImm(0, "int64") for e in end]     # the declared output shape gives the length
        return topi.strided_slice(xt, axes, begin, end, strides, out_shape=out_shape)

    out_shape = localize_shape(o_shape)
    new = call_te(bb, kernel, (x,), {"axes": list(a["axes"]), "begin": list(a["begin"]), "end": list(a["end"]),
                                    "strides": a.get("strides")}, "strided_slice")
    return out_sinfo(new, call.struct_info)


register_op("concat", infer_concat, ("axis",), pattern=INJECTIVE, legalize=_concat, frontend="concat", in_recipes=True,
            doc="Join tensors along ``axis``.")
register_op("split", infer_split, ("indices_or_sections", "axis"), pattern=INJECTIVE, legalize=_split,
            frontend="split", in_recipes=True, doc="Cut a tensor into pieces along ``axis`` (TVM's sizes rule).")
register_op("expand_dims", infer_expand_dims, ("axis",), pattern=INJECTIVE, legalize=_as_reshape,
            frontend="unsqueeze", in_recipes=True, doc="Insert dims of size 1.")
register_op("squeeze", infer_squeeze, ("axis",), pattern=INJECTIVE, legalize=_as_reshape, frontend="squeeze", in_recipes=True,
            doc="Drop dims of size 1.")
register_op("broadcast_to", infer_broadcast_to, pattern=OpPattern.BROADCAST, legalize=_broadcast_to,
            frontend="broadcast_to", in_recipes=True, doc="Broadcast to a shape (numpy rules).")
register_op("repeat", infer_repeat, ("repeats", "axis"), pattern=INJECTIVE, legalize=_repeat, frontend="repeat", in_recipes=True,
            doc="Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``).")
register_op("nn.pad", infer_pad, ("pad_width", "pad_value", "pad_mode"), pattern=INJECTIVE, legalize=_pad,
            frontend="pad", in_recipes=True, doc="Pad with a constant, by reflection or by replication.")
register_op("strided_slice", infer_strided_slice, ("axes", "begin", "end", "strides", "assume_inbound"),
            pattern=INJECTIVE, legalize=_strided_slice, frontend="strided_slice", in_recipes=True,
            doc="``x[begin:end:stride]`` on some axes (numpy slicing; symbolic bounds assumed in range).")
register_op("triu", infer_trilu, pattern=INJECTIVE, legalize=_trilu(True), frontend="triu", in_recipes=True,
            int_args=(1,), doc="The upper triangle (zeros below diagonal ``k``).")
register_op("tril", infer_trilu, pattern=INJECTIVE, legalize=_trilu(False), frontend="tril", in_recipes=True,
            int_args=(1,), doc="The lower triangle.")


def _creation(kind: str):
    """zeros / ones / full / empty: a kernel with only an output buffer (plus the fill value when
    ``full`` gets a computed tensor). ``empty`` is filled with zeros."""
    def rule(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        sinfo = call.struct_info
        shape = localize_shape(sinfo.shape)
        if kind == "full":
            fill = call.args[1]
            value = fill.values().item() if isinstance(fill, rx.Constant) else fill
            new = call_te(bb, topi.full, (), {"shape": shape, "dtype": sinfo.dtype, "fill_value": value}, "full")
        else:
            value = 1 if kind == "ones" else 0
            new = call_te(bb, topi.full, (), {"shape": shape, "dtype": sinfo.dtype, "fill_value": value}, kind)
        return out_sinfo(new, sinfo)

    return rule


def _arange(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    start, end, step = (a.value for a in call.args)
    for v, what in ((start, "start"), (step, "step")):
        if not isinstance(v, (E.IntImm, E.FloatImm)):
            raise ValueError(f"R.arange: a symbolic {what} ({v}) is not supported by this runtime (kernels get "
                             "no scalar arguments); only the end may be symbolic. nn.op.arange emits a symbolic "
                             "start as arange(0, length) * step + start")
    sinfo = call.struct_info
    (n,) = localize_shape(sinfo.shape)
    new = call_te(bb, topi.arange, (), {"start": start.value, "step": step.value, "dtype": sinfo.dtype,
                                        "length": n}, "arange")
    return out_sinfo(new, sinfo)


register_op("full", infer_full, ("dtype",), pattern=INJECTIVE, legalize=_creation("full"), frontend="full", in_recipes=True,
            doc="A tensor filled with one value.")
register_op("zeros", infer_zeros_ones, ("dtype",), pattern=INJECTIVE, legalize=_creation("zeros"), frontend="zeros", in_recipes=True,
            doc="A tensor of zeros.")
register_op("ones", infer_zeros_ones, ("dtype",), pattern=INJECTIVE, legalize=_creation("ones"), frontend="ones", in_recipes=True,
            doc="A tensor of ones.")
register_op("builtin.alloc_tensor", infer_alloc_tensor, pattern=OpPattern.OPAQUE, legalize=_creation("empty"),
            frontend="empty", doc="A new tensor (filled with zeros here).")
register_op("arange", infer_arange, ("dtype",), pattern=INJECTIVE, legalize=_arange, frontend="arange", in_recipes=True,
            doc="``start, start + step, ...`` below ``end``.")
