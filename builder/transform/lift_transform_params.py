"""LiftTransformParams: move the computations that depend only on model weights out of the
functions that run per request, into ``transform_params`` (TVM's ``relax.transform.
LiftTransformParams``).

A function's model parameters are its parameters after the first ``num_input``. A binding of
a dataflow block is *liftable* when its value is a pure operator call, a tuple, a tuple item or
an alias, it reads at least one model parameter or liftable binding and nothing else, and its
shapes use only symbolic variables that the model parameters' shapes define. The pass:

- builds ``transform_params(model_params: R.Tuple(<model parameters>))`` with
  ``num_input`` 0: ``name = model_params[i]`` for each parameter right before its first use,
  the lifted bindings in their original order, and ``output = (v0, v1, ...)``: every lifted
  value (or parameter) that the remaining code reads, in order of first use;
- rewrites the function to take its inputs followed by those values (named like the lifted
  bindings), without the lifted bindings. ``num_input`` stays.

With ``shared_transform=True`` (the default here; TVM's default is ``False``) one
``transform_params`` serves every function with model parameters, which must then have the
same model parameters (count, shapes and dtypes); identical lifted computations are computed
once, and every function takes all of ``transform_params``' outputs, in its order, so one
call of ``transform_params`` prepares the weights for all of them. With ``False`` each such
function ``f`` gets its own ``f_transform_params``. A list of names shares one transform
among those functions only.

Running: ``w = vm["transform_params"](tuple(params)); vm["forward"](x, *w)``.
"""
from __future__ import annotations

from typing import Sequence

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.struct_info import TensorStructInfo, TupleStructInfo, sym_vars
from ..ir.printer import print_struct_info
from ..ir.verifier import verify
from .pass_infra import Pass

__all__ = ["LiftTransformParams"]


class LiftTransformParams(Pass):
    """Pass: ``LiftTransformParams(shared_transform=True)(mod) -> mod`` (a new IRModule; the
    input is not modified).

    Raises ValueError when functions sharing one transform have different model parameters
    (both functions and both signatures are named) or a named function does not exist.
    """

    name = "lift_transform_params"

    def __init__(self, shared_transform: bool | Sequence[str] = True) -> None:
        self.shared_transform = shared_transform

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """A new module in which each function with model parameters (``num_input`` and parameters after
        the inputs) takes its weights' computed forms, and ``transform_params`` (or ``<f>_transform_params``
        per function when not shared) computes them (see the module docstring); verified
        (:func:`builder.ir.verify`) before it is returned. Raises ValueError for a named function without
        model parameters, or shared functions whose model parameters differ."""
        candidates = [n for n, f in mod.functions.items()
                      if isinstance(f, rx.Function) and "num_input" in f.attrs
                      and len(f.params) > f.num_input]
        if isinstance(self.shared_transform, bool):
            shared = candidates if self.shared_transform else []
        else:
            shared = list(self.shared_transform)
            for n in shared:
                if n not in candidates:
                    raise ValueError(f"LiftTransformParams: '{n}' is not a function with model parameters "
                                     f"(num_input and weights after the inputs); candidates: {candidates}")
        out = rx.IRModule(dict(mod.functions), mod.attrs)
        groups = [shared] if shared else []
        groups += [[n] for n in candidates if n not in shared]
        for names in groups:
            transform_name = "transform_params" if names is shared else f"{names[0]}_transform_params"
            new_funcs, transform = _lift_group([(n, mod[n]) for n in names])
            for n, f in new_funcs.items():
                out[n] = f
            out[transform_name] = transform
        return verify(out)


# ---------------------------------------------------------------------------------------------


def _sym_vars(sinfo) -> set:
    return set(sym_vars(sinfo))


def _expr_sym_vars(e: rx.Expr) -> set:
    """Symbolic variables in the shape / scalar arguments of ``e`` (not in its operands)."""
    out: set = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, rx.ShapeExpr):
            for d in x.values:
                if not isinstance(d, int):
                    out.update(E.free_vars(d))
        elif isinstance(x, rx.PrimValue):
            out.update(E.free_vars(x.value))
        elif isinstance(x, rx.Tuple):
            stack.extend(x.fields)
        elif isinstance(x, rx.TupleGetItem):
            stack.append(x.tuple_value)
        elif isinstance(x, rx.Call):
            stack.extend(x.args)
    return out


def _liftable_value(value: rx.Expr) -> bool:
    if isinstance(value, (rx.Var, rx.Tuple, rx.TupleGetItem)):
        return True
    return (isinstance(value, rx.Call) and isinstance(value.op, rx.Op) and value.op.purity
            and value.op.name not in ("relax.call_pure_packed", "relax.call_inplace_packed",
                                      "relax.call_dps_packed", "relax.null_value"))


class _FunctionLift:
    """The liftable bindings of one function and the values its remaining code needs."""

    def __init__(self, name: str, func: rx.Function) -> None:
        self.name = name
        self.func = func
        k = func.num_input
        self.weights = list(func.params[k:])
        allowed_syms = set()
        for p in self.weights:
            allowed_syms |= _sym_vars(p.struct_info)
        known = set(self.weights)
        self.lifted: list[rx.VarBinding] = []
        for block in func.body.blocks:
            if not block.is_dataflow:
                continue
            for b in block.bindings:
                used = rx.used_vars(b.value)
                if (used and all(v in known for v in used) and _liftable_value(b.value)
                        and _sym_vars(b.var.struct_info) <= allowed_syms
                        and _expr_sym_vars(b.value) <= allowed_syms):
                    self.lifted.append(b)
                    known.add(b.var)
        lifted_vars = {b.var for b in self.lifted}
        self.known = known
        # values of `known` that the remaining code reads, in order of first use
        self.needed: list[rx.Var] = []
        for block in func.body.blocks:
            for b in block.bindings:
                if b.var not in lifted_vars:
                    self._need(rx.used_vars(b.value))
        self._need(rx.used_vars(func.body.body))

    def _need(self, used) -> None:
        for v in used:
            if v in self.known and v not in self.needed:
                self.needed.append(v)


def _signature(sinfo) -> str:
    return print_struct_info(sinfo, quoted=True)


def _lift_group(funcs: list[tuple[str, rx.Function]]):
    lifts = [_FunctionLift(n, f) for n, f in funcs]
    ref = lifts[0]
    for other in lifts[1:]:
        a = [_signature(p.struct_info) for p in ref.weights]
        b = [_signature(p.struct_info) for p in other.weights]
        if a != b:
            raise ValueError(f"LiftTransformParams: functions '{ref.name}' and '{other.name}' share one "
                             f"transform_params but have different model parameters: {a} vs {b}")

    # transform_params: model parameters of the first function; other functions' weights and
    # symbolic variables are mapped onto them by position
    model_params = rx.Var("model_params", TupleStructInfo([p.struct_info for p in ref.weights]))
    bindings: list[rx.VarBinding] = []
    weight_items: dict[int, rx.Var] = {}
    by_key: dict = {}          # structural key -> DataflowVar in transform_params
    outputs: list = []         # structural keys, in order
    out_var: dict = {}         # key -> var in transform_params

    def weight_item(i: int) -> rx.Var:
        if i not in weight_items:
            p = ref.weights[i]
            var = rx.DataflowVar(p.name_hint, p.struct_info)
            bindings.append(rx.VarBinding(var, rx.TupleGetItem(model_params, i)))
            weight_items[i] = var
        return weight_items[i]

    per_func_keys: list[dict] = []
    for lift in lifts:
        tmap = _sym_map(lift.weights, ref.weights)
        keys: dict = {p: ("w", i) for i, p in enumerate(lift.weights)}
        vmap: dict = {}
        for i, p in enumerate(lift.weights):
            vmap[p] = None  # filled lazily
        for b in lift.lifted:
            key = _key(b.value, keys)
            keys[b.var] = key
            if key in by_key:  # computed already (for an earlier function)
                vmap[b.var] = by_key[key]
                continue
            for v in rx.used_vars(b.value):
                if v in lift.weights and vmap[v] is None:
                    vmap[v] = weight_item(lift.weights.index(v))
            value = _rebuild(b.value, vmap, tmap)
            var = rx.DataflowVar(b.var.name_hint, value.struct_info)
            bindings.append(rx.VarBinding(var, value))
            by_key[key] = var
            vmap[b.var] = var
        for v in lift.needed:
            key = keys[v]
            if key not in out_var:
                if key[0] == "w":
                    out_var[key] = weight_item(key[1])
                else:
                    out_var[key] = by_key[key]
                outputs.append(key)
        per_func_keys.append(keys)

    out_tuple = rx.Tuple([out_var[k] for k in outputs])
    result = rx.Var("output", out_tuple.struct_info)
    bindings.append(rx.VarBinding(result, out_tuple))
    transform = rx.Function([model_params], rx.SeqExpr([rx.DataflowBlock(bindings)], result),
                            attrs={"num_input": 0}, name="transform_params")

    new_funcs = {}
    for lift, keys in zip(lifts, per_func_keys):
        inverse = {keys[v]: v for v in lift.known}
        new_params = []
        vmap = {}
        for k in outputs:
            old = inverse.get(k)
            sinfo = old.struct_info if old is not None else out_var[k].struct_info
            hint = old.name_hint if old is not None else out_var[k].name_hint
            var = rx.Var(hint, sinfo)
            new_params.append(var)
            if old is not None:
                vmap[old] = var
        lifted_vars = {b.var for b in lift.lifted}
        blocks = []
        for block in lift.func.body.blocks:
            kept = [rx.VarBinding(b.var, _rebuild(b.value, vmap, {}, keep_sinfo=True))
                    for b in block.bindings if b.var not in lifted_vars]
            if kept:
                blocks.append(type(block)(kept))
        body = rx.SeqExpr(blocks, _rebuild(lift.func.body.body, vmap, {}, keep_sinfo=True))
        f = lift.func
        new_funcs[lift.name] = rx.Function(f.params[:f.num_input] + new_params, body, f.ret_struct_info,
                                           f.attrs, f.is_pure, name=lift.name)
    return new_funcs, transform


def _sym_map(weights: list, ref_weights: list) -> dict:
    """Symbolic variables of ``weights``' shapes -> the ones at the same place in ``ref_weights``."""
    tmap: dict = {}
    for p, q in zip(weights, ref_weights):
        a, b = p.struct_info, q.struct_info
        if isinstance(a, TensorStructInfo) and isinstance(b, TensorStructInfo) and a.shape and b.shape:
            for da, db in zip(a.shape, b.shape):
                if isinstance(da, E.Var) and isinstance(db, E.Var) and da is not db:
                    tmap[da] = db
    return tmap


def _key(e: rx.Expr, keys: dict):
    """A structural key of a lifted value: equal keys compute equal values."""
    if isinstance(e, rx.Var):
        return keys[e]
    if isinstance(e, rx.Tuple):
        return ("tuple",) + tuple(_key(f, keys) for f in e.fields)
    if isinstance(e, rx.TupleGetItem):
        return ("item", _key(e.tuple_value, keys), e.index)
    if isinstance(e, rx.Call):
        return ("call", e.op.name, repr(sorted(e.attrs.items())),
                tuple(_key(a, keys) for a in e.args))
    if isinstance(e, rx.ShapeExpr):
        return ("shape", tuple(str(d) for d in e.values))
    if isinstance(e, rx.PrimValue):
        return ("prim", str(e.value))
    if isinstance(e, rx.Constant):
        return ("const", id(e))
    return ("expr", id(e))


def _rebuild(e: rx.Expr, vmap: dict, tmap: dict, keep_sinfo: bool = False) -> rx.Expr:
    """``e`` with Vars replaced through ``vmap`` and symbolic variables through ``tmap``."""
    if isinstance(e, rx.Var):
        new = vmap.get(e)
        return e if new is None else new
    if isinstance(e, rx.Tuple):
        return rx.Tuple([_rebuild(f, vmap, tmap, keep_sinfo) for f in e.fields])
    if isinstance(e, rx.TupleGetItem):
        return rx.TupleGetItem(_rebuild(e.tuple_value, vmap, tmap, keep_sinfo), e.index)
    if isinstance(e, rx.ShapeExpr) and tmap:
        return rx.ShapeExpr([d if isinstance(d, int) else E.substitute(d, tmap) for d in e.values])
    if isinstance(e, rx.PrimValue) and tmap:
        return rx.PrimValue(E.substitute(e.value, tmap), e.value.dtype)
    if isinstance(e, rx.Call):
        args = [_rebuild(a, vmap, tmap, keep_sinfo) for a in e.args]
        infer = isinstance(e.op, rx.Op) and e.op.infer is not None and not keep_sinfo
        return rx.Call(e.op, args, e.attrs, e.sinfo_args, None if infer else e.struct_info)
    return e
