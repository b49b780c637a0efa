"""Structural equality of IR objects, modulo variable naming (TVM's ``tvm.ir.structural_equal``).

``structural_equal(a, b)`` compares two IRModules, graph-level functions / expressions / struct
info, PrimFuncs, statements or scalar expressions field by field. Variables are compared by
their position, not their names: a graph-level ``Var``, a symbolic shape variable, a loop or
block variable, a ``LetStmt`` variable and a buffer each meet their counterpart at the place
that defines them (a parameter, a binding, a loop, a block, an allocation), and from then on
every use must meet the same counterpart (a one-to-one mapping).

* Symbolic shape variables of a graph-level function, and the symbolic variables of a
  PrimFunc's buffer shapes, are defined where they first occur inside the function.
* Variables that no compared object defines (free variables) must be the very same objects,
  unless ``map_free_vars=True``, which lets them map on first use too (TVM's semantics).
* Integer expressions that describe sizes (shape dims, loop bounds, buffer regions, iterator
  domains) also count as equal when they are provably equal after the mapping
  (``n * 2`` and ``n + n``), as shape dims do elsewhere in the IR; every other expression must
  match node for node.
* Compared too: op names, attributes (numbers by value: ``0`` equals ``0.0``, as TVM prints
  both as ``0``), constants (dtype, shape, values; NaN equals NaN), struct
  info, dtypes, block names, function attributes and purity, the kinds of variables
  (``DataflowVar`` vs ``Var``) and of loops. Not compared: names of variables and buffers.

``assert_structural_equal`` raises AssertionError naming the first differing path (e.g.
``mod["forward"].body.blocks[0].bindings[1].value.args[0]``) and the reason, followed by a
unified diff of the two printed texts.
"""
from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from . import expr as E
from . import relax as rx
from . import tir
from .struct_info import (
    ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
)

__all__ = ["structural_equal", "assert_structural_equal"]


class _Mismatch(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _name(obj: Any) -> str:
    for attr in ("name_hint", "name"):
        v = getattr(obj, attr, None)
        if isinstance(v, str):
            return v
    return type(obj).__name__


def _short(obj: Any) -> str:
    try:
        if isinstance(obj, StructInfo):
            from .printer import print_struct_info

            return print_struct_info(obj)
        if isinstance(obj, E.PrimExpr):
            return str(obj)
        if isinstance(obj, rx.Expr):
            return _print_rx(obj)
    except Exception:  # noqa: BLE001 - best effort for a message
        pass
    text = repr(obj)
    return text if len(text) <= 120 else text[:117] + "..."


def _print_rx(e: rx.Expr) -> str:
    from .printer import _FunctionPrinter

    return _FunctionPrinter(None, "f").expr(e)  # type: ignore[arg-type]


class _Comparer:
    def __init__(self, map_free_vars: bool) -> None:
        self.map_free_vars = map_free_vars
        self.l2r: dict[int, Any] = {}
        self.r2l: dict[int, Any] = {}
        self.keep: list[Any] = []  # keeps mapped objects alive so ids stay unique
        self.journal: list[tuple[int, int]] = []
        self.auto_define = False  # symbolic vars define themselves on first occurrence

    # -- variable mapping ------------------------------------------------------------------
    def fail(self, path: str, reason: str) -> None:
        raise _Mismatch(path, reason)

    def bind(self, a: Any, b: Any, path: str) -> None:
        """``a`` and ``b`` are defined here: map them to each other."""
        ma, mb = self.l2r.get(id(a)), self.r2l.get(id(b))
        if ma is b and mb is a:
            return
        if ma is not None:
            self.fail(path, f"lhs '{_name(a)}' is already mapped to rhs '{_name(ma)}', here it meets "
                            f"rhs '{_name(b)}'")
        if mb is not None:
            self.fail(path, f"rhs '{_name(b)}' is already mapped to lhs '{_name(mb)}', here it meets "
                            f"lhs '{_name(a)}'")
        self.l2r[id(a)] = b
        self.r2l[id(b)] = a
        self.keep.append((a, b))
        self.journal.append((id(a), id(b)))

    def use(self, a: Any, b: Any, path: str, definable: bool = False) -> None:
        """A use of variables ``a`` / ``b`` (bound earlier, or free)."""
        ma = self.l2r.get(id(a))
        if ma is not None:
            if ma is not b:
                self.fail(path, f"lhs '{_name(a)}' corresponds to rhs '{_name(ma)}', but here the rhs "
                                f"has '{_name(b)}'")
            return
        mb = self.r2l.get(id(b))
        if mb is not None:
            self.fail(path, f"rhs '{_name(b)}' corresponds to lhs '{_name(mb)}', but here the lhs "
                            f"has '{_name(a)}'")
        if a is b:
            return
        if definable or self.map_free_vars:
            self.bind(a, b, path)
            return
        self.fail(path, f"free variables differ: lhs '{_name(a)}' vs rhs '{_name(b)}' (neither is "
                        f"defined by the compared objects; pass map_free_vars=True to map them)")

    def mark(self) -> int:
        return len(self.journal)

    def undo(self, mark: int) -> None:
        while len(self.journal) > mark:
            ia, ib = self.journal.pop()
            self.l2r.pop(ia, None)
            self.r2l.pop(ib, None)

    # -- generic dispatch -------------------------------------------------------------------
    def eq(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, rx.IRModule) or isinstance(b, rx.IRModule):
            self.check_type(a, b, path)
            return self.module(a, b, path)
        if isinstance(a, tir.PrimFunc) or isinstance(b, tir.PrimFunc):
            self.check_type(a, b, path)
            return self.prim_func(a, b, path)
        if isinstance(a, rx.Function) or isinstance(b, rx.Function):
            self.check_type(a, b, path)
            return self.function(a, b, path)
        if isinstance(a, rx.Expr) or isinstance(b, rx.Expr):
            return self.expr(a, b, path)
        if isinstance(a, StructInfo) or isinstance(b, StructInfo):
            return self.sinfo(a, b, path)
        if isinstance(a, tir.Stmt) or isinstance(b, tir.Stmt):
            return self.stmt(a, b, path)
        if isinstance(a, tir.Buffer) or isinstance(b, tir.Buffer):
            self.check_type(a, b, path)
            return self.buffer_use(a, b, path)
        if isinstance(a, E.PrimExpr) or isinstance(b, E.PrimExpr):
            return self.prim(a, b, path)
        return self.value(a, b, path)

    def check_type(self, a: Any, b: Any, path: str) -> None:
        if type(a) is not type(b):
            self.fail(path, f"lhs is {type(a).__name__}, rhs is {type(b).__name__}")

    def value(self, a: Any, b: Any, path: str) -> None:
        """Plain values: attributes, constants, containers."""
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                self.fail(path, f"lhs is {type(a).__name__}, rhs is {type(b).__name__}")
            if a.dtype != b.dtype:
                self.fail(path, f"constant dtype {a.dtype} vs {b.dtype}")
            if a.shape != b.shape:
                self.fail(path, f"constant shape {a.shape} vs {b.shape}")
            if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
                if a.dtype.kind in "fc":
                    differs = ~((a == b) | (np.isnan(a) & np.isnan(b)))
                else:
                    differs = a != b
                idx = np.argwhere(differs)
                where = tuple(int(i) for i in idx[0]) if len(idx) else ()
                self.fail(path, f"constant values differ (first at index {where}: {a[where]!r} vs {b[where]!r})")
            return
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if len(a) != len(b):
                self.fail(path, f"length {len(a)} vs {len(b)}: {_short(a)} vs {_short(b)}")
            for i, (x, y) in enumerate(zip(a, b)):
                self.eq(x, y, f"{path}[{i}]")
            return
        if isinstance(a, dict) and isinstance(b, dict):
            if set(a) != set(b):
                only_a = sorted(map(str, set(a) - set(b)))
                only_b = sorted(map(str, set(b) - set(a)))
                self.fail(path, f"keys differ: only in lhs {only_a}, only in rhs {only_b}")
            for k in a:
                self.eq(a[k], b[k], f"{path}[{k!r}]")
            return
        if isinstance(a, bool) or isinstance(b, bool):
            if type(a) is not type(b) or a != b:
                self.fail(path, f"{a!r} vs {b!r}")
            return
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and (
                isinstance(a, float) or isinstance(b, float)):
            # attribute numbers compare by value: TVM prints the float 0.0 as `0`
            if not (a == b or (math.isnan(a) and math.isnan(b))):
                self.fail(path, f"{a!r} vs {b!r}")
            return
        if isinstance(a, (int, float, str, type(None))) and isinstance(b, (int, float, str, type(None))):
            if type(a) is not type(b) or a != b:
                self.fail(path, f"{a!r} vs {b!r}")
            return
        if type(a) is not type(b) or a != b:
            self.fail(path, f"{_short(a)} vs {_short(b)}")

    # -- modules and functions --------------------------------------------------------------
    def module(self, a: rx.IRModule, b: rx.IRModule, path: str) -> None:
        if set(a.functions) != set(b.functions):
            only_a = sorted(set(a.functions) - set(b.functions))
            only_b = sorted(set(b.functions) - set(a.functions))
            self.fail(path, f"functions differ: only in lhs {only_a}, only in rhs {only_b}")
        for name, fa in a.functions.items():
            self.eq(fa, b.functions[name], f'{path}["{name}"]')
        self.value(a.attrs, b.attrs, f"{path}.attrs")

    def function(self, a: rx.Function, b: rx.Function, path: str) -> None:
        saved = self.auto_define
        self.auto_define = True
        mark = self.mark()  # what a function defines is local to it
        try:
            if len(a.params) != len(b.params):
                self.fail(f"{path}.params", f"{len(a.params)} params vs {len(b.params)}")
            for i, (pa, pb) in enumerate(zip(a.params, b.params)):
                self.var_def(pa, pb, f"{path}.params[{i}]")
            self.sinfo(a.ret_struct_info, b.ret_struct_info, f"{path}.ret_struct_info")
            self.value(a.attrs, b.attrs, f"{path}.attrs")
            if a.is_pure != b.is_pure:
                self.fail(f"{path}.is_pure", f"{a.is_pure} vs {b.is_pure}")
            self.expr(a.body, b.body, f"{path}.body")
        finally:
            self.auto_define = saved
        self.undo(mark)

    def var_def(self, a: rx.Var, b: rx.Var, path: str) -> None:
        if type(a) is not type(b):
            self.fail(path, f"lhs '{a.name_hint}' is a {type(a).__name__}, rhs '{b.name_hint}' is a "
                            f"{type(b).__name__}")
        self.sinfo(a.struct_info, b.struct_info, f"{path}.struct_info")
        self.bind(a, b, path)

    # -- graph-level expressions ------------------------------------------------------------
    def expr(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, rx.Var) and isinstance(b, rx.Var):
            if type(a) is not type(b):
                self.fail(path, f"lhs '{a.name_hint}' is a {type(a).__name__}, rhs '{b.name_hint}' is a "
                                f"{type(b).__name__}")
            return self.use(a, b, path)
        self.check_type(a, b, path)
        if isinstance(a, rx.Function):
            return self.function(a, b, path)
        if isinstance(a, rx.Constant):
            return self.value(a.data, b.data, f"{path}.data")
        if isinstance(a, rx.Tuple):
            if len(a.fields) != len(b.fields):
                self.fail(path, f"tuple of {len(a.fields)} vs {len(b.fields)} fields")
            for i, (x, y) in enumerate(zip(a.fields, b.fields)):
                self.expr(x, y, f"{path}.fields[{i}]")
            return
        if isinstance(a, rx.TupleGetItem):
            if a.index != b.index:
                self.fail(f"{path}.index", f"{a.index} vs {b.index}")
            return self.expr(a.tuple_value, b.tuple_value, f"{path}.tuple_value")
        if isinstance(a, rx.ShapeExpr):
            return self.dims(a.values, b.values, f"{path}.values")
        if isinstance(a, rx.PrimValue):
            return self.prim(a.value, b.value, f"{path}.value")
        if isinstance(a, rx.StringImm):
            return self.value(a.value, b.value, f"{path}.value")
        if isinstance(a, rx.Op):
            if a.name != b.name:
                self.fail(path, f"op {a.name} vs {b.name}")
            return
        if isinstance(a, rx.GlobalVar):
            if a.name_hint != b.name_hint:
                self.fail(path, f"function cls.{a.name_hint} vs cls.{b.name_hint}")
            return
        if isinstance(a, rx.ExternFunc):
            return self.value(a.global_symbol, b.global_symbol, f"{path}.global_symbol")
        if isinstance(a, rx.Call):
            self.expr(a.op, b.op, f"{path}.op")
            if len(a.args) != len(b.args):
                self.fail(f"{path}.args", f"{len(a.args)} args vs {len(b.args)}")
            for i, (x, y) in enumerate(zip(a.args, b.args)):
                self.expr(x, y, f"{path}.args[{i}]")
            self.value(a.attrs, b.attrs, f"{path}.attrs")
            if len(a.sinfo_args) != len(b.sinfo_args):
                self.fail(f"{path}.sinfo_args", f"{len(a.sinfo_args)} vs {len(b.sinfo_args)}")
            for i, (x, y) in enumerate(zip(a.sinfo_args, b.sinfo_args)):
                self.sinfo(x, y, f"{path}.sinfo_args[{i}]")
            if a.struct_info is not None and b.struct_info is not None:
                self.sinfo(a.struct_info, b.struct_info, f"{path}.struct_info")
            return
        if isinstance(a, rx.SeqExpr):
            if len(a.blocks) != len(b.blocks):
                self.fail(f"{path}.blocks", f"{len(a.blocks)} blocks vs {len(b.blocks)}")
            for i, (x, y) in enumerate(zip(a.blocks, b.blocks)):
                self.block(x, y, f"{path}.blocks[{i}]")
            return self.expr(a.body, b.body, f"{path}.body")
        self.fail(path, f"cannot compare {type(a).__name__}")

    def block(self, a: rx.BindingBlock, b: rx.BindingBlock, path: str) -> None:
        if a.is_dataflow != b.is_dataflow:
            kinds = ("DataflowBlock" if a.is_dataflow else "BindingBlock",
                     "DataflowBlock" if b.is_dataflow else "BindingBlock")
            self.fail(path, f"{kinds[0]} vs {kinds[1]}")
        if len(a.bindings) != len(b.bindings):
            self.fail(f"{path}.bindings", f"{len(a.bindings)} bindings vs {len(b.bindings)}")
        for i, (x, y) in enumerate(zip(a.bindings, b.bindings)):
            p = f"{path}.bindings[{i}]"
            self.expr(x.value, y.value, f"{p}.value")
            self.var_def(x.var, y.var, f"{p}.var")

    # -- struct info --------------------------------------------------------------------------
    def sinfo(self, a: Any, b: Any, path: str) -> None:
        if a is None or b is None:
            if a is not b:
                self.fail(path, f"{_short(a)} vs {_short(b)}")
            return
        self.check_type(a, b, path)
        if isinstance(a, ObjectStructInfo):
            return
        if isinstance(a, PrimStructInfo):
            if a.dtype != b.dtype:
                self.fail(path, f"R.Prim dtype {a.dtype} vs {b.dtype}")
            return
        if isinstance(a, TensorStructInfo):
            if a.dtype != b.dtype:
                self.fail(f"{path}.dtype", f"{a.dtype} vs {b.dtype} ({_short(a)} vs {_short(b)})")
            if a.ndim != b.ndim:
                self.fail(f"{path}.ndim", f"{a.ndim} vs {b.ndim} ({_short(a)} vs {_short(b)})")
            if (a.shape is None) != (b.shape is None):
                self.fail(f"{path}.shape", f"{_short(a)} vs {_short(b)}")
            if a.shape is not None:
                self.dims(a.shape, b.shape, f"{path}.shape")
            return
        if isinstance(a, ShapeStructInfo):
            if a.ndim != b.ndim or (a.values is None) != (b.values is None):
                self.fail(path, f"{_short(a)} vs {_short(b)}")
            if a.values is not None:
                self.dims(a.values, b.values, f"{path}.values")
            return
        if isinstance(a, TupleStructInfo):
            if len(a.fields) != len(b.fields):
                self.fail(path, f"tuple of {len(a.fields)} vs {len(b.fields)} fields")
            for i, (x, y) in enumerate(zip(a.fields, b.fields)):
                self.sinfo(x, y, f"{path}.fields[{i}]")
            return
        self.fail(path, f"cannot compare struct info {type(a).__name__}")

    def dims(self, a, b, path: str) -> None:
        if len(a) != len(b):
            self.fail(path, f"{len(a)} dims vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            self.size(x, y, f"{path}[{i}]")

    def size(self, a, b, path: str) -> None:
        """A size-like integer (dim, extent, range bound): provable equality is enough."""
        if isinstance(a, int) and isinstance(b, int):
            if a != b:
                self.fail(path, f"{a} vs {b}")
            return
        ea = E.convert(a)
        eb = E.convert(b)
        mark = self.mark()
        try:
            self.prim(ea, eb, path)
            return
        except _Mismatch as exc:
            first = exc
        self.undo(mark)
        if E.is_int_dtype(ea.dtype) and E.is_int_dtype(eb.dtype):
            # map lhs vars to their rhs counterparts (defining new ones where allowed), then prove
            vmap = {}
            for v in E.free_vars(ea):
                m = self.l2r.get(id(v))
                if m is not None:
                    vmap[v] = m
            try:
                if E.prove_equal(E.substitute(ea, vmap) if vmap else ea, eb):
                    return
            except (TypeError, KeyError):
                pass
        raise first

    # -- scalar expressions -------------------------------------------------------------------
    def prim(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, E.Var) and isinstance(b, E.Var):
            if a.dtype != b.dtype:
                self.fail(path, f"variable '{a.name}' is {a.dtype}, '{b.name}' is {b.dtype}")
            return self.use(a, b, path, definable=self.auto_define)
        if not (isinstance(a, E.PrimExpr) and isinstance(b, E.PrimExpr)):
            self.fail(path, f"{_short(a)} vs {_short(b)}")
        if isinstance(a, (E.IntImm, E.FloatImm)) and isinstance(b, (E.IntImm, E.FloatImm)):
            if type(a) is not type(b) or a.dtype != b.dtype or not (
                    a.value == b.value or (isinstance(a.value, float) and math.isnan(a.value)
                                           and math.isnan(b.value))):
                self.fail(path, f"constant {_short(a)} ({a.dtype}) vs {_short(b)} ({b.dtype})")
            return
        if type(a) is not type(b):
            self.fail(path, f"{type(a).__name__} `{_short(a)}` vs {type(b).__name__} `{_short(b)}`")
        if a.dtype != b.dtype:
            self.fail(path, f"dtype {a.dtype} vs {b.dtype} (`{_short(a)}` vs `{_short(b)}`)")
        if isinstance(a, E.StringImm):
            return self.value(a.value, b.value, path)
        if isinstance(a, E.BinaryOp):
            self.prim(a.a, b.a, f"{path}.a")
            return self.prim(a.b, b.b, f"{path}.b")
        if isinstance(a, E.Not):
            return self.prim(a.a, b.a, f"{path}.a")
        if isinstance(a, E.Select):
            self.prim(a.condition, b.condition, f"{path}.condition")
            self.prim(a.true_value, b.true_value, f"{path}.true_value")
            return self.prim(a.false_value, b.false_value, f"{path}.false_value")
        if isinstance(a, E.Cast):
            return self.prim(a.value, b.value, f"{path}.value")
        if isinstance(a, E.Let):
            self.prim(a.value, b.value, f"{path}.value")
            mark = self.mark()
            self.tir_var_def(a.var, b.var, f"{path}.var")
            self.prim(a.body, b.body, f"{path}.body")
            return self.undo(mark)
        if isinstance(a, E.Call):
            if a.op != b.op:
                self.fail(path, f"intrinsic T.{a.op} vs T.{b.op}")
            if len(a.args) != len(b.args):
                self.fail(path, f"{len(a.args)} args vs {len(b.args)}")
            for i, (x, y) in enumerate(zip(a.args, b.args)):
                self.prim(x, y, f"{path}.args[{i}]")
            return
        if isinstance(a, tir.BufferLoad):
            self.buffer_use(a.buffer, b.buffer, f"{path}.buffer")
            return self.exprs(a.indices, b.indices, f"{path}.indices")
        if a != b:
            self.fail(path, f"`{_short(a)}` vs `{_short(b)}`")

    def exprs(self, a, b, path: str) -> None:
        if len(a) != len(b):
            self.fail(path, f"{len(a)} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            self.prim(x, y, f"{path}[{i}]")

    # -- loop level -----------------------------------------------------------------------------
    def buffer_def(self, a: tir.Buffer, b: tir.Buffer, path: str) -> None:
        if a.dtype != b.dtype:
            self.fail(f"{path}.dtype", f"buffer '{a.name}' is {a.dtype}, '{b.name}' is {b.dtype}")
        self.dims(a.shape, b.shape, f"{path}.shape")
        self.bind(a, b, path)

    def buffer_use(self, a: tir.Buffer, b: tir.Buffer, path: str) -> None:
        if id(a) not in self.l2r and id(b) not in self.r2l and a is not b and self.map_free_vars:
            return self.buffer_def(a, b, path)
        self.use(a, b, path)

    def prim_func(self, a: tir.PrimFunc, b: tir.PrimFunc, path: str) -> None:
        if len(a.params) != len(b.params):
            self.fail(f"{path}.params", f"{len(a.params)} params vs {len(b.params)}")
        saved = self.auto_define
        self.auto_define = True
        mark = self.mark()  # what a function defines is local to it
        try:
            for i, (x, y) in enumerate(zip(a.params, b.params)):
                self.buffer_def(x, y, f"{path}.params[{i}]")
        finally:
            self.auto_define = saved
        self.value(a.attrs, b.attrs, f"{path}.attrs")
        self.stmt(a.body, b.body, f"{path}.body")
        self.undo(mark)

    def stmt(self, a: Any, b: Any, path: str) -> None:
        if isinstance(a, tir.SeqStmt) and len(a.seq) == 1:
            a = a.seq[0]
        if isinstance(b, tir.SeqStmt) and len(b.seq) == 1:
            b = b.seq[0]
        if a is None or b is None:
            if a is not b:
                self.fail(path, f"{type(a).__name__} vs {type(b).__name__}")
            return
        self.check_type(a, b, path)
        if isinstance(a, tir.SeqStmt):
            if len(a.seq) != len(b.seq):
                self.fail(path, f"{len(a.seq)} statements vs {len(b.seq)}")
            for i, (x, y) in enumerate(zip(a.seq, b.seq)):
                self.stmt(x, y, f"{path}[{i}]")
            return
        if isinstance(a, tir.BufferStore):
            self.buffer_use(a.buffer, b.buffer, f"{path}.buffer")
            self.exprs(a.indices, b.indices, f"{path}.indices")
            return self.prim(a.value, b.value, f"{path}.value")
        if isinstance(a, tir.For):
            if a.kind != b.kind:
                self.fail(f"{path}.kind", f"{a.kind} vs {b.kind}")
            self.size(a.min, b.min, f"{path}.min")
            self.size(a.extent, b.extent, f"{path}.extent")
            self.value(a.annotations, b.annotations, f"{path}.annotations")
            mark = self.mark()  # the loop variable is defined for the body only
            self.tir_var_def(a.loop_var, b.loop_var, f"{path}.loop_var")
            self.stmt(a.body, b.body, f"{path}.body")
            return self.undo(mark)
        if isinstance(a, tir.IfThenElse):
            self.prim(a.condition, b.condition, f"{path}.condition")
            self.stmt(a.then_case, b.then_case, f"{path}.then_case")
            return self.stmt(a.else_case, b.else_case, f"{path}.else_case")
        if isinstance(a, tir.LetStmt):
            self.prim(a.value, b.value, f"{path}.value")
            mark = self.mark()
            self.tir_var_def(a.var, b.var, f"{path}.var")
            self.stmt(a.body, b.body, f"{path}.body")
            return self.undo(mark)
        if isinstance(a, tir.Evaluate):
            return self.prim(a.value, b.value, f"{path}.value")
        if isinstance(a, tir.Allocate):
            mark = self.mark()
            self.buffer_def(a.buffer, b.buffer, f"{path}.buffer")
            self.stmt(a.body, b.body, f"{path}.body")
            return self.undo(mark)
        if isinstance(a, tir.BlockRealize):
            self.exprs(a.iter_values, b.iter_values, f"{path}.iter_values")
            self.prim(a.predicate, b.predicate, f"{path}.predicate")
            return self.stmt(a.block, b.block, f"{path}.block")
        if isinstance(a, tir.Block):
            return self.tir_block(a, b, path)
        self.fail(path, f"cannot compare statement {type(a).__name__}")

    def tir_var_def(self, a: E.Var, b: E.Var, path: str) -> None:
        if a.dtype != b.dtype:
            self.fail(path, f"variable '{a.name}' is {a.dtype}, '{b.name}' is {b.dtype}")
        self.bind(a, b, path)

    def tir_block(self, a: tir.Block, b: tir.Block, path: str) -> None:
        mark = self.mark()  # iterators and allocations are local to the block
        self._tir_block(a, b, path)
        self.undo(mark)

    def _tir_block(self, a: tir.Block, b: tir.Block, path: str) -> None:
        if a.name != b.name:
            self.fail(f"{path}.name", f'T.block("{a.name}") vs T.block("{b.name}")')
        if len(a.iter_vars) != len(b.iter_vars):
            self.fail(f"{path}.iter_vars", f"{len(a.iter_vars)} vs {len(b.iter_vars)}")
        for i, (x, y) in enumerate(zip(a.iter_vars, b.iter_vars)):
            p = f"{path}.iter_vars[{i}]"
            if x.kind != y.kind:
                self.fail(f"{p}.kind", f"{x.kind} vs {y.kind}")
            self.size(x.dom.min, y.dom.min, f"{p}.dom.min")
            self.size(x.dom.extent, y.dom.extent, f"{p}.dom.extent")
            self.tir_var_def(x.var, y.var, f"{p}.var")
        if len(a.alloc_buffers) != len(b.alloc_buffers):
            self.fail(f"{path}.alloc_buffers", f"{len(a.alloc_buffers)} vs {len(b.alloc_buffers)}")
        for i, (x, y) in enumerate(zip(a.alloc_buffers, b.alloc_buffers)):
            self.buffer_def(x, y, f"{path}.alloc_buffers[{i}]")
        for field in ("reads", "writes"):
            ra, rb = getattr(a, field), getattr(b, field)
            if len(ra) != len(rb):
                self.fail(f"{path}.{field}", f"{len(ra)} regions vs {len(rb)}")
            for i, (x, y) in enumerate(zip(ra, rb)):
                p = f"{path}.{field}[{i}]"
                self.buffer_use(x.buffer, y.buffer, f"{p}.buffer")
                for j, (u, w) in enumerate(zip(x.region, y.region)):
                    self.size(u.min, w.min, f"{p}.region[{j}].min")
                    self.size(u.extent, w.extent, f"{p}.region[{j}].extent")
        self.value(a.annotations, b.annotations, f"{path}.annotations")
        self.stmt(a.init, b.init, f"{path}.init")
        self.stmt(a.body, b.body, f"{path}.body")


def _compare(lhs: Any, rhs: Any, map_free_vars: bool) -> _Mismatch | None:
    c = _Comparer(map_free_vars)
    root = "mod" if isinstance(lhs, rx.IRModule) else "root"
    try:
        c.eq(lhs, rhs, root)
    except _Mismatch as exc:
        return exc
    return None


def structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> bool:
    """True when ``lhs`` and ``rhs`` are equal up to the naming of variables (see the module
    docstring); ``map_free_vars`` also lets variables that neither side defines correspond."""
    return _compare(lhs, rhs, map_free_vars) is None


def _text(obj: Any) -> str:
    try:
        if isinstance(obj, rx.IRModule):
            return obj.script()
        if isinstance(obj, tir.PrimFunc):
            return obj.script()
        if isinstance(obj, rx.Function):
            from .printer import print_function

            return print_function(obj, obj.name or "main") + "\n"
        if isinstance(obj, (tir.Stmt, E.PrimExpr)):
            return str(obj) + "\n"
        return _short(obj) + "\n"
    except Exception as exc:  # noqa: BLE001 - the diff is a courtesy
        return f"<cannot print {type(obj).__name__}: {exc}>\n"


def assert_structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> None:
    """Raise AssertionError unless :func:`structural_equal` holds.

    The message names the first differing path and why, then shows the unified diff of the
    two printed texts (or says that they print identically).
    """
    mismatch = _compare(lhs, rhs, map_free_vars)
    if mismatch is None:
        return
    ta, tb = _text(lhs), _text(rhs)
    diff = "".join(difflib.unified_diff(ta.splitlines(keepends=True), tb.splitlines(keepends=True),
                                        "lhs", "rhs"))
    if not diff:
        diff = "(both sides print the same text; the difference is not visible in the printed form)\n"
    raise AssertionError(f"structural mismatch at {mismatch.path}: {mismatch.reason}\n{diff}")
