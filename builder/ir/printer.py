"""Printers: TVMScript-style text for graph-level IRModules and loop-level PrimFuncs.

The scalar-expression printer and the name allocator (:func:`fresh_name`) shared by both levels are
:mod:`builder.ir.expr_printer` (re-exported here); the graph-level printer (``print_irmodule``) is this
module and the loop-level printer is ``builder.ir.tir``'s.
"""
from __future__ import annotations

import sys

from . import expr as E
from . import relax as rx
from .expr_printer import format_float, fresh_name, print_prim_expr
from .struct_info import (
    sym_vars, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
)
from .tir import PrimFunc

__all__ = ["print_prim_expr", "format_float", "fresh_name", "print_irmodule", "print_function", "print_struct_info",
           "show_text", "format_attr"]


def format_attr(value) -> str:
    """An op attribute as TVMScript writes it: ``None``, ``True``, ``1``, ``1.0000000000000001e-05``,
    ``"NCW"``, ``[1, 1]``. Floats as :func:`format_float` (TVM's ``%.17g``; ``inf`` / ``nan`` by name),
    strings double-quoted with ``\\`` and ``"`` escaped, lists and tuples element by element, PrimExprs as
    :func:`print_prim_expr`. Raises TypeError for a value of another type."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, E.PrimExpr):
        return print_prim_expr(value)
    raise TypeError(f"cannot print attribute value {value!r}")


PRINTER_RESERVED = frozenset({"R", "T", "I", "cls", "metadata"})
"""Names the printed text itself uses (the ``relax`` / ``tir`` / ``ir`` module aliases, ``cls.f`` for the
module's functions, ``metadata``): a variable or a symbolic dim with one of these name hints prints with a
suffix (``R_1``), as one sharing a name with another does, so that it cannot shadow them."""


class _Names:
    """Per-function name table: distinct objects that share a name, or use one of
    :data:`PRINTER_RESERVED`, get ``_1``, ``_2`` suffixes."""

    def __init__(self) -> None:
        self.by_obj: dict[int, str] = {}
        self.used: set[str] = set(PRINTER_RESERVED)

    def add(self, obj, hint: str) -> str:
        if id(obj) in self.by_obj:
            return self.by_obj[id(obj)]
        # whatever a name hint holds, the printed text is valid TVMScript
        name = fresh_name(rx.valid_name(hint), self.used)
        self.by_obj[id(obj)] = name
        return name

    def get(self, obj, hint: str) -> str:
        return self.by_obj.get(id(obj)) or self.add(obj, hint)


def _dim(d, names: _Names, quoted: bool) -> str:
    if isinstance(d, int):
        return str(d)
    text = print_prim_expr(d, lambda v: names.get(v, v.name))
    return f'"{text}"' if quoted else text


def print_struct_info(sinfo: StructInfo, names: _Names | None = None, quoted: bool = False) -> str:
    """``R.Tensor((n, 4), dtype="float32")``, ``R.Tuple(...)``, ``R.Object``, ``R.Shape([...])``.

    ``quoted`` writes symbolic dims as strings, as function signatures do.

    Raises TypeError for another kind of struct info.
    """
    names = names or _Names()
    if isinstance(sinfo, TensorStructInfo):
        if sinfo.shape is None:
            nd = f", ndim={sinfo.ndim}" if sinfo.ndim >= 0 else ""
            return f'R.Tensor(dtype="{sinfo.dtype}"{nd})'
        dims = [_dim(d, names, quoted) for d in sinfo.shape]
        shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        return f'R.Tensor({shape}, dtype="{sinfo.dtype}")'
    if isinstance(sinfo, TupleStructInfo):
        return "R.Tuple(" + ", ".join(print_struct_info(f, names, quoted) for f in sinfo.fields) + ")"
    if isinstance(sinfo, ObjectStructInfo):
        return "R.Object"
    if isinstance(sinfo, ShapeStructInfo):
        if sinfo.values is None:
            return f"R.Shape(ndim={sinfo.ndim})"
        return "R.Shape([" + ", ".join(_dim(d, names, quoted) for d in sinfo.values) + "])"
    if isinstance(sinfo, PrimStructInfo):
        return f'R.Prim("{sinfo.dtype}")'
    raise TypeError(f"cannot print struct info {sinfo!r}")


INLINE_CONSTANT_ELEMENTS = 64
"""Constants with more elements print as ``metadata["relax.expr.Constant"][i]`` (as TVM prints every
non-scalar constant) unless ``show_meta=True``: an imported model's weights would otherwise print as
millions of numbers."""

METADATA_OMITTED = "# Metadata omitted. Use show_meta=True in script() method to show it."


class _FunctionPrinter:
    def __init__(self, func: rx.Function, name: str, meta: list | None = None) -> None:
        self.func = func
        self.name = name
        self.names = _Names()
        self.meta = meta   # None: every constant inline; a list: large constants go there

    def var(self, v: rx.Var) -> str:
        return self.names.get(v, v.name_hint)

    def sinfo(self, s: StructInfo, quoted: bool = False) -> str:
        return print_struct_info(s, self.names, quoted)

    def expr(self, e: rx.Expr, top: bool = False) -> str:
        if isinstance(e, rx.Var):
            return self.var(e)
        if isinstance(e, rx.Tuple):
            inner = [self.expr(f) for f in e.fields]
            if not inner:
                return "R.tuple()"
            if top and len(inner) > 1:
                return ", ".join(inner)
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if isinstance(e, rx.TupleGetItem):
            return f"{self.expr(e.tuple_value)}[{e.index}]"
        if isinstance(e, rx.ShapeExpr):
            return "R.shape([" + ", ".join(_dim(d, self.names, False) for d in e.values) + "])"
        if isinstance(e, rx.Constant):
            vals = e.values()
            if self.meta is not None and vals.size > INLINE_CONSTANT_ELEMENTS:
                self.meta.append(e)
                return f'metadata["relax.expr.Constant"][{len(self.meta) - 1}]'
            if vals.ndim == 0:
                return f'R.const({format_attr(vals.item())}, "{e.dtype}")'
            return f'R.const({format_attr(vals.tolist())}, "{e.dtype}")'
        if isinstance(e, rx.PrimValue):
            v = e.value
            if isinstance(v, E.IntImm) and v.dtype not in ("int64", "bool"):
                return f"R.prim_value(T.{v.dtype}({v.value}))"  # keep the dtype visible
            return f"R.prim_value({print_prim_expr(v, lambda x: self.names.get(x, x.name))})"
        if isinstance(e, rx.StringImm):
            if type(e).__name__ == "DataTypeImm":  # builder.ir.op.DataTypeImm
                return f"R.dtype({format_attr(e.value)})"
            return f"R.str({format_attr(e.value)})"
        if isinstance(e, rx.GlobalVar):
            return f"cls.{e.name_hint}"
        if isinstance(e, rx.ExternFunc):
            return f'R.ExternFunc({format_attr(e.global_symbol)})'
        if isinstance(e, rx.Call):
            return self.call(e)
        raise TypeError(f"cannot print expression {type(e).__name__}")

    def call(self, c: rx.Call) -> str:
        if isinstance(c.op, rx.Op):
            name = c.op.name
            if name == "relax.call_tir":
                outs = c.sinfo_args
                out = self.sinfo(outs[0]) if len(outs) == 1 else "[" + ", ".join(self.sinfo(s) for s in outs) + "]"
                return f"R.call_tir({self.expr(c.args[0])}, {self.expr(c.args[1])}, out_sinfo={out})"
            if name == "relax.call_dps_packed":
                func = format_attr(c.args[0].global_symbol)
                out = self.sinfo(c.sinfo_args[0])
                return f"R.call_dps_packed({func}, {self.expr(c.args[1])}, out_sinfo={out})"
            if name in ("relax.call_pure_packed", "relax.call_inplace_packed"):
                parts = [format_attr(c.args[0].global_symbol)] + [self.expr(a) for a in c.args[1:]]
                parts += [f"{k}={format_attr(c.attrs[k])}" for k in c.op.attr_names if k in c.attrs]
                parts.append(f"sinfo_args=({self.sinfo(c.sinfo_args[0])},)")
                return f"R.{name[len('relax.'):]}({', '.join(parts)})"
            parts = [self.expr(a) for a in c.args]
            for i in c.op.int_args:   # TVM 0.27 prints R.triu(x, 1), not R.triu(x, R.prim_value(1))
                a = c.args[i] if i < len(c.args) else None
                if isinstance(a, rx.PrimValue) and isinstance(a.value, E.IntImm) and a.value.dtype == "int64":
                    parts[i] = str(a.value.value)
            keys = list(c.op.attr_names) + [k for k in c.attrs if k not in c.op.attr_names]
            parts += [f"{k}={format_attr(c.attrs[k])}" for k in keys if k in c.attrs]
            return f"R.{name[len('relax.'):]}({', '.join(parts)})"
        if isinstance(c.op, rx.ExternFunc):
            parts = [format_attr(c.op.global_symbol)] + [self.expr(a) for a in c.args]
            if c.sinfo_args:
                parts.append("sinfo_args=" + self.sinfo(c.sinfo_args[0]))
            return f"R.call_packed({', '.join(parts)})"
        parts = [self.expr(a) for a in c.args]
        return f"{self.expr(c.op)}({', '.join(parts)})"

    def lines(self) -> list[str]:
        f = self.func
        for p in f.params:
            self.names.add(p, p.name_hint)
        syms: list = []
        for p in f.params:
            sym_vars(p.struct_info, syms)
        sym_vars(f.ret_struct_info, syms)
        # dims first bound in the body, from a builtin's result (vm.builtin.kv_cache_append's pools): declared
        # at the top as TVM does (``num_blocks = T.int64()``), so that the text parses back
        for block in f.body.blocks:
            for b in block.bindings:
                if isinstance(b.value, rx.Call) and isinstance(b.value.op, rx.ExternFunc):
                    sym_vars(b.var.struct_info, syms)
        for v in syms:
            self.names.add(v, v.name)
        params = ", ".join(f"{self.var(p)}: {self.sinfo(p.struct_info, quoted=True)}" for p in f.params)
        out = ["@R.function"]
        if not f.is_pure:
            out = ["@R.function(pure=False)"]
        out.append(f"def {self.name}({params}) -> {self.sinfo(f.ret_struct_info, quoted=True)}:")
        body = [f"{self.names.get(v, v.name)} = T.int64()" for v in syms]
        if f.attrs:
            items = ", ".join(f'"{k}": {format_attr(v)}' for k, v in f.attrs.items())
            body.append(f"R.func_attr({{{items}}})")
        for block in f.body.blocks:
            if block.is_dataflow:
                body.append("with R.dataflow():")
                outputs = []
                for b in block.bindings:
                    body.append("    " + self.binding(b))
                    if not isinstance(b.var, rx.DataflowVar):
                        outputs.append(self.var(b.var))
                body.append(f"    R.output({', '.join(outputs)})")
            else:
                body.extend(self.binding(b) for b in block.bindings)
        body.append(f"return {self.expr(f.body.body, top=True)}")
        return out + ["    " + line for line in body]

    def binding(self, b: rx.VarBinding) -> str:
        name = self.names.add(b.var, b.var.name_hint)
        return f"{name}: {self.sinfo(b.var.struct_info)} = {self.expr(b.value, top=True)}"


def print_function(func: rx.Function, name: str = "main", meta: list | None = None) -> str:
    """One graph-level function as TVMScript (without the module header). With a ``meta`` list,
    constants of more than :data:`INLINE_CONSTANT_ELEMENTS` elements are appended to it and print as
    ``metadata["relax.expr.Constant"][i]``; without, every constant prints inline."""
    return "\n".join(_FunctionPrinter(func, name, meta).lines())


def _uses_tir(mod: rx.IRModule) -> bool:
    for func in mod.functions.values():
        if not isinstance(func, rx.Function):
            return True
        syms: list = []
        for p in func.params:
            sym_vars(p.struct_info, syms)
        if syms:
            return True
    return False


def print_irmodule(mod: rx.IRModule, show_meta: bool = False) -> str:
    """A whole module in the seed's TVMScript style (``@I.ir_module class Module:``).

    The ``tir as T`` import line is present only when the module uses symbolic shape variables
    or contains PrimFuncs; functions print in insertion order, separated by a blank line. Constants of
    more than :data:`INLINE_CONSTANT_ELEMENTS` elements print as ``metadata[...]`` references followed
    by TVM's "Metadata omitted" line, unless ``show_meta`` (then the text parses back).
    """
    lines = ["# from tvm.script import ir as I"]
    if _uses_tir(mod):
        lines.append("# from tvm.script import tir as T")
    lines += ["# from tvm.script import relax as R", "", "@I.ir_module", "class Module:"]
    chunks = []
    meta: list | None = None if show_meta else []
    for name, func in mod.functions.items():
        if isinstance(func, rx.Function):
            text = print_function(func, name, meta)
        elif isinstance(func, PrimFunc):
            text = func.script(name=name)  # the def line names the module's key
        else:
            text = func.script() if hasattr(func, "script") else str(func)
        chunks.append("\n".join("    " + ln if ln else "" for ln in text.split("\n")))
    lines.append("\n\n".join(chunks))
    if meta:
        lines += ["", METADATA_OMITTED]
    return "\n".join(lines) + "\n"


def show_text(text: str, plain: bool | None = None, file=None) -> None:
    """Write TVMScript ``text``: rich syntax highlighting on a terminal, plain text otherwise."""
    file = file or sys.stdout
    if plain is None:
        plain = not (hasattr(file, "isatty") and file.isatty())
    if plain:
        file.write(text if text.endswith("\n") else text + "\n")
        return
    from rich.console import Console
    from rich.syntax import Syntax

    Console(file=file).print(Syntax(text.rstrip("\n"), "python", theme="monokai", word_wrap=False))
