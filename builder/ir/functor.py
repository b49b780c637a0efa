"""Visitors and mutators of graph-level IR (TVM's ``relax.ExprVisitor`` / ``relax.ExprMutator``).

``visit_expr(e)`` dispatches to a method named after the node's class (``visit_call``,
``visit_var``, ``visit_tuple``, ``visit_function``, ...) when the subclass defines one, else visits
(or, in the mutator, rebuilds) the node's children: a tuple's fields, an item's tuple, a call's
arguments, a sequence's bindings and body, a function's body. Bindings go through
``visit_binding``; the mutator keeps each binding's variable unless the value's struct info changed.
"""
from __future__ import annotations

from . import relax as rx

__all__ = ["ExprVisitor", "ExprMutator"]

_METHODS: dict[type, str] = {}


def _method(obj) -> str:
    cls = type(obj)
    name = _METHODS.get(cls)
    if name is None:
        out = []
        for i, ch in enumerate(cls.__name__):
            if ch.isupper() and i:
                out.append("_")
            out.append(ch.lower())
        name = _METHODS[cls] = "visit_" + "".join(out)
    return name


class ExprVisitor:
    """Visits every expression of a graph-level function or module (see the module docstring)."""

    def visit_module(self, mod: rx.IRModule) -> None:
        """Visit every graph-level function of ``mod``."""
        for func in mod.functions.values():
            if isinstance(func, rx.Function):
                self.visit_expr(func)

    def visit_expr(self, e) -> None:
        """Visit ``e``: call the subclass's ``visit_<node class>`` method (``visit_call``, ``visit_var``, ...)
        when it has one, else :meth:`generic_visit`. Returns what that method returns (None by default)."""
        method = getattr(self, _method(e), None)
        if method is not None:
            return method(e)
        return self.generic_visit(e)

    def visit_binding(self, binding: rx.VarBinding) -> None:
        """Visit the value of ``binding``, then its variable."""
        self.visit_expr(binding.value)
        self.visit_expr(binding.var)

    def generic_visit(self, e) -> None:
        """Visit the children of ``e``."""
        if isinstance(e, rx.Tuple):
            for f in e.fields:
                self.visit_expr(f)
        elif isinstance(e, rx.TupleGetItem):
            self.visit_expr(e.tuple_value)
        elif isinstance(e, rx.Call):
            for a in e.args:
                self.visit_expr(a)
        elif isinstance(e, rx.SeqExpr):
            for block in e.blocks:
                for b in block.bindings:
                    self.visit_binding(b)
            self.visit_expr(e.body)
        elif isinstance(e, rx.Function):
            for p in e.params:
                self.visit_expr(p)
            self.visit_expr(e.body)


class ExprMutator:
    """Rebuilds graph-level expressions (see the module docstring). ``visit_expr`` returns the new
    expression; a node whose children did not change is returned as it is. Variables bound by a
    rewritten binding are renamed consistently through :attr:`var_map`."""

    def __init__(self) -> None:
        self.var_map: dict[rx.Var, rx.Var] = {}

    def visit_module(self, mod: rx.IRModule) -> rx.IRModule:
        """A new module with every graph-level function rewritten (loop-level functions kept)."""
        out = rx.IRModule({}, mod.attrs)
        for name, func in mod.functions.items():
            out[name] = self.visit_expr(func) if isinstance(func, rx.Function) else func
        return out

    def visit_expr(self, e):
        """The rewritten ``e``: the subclass's ``visit_<node class>`` method when it has one, else
        :meth:`generic_visit` (the node rebuilt from rewritten children; ``e`` itself when none changed)."""
        method = getattr(self, _method(e), None)
        if method is not None:
            return method(e)
        return self.generic_visit(e)

    def visit_var(self, v: rx.Var):
        """``v`` itself, or the variable that replaced it when its binding's struct info changed
        (:attr:`var_map`)."""
        return self.var_map.get(v, v)

    def visit_dataflow_var(self, v: rx.DataflowVar):
        """A dataflow variable as :meth:`visit_var`: ``v``, or its replacement from :attr:`var_map`."""
        return self.var_map.get(v, v)

    def visit_binding(self, binding: rx.VarBinding) -> rx.VarBinding:
        """The binding with its value rewritten (a new variable when the struct info changed)."""
        value = self.visit_expr(binding.value)
        var = binding.var
        if (value is not binding.value and value.struct_info is not None and var.struct_info is not None
                and not value.struct_info.same_as(var.struct_info)):
            new = type(var)(var.name_hint, value.struct_info)
            self.var_map[var] = new
            var = new
        return rx.VarBinding(var, value)

    def generic_visit(self, e):
        """``e`` rebuilt from its rewritten children."""
        if isinstance(e, rx.Tuple):
            fields = [self.visit_expr(f) for f in e.fields]
            return e if all(a is b for a, b in zip(fields, e.fields)) else rx.Tuple(fields)
        if isinstance(e, rx.TupleGetItem):
            t = self.visit_expr(e.tuple_value)
            return e if t is e.tuple_value else rx.TupleGetItem(t, e.index)
        if isinstance(e, rx.Call):
            args = [self.visit_expr(a) for a in e.args]
            if all(a is b for a, b in zip(args, e.args)):
                return e
            return rx.Call(e.op, args, e.attrs, e.sinfo_args, e.struct_info)
        if isinstance(e, rx.SeqExpr):
            blocks = [type(block)([self.visit_binding(b) for b in block.bindings]) for block in e.blocks]
            return rx.SeqExpr(blocks, self.visit_expr(e.body))
        if isinstance(e, rx.Function):
            return rx.Function(e.params, self.visit_expr(e.body), e.ret_struct_info, e.attrs, e.is_pure,
                               name=getattr(e, "name", None))
        return e
