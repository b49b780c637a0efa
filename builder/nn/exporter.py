"""Export an ``nn.Module`` to a graph-level IRModule (``tvm.relax.frontend.nn.exporter``).

For every method in the spec one function is built with, in order: the spec's inputs, the
effects' inputs (``_io`` under ``debug=True``, then every Effect in the module tree, e.g. a
KV cache named by its dotted path with ``.`` -> ``_``), then the module's parameters (named by
their dotted path with ``.`` -> ``_``). ``num_input`` counts the spec's inputs plus the
effect inputs (one per effect in ``plain`` mode, one tuple in ``packed`` mode, none in
``none`` mode). The method is traced with the parameters' expressions swapped for the
function's parameter variables; its result is bound to ``gv`` inside one dataflow block.
With effects, ``_initialize_effect`` comes first and each function also returns the effects'
new state: ``gv = result, (effect states...)``.

Inputs: ``spec.Tensor`` -> ``R.Tensor`` parameter; ``spec.Int`` -> ``R.Shape(["name"])``
parameter whose symbolic variable is handed to the method (as TVM does); ``spec.Object`` ->
``R.Object``; ``spec.Tuple`` -> ``R.Tuple`` parameter whose fields are bound to ``name_0``,
``name_1``, ... before the method runs.

Symbolic dims: within one function, string dims with the same name (from the spec or from a
Parameter's shape) are one int64 variable; ``Var`` objects given by the user keep their
identity, so two distinct variables that share a name stay distinct (printed ``n`` and
``n_1``; TVM marks this case unsupported). Variables are not shared across functions.
"""
from __future__ import annotations

import inspect
import threading
from typing import Any

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.struct_info import ObjectStructInfo, ShapeStructInfo, TensorStructInfo, TupleStructInfo
from ..ir.verifier import verify
from . import spec as _spec
from .core import Effect, Object, Parameter, StrDimVar, Tensor, _attribute_finder
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


class Exporter:
    """Builds the IRModule and parameter list for a :class:`~builder.nn.spec.ModuleSpec`.

    ``Exporter(debug)``; :meth:`build` exports; :meth:`current` is the exporter whose build is
    running (whose IO effect :meth:`builder.nn.modules.IOEffect.current` gives ``nn.op.debug_func``).
    """

    _tls = threading.local()

    def __init__(self, debug: bool = False) -> None:
        self.debug = debug
        self.builder = BlockBuilder()
        self.io_effect: IOEffect | None = IOEffect() if debug else None

    @staticmethod
    def current() -> "Exporter":
        """The exporter currently building. Raises RuntimeError outside ``export_tvm``."""
        stack = getattr(Exporter._tls, "stack", None)
        if not stack:
            raise RuntimeError("no module is being exported (use Module.export_tvm or Module.jit)")
        return stack[-1]

    def build(self, spec: _spec.ModuleSpec) -> tuple[rx.IRModule, list[tuple[str, Parameter]]]:
        """Export every method of ``spec``; returns ``(IRModule, [(name, Parameter), ...])``.

        Raises TypeError for an unsupported input spec or return value, and
        ``builder.ir.verifier.IRVerifyError`` when the traced functions are ill-formed (e.g. a
        parameter used under ``param_mode="none"``).
        """
        module = spec.module
        params = list(_attribute_finder(module, "", lambda x: isinstance(x, Parameter)))
        effects: list[tuple[str, Effect]] = []
        if self.io_effect is not None:
            effects.append(("", self.io_effect))
        effects += [(name.replace(".", "_"), eff)
                    for name, eff in _attribute_finder(module, "", lambda x: isinstance(x, Effect))]
        if not hasattr(Exporter._tls, "stack"):
            Exporter._tls.stack = []
        Exporter._tls.stack.append(self)
        IOEffect.enter(self.io_effect)
        try:
            if effects:
                self._emit_initialize_effect(effects)
            for name, method_spec in zip(spec.method_names, spec.method_specs):
                self._export_method(name, method_spec, params, effects)
        finally:
            IOEffect.exit()
            Exporter._tls.stack.pop()
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
            return rx.Var(name, ShapeStructInfo([sym])), sym
        if isinstance(arg, _spec.Object):
            var = rx.Var(name, ObjectStructInfo())
            return var, arg.object_type(_expr=var, _name=name)
        if isinstance(arg, _spec.Tuple):
            pairs = [self._input(f"{name}_{i}", a, canon) for i, a in enumerate(arg.elements)]
            var = rx.Var(name, TupleStructInfo([p[0].struct_info for p in pairs]))
            return var, _TupleInput(arg, [p[1] for p in pairs])
        raise TypeError(f"unsupported argument spec {arg!r} for '{name}'")

    def _effect_inputs(self, mode: str, effects) -> list[rx.Var]:
        unflat = []
        for name, eff in effects:
            state = eff.create(name)
            eff.set_state(state)
            unflat.append(state)
        flat = [v for state in unflat for v in state]
        if mode == "none":
            return []
        if mode == "plain":
            return flat
        packed = rx.Var("packed_effects", TupleStructInfo([v.struct_info for v in flat]))
        i = 0
        for state, (_, eff) in zip(unflat, effects):
            new_state = []
            for v in state:
                new_state.append(self.builder.emit(rx.TupleGetItem(packed, i), v.name_hint))
                i += 1
            eff.set_state(new_state)
        return [packed]

    def _param_inputs(self, mode: str, params, canon: _DimCanon) -> list[rx.Var]:
        holders = []
        for pname, p in params:
            var = rx.Var(pname.replace(".", "_"), canon.sinfo(p._expr.struct_info))
            holders.append(var)
            p._expr = var
        if mode == "none":
            return []
        if mode == "plain":
            return holders
        packed = rx.Var("packed_params", TupleStructInfo([v.struct_info for v in holders]))
        for i, (pname, p) in enumerate(params):
            p._expr = self.builder.emit(rx.TupleGetItem(packed, i), pname.replace(".", "_"))
        return [packed]

    def _export_method(self, name: str, mspec: _spec.MethodSpec, params, effects) -> None:
        bb = self.builder
        canon = _DimCanon()
        inputs, values = [], []
        for arg_name, arg in zip(mspec.arg_names, mspec.arg_specs):
            var, value = self._input(arg_name, arg, canon)
            inputs.append(var)
            values.append(value)
        num_effects = {"plain": len(effects), "packed": 1, "none": 0}[mspec.effect_mode]
        saved = [(p, p._expr) for _, p in params]
        try:
            with bb.function(name, attrs={"num_input": len(inputs) + num_effects}):
                with bb.dataflow():
                    effect_vars = self._effect_inputs(mspec.effect_mode, effects)
                    param_vars = self._param_inputs(mspec.param_mode, params, canon)
                    values = [self._unpack_tuple_input(var, v) for var, v in zip(inputs, values)]
                    out_expr = _to_expr(_call_method(mspec, values))
                    finals = [v for _, eff in effects for v in eff.finalize()]
                    if finals and mspec.effect_mode != "none":
                        out_expr = rx.Tuple([out_expr, rx.Tuple(finals)])
                    gv = bb.emit_output(out_expr)
                bb.emit_func_output(gv, params=inputs + effect_vars + param_vars)
            func = bb.get()[name]
            func.is_pure = not any(isinstance(b.value, rx.Call) and isinstance(b.value.op, rx.ExternFunc)
                                   for block in func.body.blocks for b in block.bindings)   # R.call_packed: impure
        finally:
            for p, expr in saved:
                p._expr = expr

    def _unpack_tuple_input(self, var: rx.Expr, value):
        if not isinstance(value, _TupleInput):
            return value
        out = []
        for i, v in enumerate(value.values):
            item = self.builder.emit(rx.TupleGetItem(var, i), f"{value.spec.name}_{i}")
            if isinstance(v, Tensor):
                out.append(Tensor(_expr=item))
            elif isinstance(v, Object):
                out.append(type(v)(_expr=item, _name=item.name_hint))
            else:
                out.append(self._unpack_tuple_input(item, v))
        return type(value.spec.elements)(out) if isinstance(value.spec.elements, (list, tuple)) else out


def _call_method(mspec: _spec.MethodSpec, values: list):
    """Call the method with the converted inputs: positionally while the spec's names follow the
    method's parameters in order, then by keyword (a spec may skip parameters that have defaults:
    ``forward(x, positions=None, attention_mask=None)`` exported with x and attention_mask)."""
    method = mspec.method
    try:
        params = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return method(*values)
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return method(*values)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    args, kwargs = [], {}
    for i, (name, value) in enumerate(zip(mspec.arg_names, values)):
        if not kwargs and i < len(positional) and positional[i] == name:
            args.append(value)
        else:
            kwargs[name] = value
    return method(*args, **kwargs)


class _TupleInput:
    """A tuple argument's converted elements, unpacked inside the function."""

    def __init__(self, spec: _spec.Tuple, values: list) -> None:
        self.spec = spec
        self.values = values


def _to_expr(output: Any) -> rx.Expr:
    if isinstance(output, (Tensor, Object)):
        return output._expr
    if isinstance(output, (list, tuple)):
        return rx.Tuple([_to_expr(o) for o in output])
    if isinstance(output, rx.Expr):
        return output
    raise TypeError(f"an exported method must return Tensors (or tuples of them), got {type(output).__name__}")
