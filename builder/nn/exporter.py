"""Export an ``nn.Module`` to a graph-level IRModule (``tvm.relax.frontend.nn.exporter``).

For every method in the spec one function is built: user inputs first, then the effect
inputs (``_io`` under ``debug=True``), then the module's parameters (named by their dotted path
with ``.`` -> ``_``); ``num_input`` counts inputs and effects. The method is traced with the
parameters' expressions swapped for the function's parameter variables; its result is bound to
``gv`` inside one dataflow block. With effects, ``_initialize_effect`` comes first and each
function also returns the effects' new state.

Symbolic dims: within one function, string dims with the same name (from the spec or from a
Parameter's shape) are one int64 variable; ``Var`` objects given by the user keep their
identity, so two distinct variables that share a name stay distinct.
"""
from __future__ import annotations

from typing import Any

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.verifier import verify
from ..ir.struct_info import ObjectStructInfo, PrimStructInfo, TensorStructInfo, TupleStructInfo
from . import spec as _spec
from .core import Effect, Module, ModuleDict, ModuleList, Object, Parameter, StrDimVar, Tensor
from .modules import IOEffect

__all__ = ["Exporter"]


class _DimCanon:
    """Maps string-born dims to one Var per name inside one function."""

    def __init__(self) -> None:
        self.by_name: dict[str, E.Var] = {}

    def var(self, name: str) -> E.Var:
        if name not in self.by_name:
            self.by_name[name] = E.Var(name, "int64")
        return self.by_name[name]

    def dim(self, d):
        if isinstance(d, str):
            return self.var(d)
        if isinstance(d, int):
            return d
        vmap = {v: self.var(v.name) for v in E.free_vars(d) if isinstance(v, StrDimVar)}
        return E.substitute(d, vmap) if vmap else d

    def sinfo(self, s):
        if isinstance(s, TensorStructInfo) and s.shape is not None:
            return TensorStructInfo([self.dim(d) for d in s.shape], s.dtype)
        if isinstance(s, TupleStructInfo):
            return TupleStructInfo([self.sinfo(f) for f in s.fields])
        return s


def _named_effects(module: Module, prefix: str = ""):
    for name, item in module.__dict__.items():
        if isinstance(item, Effect):
            yield prefix + name, item
        elif isinstance(item, ModuleList):
            for i, sub in enumerate(item):
                yield from _named_effects(sub, f"{prefix}{name}.{i}.")
        elif isinstance(item, ModuleDict):
            for key, sub in item.items():
                yield from _named_effects(sub, f"{prefix}{name}.{key}.")
        elif isinstance(item, Module):
            yield from _named_effects(item, f"{prefix}{name}.")


class Exporter:
    """Builds the IRModule and parameter list for a :class:`~builder.nn.spec.ModuleSpec`."""

    def __init__(self, debug: bool = False) -> None:
        self.debug = debug
        self.builder = BlockBuilder()

    def build(self, spec: _spec.ModuleSpec) -> tuple[rx.IRModule, list[tuple[str, Parameter]]]:
        """Export every method of ``spec``; returns ``(IRModule, [(name, Parameter), ...])``."""
        module = spec.module
        params = list(module.named_parameters())
        effects: list[tuple[str, Effect]] = []
        if self.debug:
            effects.append(("_io", IOEffect()))
        effects += [(name.replace(".", "_"), eff) for name, eff in _named_effects(module)]
        if effects:
            self._emit_initialize_effect(effects)
        for name, method_spec in zip(spec.method_names, spec.method_specs):
            self._export_method(name, method_spec, params, effects)
        return verify(self.builder.get()), params

    def _emit_initialize_effect(self, effects) -> None:
        bb = self.builder
        with bb.function("_initialize_effect", []):
            with bb.dataflow():
                outs = []
                for name, eff in effects:
                    outs.extend(eff.emit_init(name, bb))
                lv = bb.emit(rx.Tuple(outs))
                gv = bb.emit_output(lv)
            bb.emit_func_output(gv, params=[])

    def _input(self, name: str, arg: Any, canon: _DimCanon):
        """(function parameter Var, value handed to the traced method)."""
        if isinstance(arg, _spec.Tensor):
            var = rx.Var(name, TensorStructInfo([canon.dim(d) for d in arg.shape], arg.dtype))
            return var, Tensor(_expr=var)
        if isinstance(arg, _spec.Int):
            sym = canon.var(name)
            var = rx.Var(name, PrimStructInfo("int64", sym))
            return var, sym
        if isinstance(arg, _spec.Object):
            var = rx.Var(name, ObjectStructInfo())
            return var, Object(_expr=var, _name=name)
        if isinstance(arg, _spec.Tuple):
            pairs = [self._input(f"{arg.name}_{i}", a, canon) for i, a in enumerate(arg.elements)]
            var = rx.Var(name, TupleStructInfo([p[0].struct_info for p in pairs]))
            return var, [p[1] for p in pairs]
        raise TypeError(f"unsupported argument spec {arg!r} for '{name}'")

    def _export_method(self, name: str, mspec: _spec.MethodSpec, params, effects) -> None:
        bb = self.builder
        canon = _DimCanon()
        inputs, values = [], []
        for arg_name, arg in zip(mspec.arg_names, mspec.arg_specs):
            var, value = self._input(arg_name, arg, canon)
            # a Tuple input's tensors are read through TupleGetItem inside the function
            inputs.append(var)
            values.append(value)
        effect_vars: list[rx.Var] = []
        if mspec.effect_mode == "plain":
            for eff_name, eff in effects:
                state = eff.create(eff_name)
                eff.set_state(state)
                effect_vars.extend(state)
        saved = [(p, p._expr) for _, p in params]
        param_vars: list[rx.Var] = []
        if mspec.param_mode == "plain":
            for pname, p in params:
                var = rx.Var(pname.replace(".", "_"), canon.sinfo(p._expr.struct_info))
                param_vars.append(var)
                p._expr = var
        elif mspec.param_mode == "packed":
            packed = rx.Var("packed_params", TupleStructInfo([canon.sinfo(p._expr.struct_info) for _, p in params]))
            param_vars.append(packed)
        try:
            with bb.function(name, attrs={"num_input": len(inputs) + len(effect_vars)}):
                with bb.dataflow():
                    if mspec.param_mode == "packed":
                        for i, (pname, p) in enumerate(params):
                            p._expr = bb.emit(rx.TupleGetItem(param_vars[0], i), pname.replace(".", "_"))
                    values = [self._unpack_tuple_input(var, v) for var, v in zip(inputs, values)]
                    output = mspec.method(*values)
                    out_expr = _to_expr(output)
                    if effect_vars:
                        finals = []
                        for _, eff in effects:
                            finals.extend(eff.finalize())
                        out_expr = rx.Tuple([out_expr, rx.Tuple(finals)])
                    gv = bb.emit_output(out_expr)
                bb.emit_func_output(gv, params=inputs + effect_vars + param_vars)
        finally:
            for p, expr in saved:
                p._expr = expr

    def _unpack_tuple_input(self, var: rx.Var, value):
        if isinstance(value, list):
            out = []
            for i, v in enumerate(value):
                item = self.builder.emit(rx.TupleGetItem(var, i), f"{var.name_hint}_{i}")
                out.append(Tensor(_expr=item) if isinstance(v, Tensor) else v)
            return out
        return value


def _to_expr(output: Any) -> rx.Expr:
    if isinstance(output, (Tensor, Object)):
        return output._expr
    if isinstance(output, (list, tuple)):
        return rx.Tuple([_to_expr(o) for o in output])
    if isinstance(output, rx.Expr):
        return output
    raise TypeError(f"an exported method must return Tensors (or tuples of them), got {type(output).__name__}")
