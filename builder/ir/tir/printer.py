"""TVMScript printer of loop-level IR in the style of the MLC course (TVM 0.10 era):
:func:`script`."""
from __future__ import annotations

import builtins
import dataclasses

from .. import expr as E
from ..expr import PrimExpr, Var
from ..expr_printer import format_float, fresh_name, print_prim_expr
from ..kernel import PRINT_WHEN_SET
from .nodes import (Allocate, Block, BlockRealize, Buffer, BufferRegion, BufferStore, Evaluate, For,
    IfThenElse, LetStmt, PrimFunc, SeqStmt, Stmt)


def _fmt_attr(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return format_float(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_fmt_attr(k)}: {_fmt_attr(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    if isinstance(v, PrimExpr):
        return print_prim_expr(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):   # a kernel spec (builder.ir.kernel)
        # a field marked PRINT_WHEN_SET is written only when it is not its default
        return _fmt_attr({f.name: getattr(v, f.name) for f in dataclasses.fields(v)
                          if not (f.metadata.get(PRINT_WHEN_SET) and getattr(v, f.name) == f.default)})
    return repr(v)


class _ScriptPrinter:
    """Prints statements with scoped, clash-free names (``x``, ``x_1``, ``x_2``, ...)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.in_use: set[str] = set()
        self.loop_dom: dict[int, tuple[PrimExpr, PrimExpr]] = {}

    # -- names
    def define(self, obj, base: str) -> str:
        name = fresh_name(base, self.in_use)
        self.names[id(obj)] = name
        return name

    def release(self, obj) -> None:
        name = self.names.pop(id(obj), None)
        if name is not None:
            self.in_use.discard(name)

    def name_of(self, obj) -> str:
        return self.names.get(id(obj), obj.name)

    def e(self, x: PrimExpr) -> str:
        return print_prim_expr(x, self.name_of)

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    # -- pieces
    def buffer_decl(self, b: Buffer) -> str:
        dims = [self.e(d) for d in b.shape]
        shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        return f'T.Buffer[{shape}, "{b.dtype}"]'

    def alloc(self, b: Buffer, indent: int) -> None:
        name = self.define(b, b.name)
        dims = ", ".join(self.e(d) for d in b.shape)
        self.emit(indent, f'{name} = T.alloc_buffer([{dims}], dtype="{b.dtype}")')

    def region(self, r: BufferRegion) -> str:
        parts = []
        for rng in r.region:
            if E.prove_equal(rng.extent, 1):
                parts.append(self.e(rng.min))
            else:
                parts.append(f"{self.e(rng.min)}:{self.e(E.simplify(rng.min + rng.extent))}")
        return f"{self.name_of(r.buffer)}[{', '.join(parts) or '()'}]"

    @staticmethod
    def _range_args(lo: PrimExpr, ext: PrimExpr, p) -> str:
        if E.prove_equal(lo, 0):
            return p(ext)
        return f"{p(lo)}, {p(E.simplify(lo + ext))}"

    # -- statements
    def stmt(self, s: Stmt, indent: int) -> None:
        if isinstance(s, SeqStmt):
            for c in s.seq:
                self.stmt(c, indent)
        elif isinstance(s, For):
            self.for_(s, indent)
        elif isinstance(s, BlockRealize):
            self.block_realize(s, indent)
        elif isinstance(s, BufferStore):
            idx = ", ".join(self.e(i) for i in s.indices) or "()"
            self.emit(indent, f"{self.name_of(s.buffer)}[{idx}] = {self.e(s.value)}")
        elif isinstance(s, IfThenElse):
            self.emit(indent, f"if {self.e(s.condition)}:")
            self.stmt(s.then_case, indent + 1)
            if s.else_case is not None:
                self.emit(indent, "else:")
                self.stmt(s.else_case, indent + 1)
        elif isinstance(s, LetStmt):
            name = self.define(s.var, s.var.name)
            self.emit(indent, f"{name}: T.{s.var.dtype} = {self.e(s.value)}")
            self.stmt(s.body, indent)
            self.release(s.var)
        elif isinstance(s, Evaluate):
            self.emit(indent, f"T.evaluate({self.e(s.value)})")
        elif isinstance(s, Allocate):
            self.alloc(s.buffer, indent)
            self.stmt(s.body, indent)
            self.release(s.buffer)
        elif isinstance(s, Block):
            self.block(s, None, indent)
        else:
            raise TypeError(f"cannot print statement {type(s).__name__}")

    def _grid_member(self, f: For, chain_vars: list[Var]) -> bool:
        if f.kind != "serial" or f.annotations or not E.prove_equal(f.min, 0):
            return False
        used = E.free_vars(f.extent)
        return not builtins.any(v in used for v in chain_vars)

    def for_(self, f: For, indent: int) -> None:
        chain = [f]
        if self._grid_member(f, []):
            while isinstance(chain[-1].body, For) and self._grid_member(
                    chain[-1].body, [c.loop_var for c in chain]):
                chain.append(chain[-1].body)
        if len(chain) > 1:
            names = [self.define(c.loop_var, c.loop_var.name) for c in chain]
            extents = ", ".join(self.e(c.extent) for c in chain)
            self.emit(indent, f"for {', '.join(names)} in T.grid({extents}):")
        else:
            name = self.define(f.loop_var, f.loop_var.name)
            args = self._range_args(f.min, f.extent, self.e)
            if f.annotations:
                args += f", annotations={_fmt_attr(f.annotations)}"
            self.emit(indent, f"for {name} in T.{f.kind}({args}):")
        for c in chain:
            self.loop_dom[id(c.loop_var)] = (c.min, c.extent)
        self.stmt(chain[-1].body, indent + 1)
        for c in chain:
            self.loop_dom.pop(id(c.loop_var), None)
            self.release(c.loop_var)

    def block_realize(self, r: BlockRealize, indent: int) -> None:
        b = r.block
        if b.name == "root" and not b.iter_vars and not b.reads and not b.writes:
            self.emit(indent, '# with T.block("root")')
            for buf in b.alloc_buffers:
                self.alloc(buf, indent)
            if b.init is not None:
                self.emit(indent, "with T.init():")
                self.stmt(b.init, indent + 1)
            self.stmt(b.body, indent)
            for buf in b.alloc_buffers:
                self.release(buf)
            return
        self.block(b, r, indent)

    def block(self, b: Block, r: BlockRealize | None, indent: int) -> None:
        self.emit(indent, f'with T.block("{b.name}"):')
        inner = indent + 1
        values = r.iter_values if r is not None else tuple(iv.var for iv in b.iter_vars)
        value_text = [self.e(v) for v in values]  # printed before the block vars are defined
        remap = len(b.iter_vars) > 1 and builtins.all(
            isinstance(v, Var) and id(v) in self.loop_dom
            and E.prove_equal(self.loop_dom[id(v)][0], iv.dom.min)
            and E.prove_equal(self.loop_dom[id(v)][1], iv.dom.extent)
            and E.prove_equal(iv.dom.min, 0)
            for v, iv in zip(values, b.iter_vars)
        ) and len({id(v) for v in values}) == len(values)
        names = [self.define(iv.var, iv.var.name) for iv in b.iter_vars]
        if remap:
            kinds = "".join(iv.kind for iv in b.iter_vars)
            self.emit(inner, f'{", ".join(names)} = T.axis.remap("{kinds}", [{", ".join(value_text)}])')
        else:
            for name, iv, vt in zip(names, b.iter_vars, value_text):
                kind = "spatial" if iv.kind == "S" else "reduce"
                if E.prove_equal(iv.dom.min, 0):
                    dom = self.e(iv.dom.extent)
                else:
                    dom = f"({self.e(iv.dom.min)}, {self.e(E.simplify(iv.dom.min + iv.dom.extent))})"
                self.emit(inner, f"{name} = T.axis.{kind}({dom}, {vt})")
        if r is not None and not (isinstance(r.predicate, E.IntImm) and r.predicate.value == 1):
            self.emit(inner, f"T.where({self.e(r.predicate)})")
        self.emit(inner, f"T.reads({', '.join(self.region(x) for x in b.reads)})")
        self.emit(inner, f"T.writes({', '.join(self.region(x) for x in b.writes)})")
        if b.annotations:
            self.emit(inner, f"T.block_attr({_fmt_attr(b.annotations)})")
        for buf in b.alloc_buffers:
            self.alloc(buf, inner)
        if b.init is not None:
            self.emit(inner, "with T.init():")
            self.stmt(b.init, inner + 1)
        self.stmt(b.body, inner)
        for buf in b.alloc_buffers:
            self.release(buf)
        for iv in b.iter_vars:
            self.release(iv.var)


def script(func: PrimFunc, name: str | None = None) -> str:
    """TVMScript text of ``func`` in the MLC-course style.

    Layout: ``@T.prim_func``, the ``def`` line with ``T.Buffer[(dims), "dtype"]`` annotations,
    one ``n = T.int64()`` line per symbolic var, ``T.func_attr``, ``# body``, then the body; a
    root block prints as ``# with T.block("root")`` followed by its ``T.alloc_buffer`` lines.
    Names that clash within a scope get ``_1``, ``_2`` suffixes. ``name`` overrides the ``def``
    name (default ``func.name``).
    """
    p = _ScriptPrinter()
    sym = func.sym_vars
    for v in sym:
        p.define(v, v.name)
    params = []
    for b in func.params:
        params.append(f"{p.define(b, b.name)}: {p.buffer_decl(b)}")
    p.emit(0, "@T.prim_func")
    p.emit(0, f"def {name or func.name}({', '.join(params)}) -> None:")
    for v in sym:
        p.emit(1, f"{p.name_of(v)} = T.{v.dtype}()")
    p.emit(1, "# function attr dict")
    p.emit(1, f"T.func_attr({_fmt_attr(func.attrs)})")
    p.emit(1, "# body")
    p.stmt(func.body, 1)
    return "\n".join(p.lines)
