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
from contextlib import contextmanager
from typing import Any, Callable, Iterator

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
    """Walks two objects in lockstep, mapping what they define to each other; the first difference
    raises :class:`_Mismatch`. A pairwise walk (TVM's ``SEqualReducer``), which the one-tree
    visitors of :mod:`builder.ir.functor` and :mod:`builder.ir.tir.functor` do not express."""

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

    @contextmanager
    def scope(self) -> Iterator[None]:
        """What is defined inside the ``with`` (a function's parameters, a loop or let variable, a
        block's iterators and allocations) is local to it."""
        mark = self.mark()
        yield
        self.undo(mark)

    @contextmanager
    def defining(self) -> Iterator[None]:
        """Inside the ``with``, symbolic variables define themselves where they first occur."""
        saved = self.auto_define
        self.auto_define = True
        try:
            yield
        finally:
            self.auto_define = saved

    # -- shared shapes of comparison ----------------------------------------------------------
    def pairs(self, xs, ys, path: str, what: str, field: str | None = None
              ) -> Iterator[tuple[Any, Any, str]]:
        """``(x, y, path of the pair)`` for the items of two sequences after checking that their
        lengths agree (else a mismatch at ``path``, ``what`` formatted with the two lengths). The
        items' paths are ``path[i]``, or ``path.field[i]`` when ``field`` is given."""
        if len(xs) != len(ys):
            self.fail(path, what.format(len(xs), len(ys)))
        root = path if field is None else f"{path}.{field}"
        for i, (x, y) in enumerate(zip(xs, ys)):
            yield x, y, f"{root}[{i}]"

    def same_field(self, a: Any, b: Any, path: str, name: str) -> None:
        """Field ``name`` (a kind, an index, a flag) equal on both sides."""
        x, y = getattr(a, name), getattr(b, name)
        if x != y:
            self.fail(f"{path}.{name}", f"{x} vs {y}")

    def prims(self, a: Any, b: Any, path: str, *fields: str) -> None:
        """The scalar expressions in ``fields`` of ``a`` and ``b``, in order."""
        for name in fields:
            self.prim(getattr(a, name), getattr(b, name), f"{path}.{name}")

    def min_extent(self, a: Any, b: Any, path: str) -> None:
        """The ``min`` and ``extent`` of two ranges (or loops), as sizes."""
        self.size(a.min, b.min, f"{path}.min")
        self.size(a.extent, b.extent, f"{path}.extent")

    def defines(self, a: Any, b: Any, path: str, field: str, define: Callable[[Any, Any, str], None],
                body: Callable[[Any, Any, str], None] | None = None) -> None:
        """``a`` / ``b`` define their ``field`` (a loop or let variable, an allocated buffer; compared
        by ``define``) for their ``body`` only; the bodies are compared by ``body`` (statements
        unless given)."""
        with self.scope():
            define(getattr(a, field), getattr(b, field), f"{path}.{field}")
            (body or self.stmt)(a.body, b.body, f"{path}.body")

    # -- generic dispatch -------------------------------------------------------------------
    #: (kind of object, method comparing it, whether both sides must be of the very same class),
    #: tried in order; anything else is a plain value.
    KINDS = ((rx.IRModule, "module", True), (tir.PrimFunc, "prim_func", True),
             (rx.Function, "function", True), (rx.Expr, "expr", False), (StructInfo, "sinfo", False),
             (tir.Stmt, "stmt", False), (tir.Buffer, "buffer_use", True), (E.PrimExpr, "prim", False))

    def eq(self, a: Any, b: Any, path: str) -> None:
        for kind, method, same_class in self.KINDS:
            if isinstance(a, kind) or isinstance(b, kind):
                if same_class:
                    self.check_type(a, b, path)
                return getattr(self, method)(a, b, path)
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
            for x, y, p in self.pairs(a, b, path, ""):
                self.eq(x, y, p)
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
        with self.scope(), self.defining():
            for x, y, p in self.pairs(a.params, b.params, f"{path}.params", "{} params vs {}"):
                self.var_def(x, y, p)
            self.sinfo(a.ret_struct_info, b.ret_struct_info, f"{path}.ret_struct_info")
            self.value(a.attrs, b.attrs, f"{path}.attrs")
            self.same_field(a, b, path, "is_pure")
            self.expr(a.body, b.body, f"{path}.body")

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
            for x, y, p in self.pairs(a.fields, b.fields, path, "tuple of {} vs {} fields", "fields"):
                self.expr(x, y, p)
            return
        if isinstance(a, rx.TupleGetItem):
            self.same_field(a, b, path, "index")
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
            for x, y, p in self.pairs(a.args, b.args, f"{path}.args", "{} args vs {}"):
                self.expr(x, y, p)
            self.value(a.attrs, b.attrs, f"{path}.attrs")
            for x, y, p in self.pairs(a.sinfo_args, b.sinfo_args, f"{path}.sinfo_args", "{} vs {}"):
                self.sinfo(x, y, p)
            if a.struct_info is not None and b.struct_info is not None:
                self.sinfo(a.struct_info, b.struct_info, f"{path}.struct_info")
            return
        if isinstance(a, rx.SeqExpr):
            for x, y, p in self.pairs(a.blocks, b.blocks, f"{path}.blocks", "{} blocks vs {}"):
                self.block(x, y, p)
            return self.expr(a.body, b.body, f"{path}.body")
        self.fail(path, f"cannot compare {type(a).__name__}")

    def block(self, a: rx.BindingBlock, b: rx.BindingBlock, path: str) -> None:
        if a.is_dataflow != b.is_dataflow:
            kinds = ("DataflowBlock" if a.is_dataflow else "BindingBlock",
                     "DataflowBlock" if b.is_dataflow else "BindingBlock")
            self.fail(path, f"{kinds[0]} vs {kinds[1]}")
        for x, y, p in self.pairs(a.bindings, b.bindings, f"{path}.bindings", "{} bindings vs {}"):
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
            for x, y, p in self.pairs(a.fields, b.fields, path, "tuple of {} vs {} fields", "fields"):
                self.sinfo(x, y, p)
            return
        self.fail(path, f"cannot compare struct info {type(a).__name__}")

    def dims(self, a, b, path: str) -> None:
        for x, y, p in self.pairs(a, b, path, "{} dims vs {}"):
            self.size(x, y, p)

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
            return self.prims(a, b, path, "a", "b")
        if isinstance(a, E.Not):
            return self.prims(a, b, path, "a")
        if isinstance(a, E.Select):
            return self.prims(a, b, path, "condition", "true_value", "false_value")
        if isinstance(a, E.Cast):
            return self.prims(a, b, path, "value")
        if isinstance(a, E.Let):
            self.prims(a, b, path, "value")
            return self.defines(a, b, path, "var", self.tir_var_def, self.prim)
        if isinstance(a, E.Call):
            if a.op != b.op:
                self.fail(path, f"intrinsic T.{a.op} vs T.{b.op}")
            for x, y, p in self.pairs(a.args, b.args, path, "{} args vs {}", "args"):
                self.prim(x, y, p)
            return
        if isinstance(a, tir.BufferLoad):
            self.buffer_use(a.buffer, b.buffer, f"{path}.buffer")
            return self.exprs(a.indices, b.indices, f"{path}.indices")
        if a != b:
            self.fail(path, f"`{_short(a)}` vs `{_short(b)}`")

    def exprs(self, a, b, path: str) -> None:
        for x, y, p in self.pairs(a, b, path, "{} vs {}"):
            self.prim(x, y, p)

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
        with self.scope():
            with self.defining():
                for x, y, p in self.pairs(a.params, b.params, f"{path}.params", "{} params vs {}"):
                    self.buffer_def(x, y, p)
            self.value(a.attrs, b.attrs, f"{path}.attrs")
            self.stmt(a.body, b.body, f"{path}.body")

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
            for x, y, p in self.pairs(a.seq, b.seq, path, "{} statements vs {}"):
                self.stmt(x, y, p)
            return
        if isinstance(a, tir.BufferStore):
            self.buffer_use(a.buffer, b.buffer, f"{path}.buffer")
            self.exprs(a.indices, b.indices, f"{path}.indices")
            return self.prims(a, b, path, "value")
        if isinstance(a, tir.For):
            self.same_field(a, b, path, "kind")
            self.min_extent(a, b, path)
            self.value(a.annotations, b.annotations, f"{path}.annotations")
            return self.defines(a, b, path, "loop_var", self.tir_var_def)
        if isinstance(a, tir.IfThenElse):
            self.prims(a, b, path, "condition")
            self.stmt(a.then_case, b.then_case, f"{path}.then_case")
            return self.stmt(a.else_case, b.else_case, f"{path}.else_case")
        if isinstance(a, tir.LetStmt):
            self.prims(a, b, path, "value")
            return self.defines(a, b, path, "var", self.tir_var_def)
        if isinstance(a, tir.Evaluate):
            return self.prims(a, b, path, "value")
        if isinstance(a, tir.Allocate):
            return self.defines(a, b, path, "buffer", self.buffer_def)
        if isinstance(a, tir.BlockRealize):
            self.exprs(a.iter_values, b.iter_values, f"{path}.iter_values")
            self.prims(a, b, path, "predicate")
            return self.stmt(a.block, b.block, f"{path}.block")
        if isinstance(a, tir.Block):
            return self.tir_block(a, b, path)
        self.fail(path, f"cannot compare statement {type(a).__name__}")

    def tir_var_def(self, a: E.Var, b: E.Var, path: str) -> None:
        if a.dtype != b.dtype:
            self.fail(path, f"variable '{a.name}' is {a.dtype}, '{b.name}' is {b.dtype}")
        self.bind(a, b, path)

    def tir_block(self, a: tir.Block, b: tir.Block, path: str) -> None:
        if a.name != b.name:
            self.fail(f"{path}.name", f'T.block("{a.name}") vs T.block("{b.name}")')
        with self.scope():  # iterators and allocations are local to the block
            for x, y, p in self.pairs(a.iter_vars, b.iter_vars, f"{path}.iter_vars", "{} vs {}"):
                self.same_field(x, y, p, "kind")
                self.min_extent(x.dom, y.dom, f"{p}.dom")
                self.tir_var_def(x.var, y.var, f"{p}.var")
            allocs = f"{path}.alloc_buffers"
            for x, y, p in self.pairs(a.alloc_buffers, b.alloc_buffers, allocs, "{} vs {}"):
                self.buffer_def(x, y, p)
            for field in ("reads", "writes"):
                for x, y, p in self.pairs(getattr(a, field), getattr(b, field), f"{path}.{field}",
                                          "{} regions vs {}"):
                    self.buffer_use(x.buffer, y.buffer, f"{p}.buffer")
                    for j, (u, w) in enumerate(zip(x.region, y.region)):
                        self.min_extent(u, w, f"{p}.region[{j}]")
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
