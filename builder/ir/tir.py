"""Loop-level IR, modelled on TVM TensorIR (``tvm.tir``).

A :class:`PrimFunc` takes buffer parameters in destination-passing style (inputs first, then
outputs) and has a statement body built from:

* :class:`BufferStore` ``A[i, j] = value``, :class:`Evaluate`, :class:`LetStmt`,
* :class:`For` loops (``serial`` / ``parallel`` / ``vectorized`` / ``unroll``),
* :class:`SeqStmt`, :class:`IfThenElse`,
* :class:`BlockRealize` / :class:`Block` (TensorIR's unit of computation: iterator variables with
  a domain and a kind, ``S`` spatial or ``R`` reduce, read / write regions, an optional
  ``init`` statement that runs before the first reduction step, and ``alloc_buffers``),
* :class:`Allocate` (a scoped intermediate buffer; appears after lowering blocks away).

Expressions are the scalar :mod:`builder.ir.expr` nodes plus :class:`BufferLoad`.
:meth:`PrimFunc.script` prints TVMScript in the style of the MLC course (TVM 0.10 era), and
:func:`verify` checks well-formedness. The intrinsic helpers at the end (``exp``, ``tanh``,
``if_then_else``, ``max_value``, ...) build :class:`~builder.ir.expr.Call` nodes with the op
names the code generator understands (:data:`INTRINSICS`).
"""
from __future__ import annotations

import builtins
from typing import Callable, Iterable, Sequence

from . import expr as E
from .expr import PrimExpr, Var
from .printer import format_float, print_prim_expr

__all__ = [
    "Range", "Buffer", "BufferLoad", "BufferRegion", "IterVar", "Stmt", "BufferStore", "For",
    "SeqStmt", "IfThenElse", "LetStmt", "Evaluate", "Block", "BlockRealize", "Allocate",
    "PrimFunc", "VerifyError", "verify", "script", "FOR_KINDS", "INTRINSICS",
    "expr_children", "post_order_visit", "stmt_children", "walk_stmt", "buffer_loads",
    "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs",
    "floor", "ceil", "round", "trunc", "power", "sin", "cos", "if_then_else", "equal",
    "not_equal", "maximum",
    "minimum", "max_value", "min_value", "all", "any",
]

FOR_KINDS = ("serial", "parallel", "vectorized", "unroll")

#: Call ops the code generator lowers, with their arity.
INTRINSICS = {
    "exp": 1, "exp2": 1, "log": 1, "log2": 1, "log10": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1,
    "sigmoid": 1, "erf": 1, "fabs": 1, "floor": 1, "ceil": 1, "round": 1, "trunc": 1,
    "pow": 2, "sin": 1, "cos": 1, "if_then_else": 3,
}


def _to_index(x) -> PrimExpr:
    """An index / extent as an int64 PrimExpr (Python ints become ``IntImm`` int64)."""
    e = E.convert(x)
    if not E.is_int_dtype(e.dtype) or e.dtype == "bool":
        raise TypeError(f"index or extent must be an integer expression, got {e} ({e.dtype})")
    return e


class Range:
    """A half-open integer range given by ``min`` and ``extent`` (TVM's ``Range.from_min_extent``)."""

    __slots__ = ("min", "extent")

    def __init__(self, min, extent) -> None:  # noqa: A002 - TVM's field names
        self.min = _to_index(min)
        self.extent = _to_index(extent)

    @staticmethod
    def from_min_extent(min, extent) -> "Range":  # noqa: A002
        """Same as ``Range(min, extent)``."""
        return Range(min, extent)

    @staticmethod
    def convert(dom) -> "Range":
        """Accept a ``Range``, a ``(min, extent)`` pair or a single extent."""
        if isinstance(dom, Range):
            return dom
        if isinstance(dom, (tuple, list)):
            if len(dom) != 2:
                raise ValueError(f"a range needs (min, extent), got {dom!r}")
            return Range(dom[0], dom[1])
        return Range(0, dom)

    def __repr__(self) -> str:
        return f"Range(min={self.min}, extent={self.extent})"


# ---------------------------------------------------------------------------------------------
# buffers and loads


class Buffer:
    """A row-major, contiguous n-d array of ``dtype`` elements (TVM's ``tir.Buffer``).

    ``shape`` entries are ints or int ``PrimExpr`` (symbolic dims are :class:`Var`); they are stored
    as PrimExprs. Buffers compare by identity. ``buf[i, j]`` builds a :class:`BufferLoad`.
    Raises TypeError for a non-integer dim.
    """

    def __init__(self, name: str, shape: Sequence, dtype: str = "float32") -> None:
        self.name = name
        self.shape = tuple(_to_index(d) for d in shape)
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __getitem__(self, indices) -> "BufferLoad":
        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, indices)

    def vload(self, indices) -> "BufferLoad":
        """TVM's spelling of ``buf[indices]``."""
        return self[tuple(indices)]

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"Buffer({self.name}, ({dims}), {self.dtype})"


class BufferLoad(PrimExpr):
    """``buffer[indices]`` as a scalar expression of the buffer's dtype.

    Raises ValueError when the number of indices differs from ``buffer.ndim``.
    """

    __slots__ = ("buffer", "indices")

    def __init__(self, buffer: Buffer, indices: Iterable) -> None:
        self.buffer = buffer
        self.indices = tuple(_to_index(i) for i in indices)
        if len(self.indices) != buffer.ndim:
            raise ValueError(
                f"buffer '{buffer.name}' has {buffer.ndim} dims but is indexed with "
                f"{len(self.indices)} indices"
            )
        self.dtype = buffer.dtype

    def _key(self) -> tuple:
        return (id(self.buffer), self.indices)

    def children(self) -> tuple[PrimExpr, ...]:
        """The index expressions (hook for :func:`builder.ir.expr.free_vars`)."""
        return self.indices

    def substitute(self, vmap: dict) -> "BufferLoad":
        """Substitute variables inside the indices (hook for :func:`builder.ir.expr.substitute`)."""
        return type(self)(self.buffer, [E.substitute(i, vmap) for i in self.indices])

    def _print(self, name_of, recurse) -> str:
        return f"{name_of(self.buffer)}[{', '.join(recurse(i) for i in self.indices) or '()'}]"


class BufferRegion:
    """A rectangular region of a buffer: one :class:`Range` per dim (``T.reads`` / ``T.writes``)."""

    __slots__ = ("buffer", "region")

    def __init__(self, buffer: Buffer, region: Sequence) -> None:
        self.buffer = buffer
        self.region = tuple(Range.convert(r) for r in region)
        if len(self.region) != buffer.ndim:
            raise ValueError(f"region of '{buffer.name}' needs {buffer.ndim} ranges")

    @staticmethod
    def point(buffer: Buffer, indices: Sequence) -> "BufferRegion":
        """The single element ``buffer[indices]``."""
        return BufferRegion(buffer, [Range(i, 1) for i in indices])

    @staticmethod
    def full(buffer: Buffer) -> "BufferRegion":
        """The whole buffer."""
        return BufferRegion(buffer, [Range(0, d) for d in buffer.shape])


class IterVar:
    """An iteration variable with a domain and a kind (TVM's ``tir.IterVar``).

    ``kind`` is ``"S"`` (spatial / data parallel) or ``"R"`` (commutative reduction). An IterVar
    stands for its ``var`` in expressions: ``A[i, k]`` and ``k * 2`` work directly.
    """

    __slots__ = ("var", "dom", "kind")

    def __init__(self, var: Var, dom, kind: str = "S") -> None:
        if kind not in ("S", "R"):
            raise ValueError(f"IterVar kind must be 'S' or 'R', got {kind!r}")
        self.var = var
        self.dom = Range.convert(dom)
        self.kind = kind

    def as_prim_expr(self) -> Var:
        """The variable (hook for :func:`builder.ir.expr.convert`)."""
        return self.var

    @property
    def name(self) -> str:
        """The variable's name."""
        return self.var.name

    def __repr__(self) -> str:
        return f"IterVar({self.var.name}, {self.dom!r}, {self.kind})"


def _delegate(op: str):
    def method(self, *args):
        return getattr(self.var, op)(*args)

    method.__name__ = op
    return method


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
            "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__",
            "__lt__", "__le__", "__gt__", "__ge__", "astype"):
    setattr(IterVar, _op, _delegate(_op))


# ---------------------------------------------------------------------------------------------
# statements


class Stmt:
    """Base class of statements. ``str(stmt)`` prints it as TVMScript."""

    __slots__ = ()

    def __str__(self) -> str:
        printer = _ScriptPrinter()
        printer.stmt(self, 0)
        return "\n".join(printer.lines)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(\n{self!s}\n)"


class BufferStore(Stmt):
    """``buffer[indices] = value``."""

    __slots__ = ("buffer", "value", "indices")

    def __init__(self, buffer: Buffer, value, indices: Iterable) -> None:
        self.buffer = buffer
        self.value = E.convert(value, buffer.dtype)
        self.indices = tuple(_to_index(i) for i in indices)
        if len(self.indices) != buffer.ndim:
            raise ValueError(
                f"buffer '{buffer.name}' has {buffer.ndim} dims but the store has "
                f"{len(self.indices)} indices"
            )


class For(Stmt):
    """``for loop_var in range(min, min + extent)`` of a given ``kind`` (see :data:`FOR_KINDS`).

    ``annotations`` is a free-form dict kept for schedule hints. Raises ValueError for an
    unknown kind.
    """

    __slots__ = ("loop_var", "min", "extent", "kind", "body", "annotations")

    def __init__(self, loop_var: Var, min, extent, kind: str, body: Stmt,  # noqa: A002
                 annotations: dict | None = None) -> None:
        if kind not in FOR_KINDS:
            raise ValueError(f"unknown loop kind {kind!r}; expected one of {FOR_KINDS}")
        self.loop_var = loop_var
        self.min = _to_index(min)
        self.extent = _to_index(extent)
        self.kind = kind
        self.body = body
        self.annotations = dict(annotations or {})


class SeqStmt(Stmt):
    """Statements executed in order; nested ``SeqStmt``\\ s are flattened."""

    __slots__ = ("seq",)

    def __init__(self, seq: Iterable[Stmt]) -> None:
        flat: list[Stmt] = []
        for s in seq:
            if isinstance(s, SeqStmt):
                flat.extend(s.seq)
            elif s is not None:
                flat.append(s)
        self.seq = tuple(flat)

    @staticmethod
    def flatten(stmts: Sequence[Stmt]) -> Stmt:
        """One statement for ``stmts``: the statement itself when there is one."""
        seq = SeqStmt(stmts)
        return seq.seq[0] if len(seq.seq) == 1 else seq


class IfThenElse(Stmt):
    """``if condition: then_case else: else_case`` (``else_case`` may be None)."""

    __slots__ = ("condition", "then_case", "else_case")

    def __init__(self, condition, then_case: Stmt, else_case: Stmt | None = None) -> None:
        self.condition = E.convert(condition)
        self.then_case = then_case
        self.else_case = else_case


class LetStmt(Stmt):
    """Bind ``var = value`` for the scope of ``body``."""

    __slots__ = ("var", "value", "body")

    def __init__(self, var: Var, value, body: Stmt) -> None:
        self.var = var
        self.value = E.convert(value, var.dtype)
        self.body = body


class Evaluate(Stmt):
    """Evaluate an expression for its side effects (``T.evaluate``)."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = E.convert(value)


class Allocate(Stmt):
    """A scoped intermediate ``buffer`` live for ``body`` (lowered form of ``alloc_buffers``)."""

    __slots__ = ("buffer", "body")

    def __init__(self, buffer: Buffer, body: Stmt) -> None:
        self.buffer = buffer
        self.body = body


class Block(Stmt):
    """A TensorIR block: ``iter_vars`` with domains and kinds, read / write regions, a body,
    an optional ``init`` (runs once before the first reduction step) and ``alloc_buffers``
    (intermediates live for the block). Only appears inside a :class:`BlockRealize`.
    """

    __slots__ = ("name", "iter_vars", "reads", "writes", "body", "init", "alloc_buffers",
                 "annotations")

    def __init__(self, name: str, iter_vars: Sequence[IterVar], reads: Sequence[BufferRegion],
                 writes: Sequence[BufferRegion], body: Stmt, init: Stmt | None = None,
                 alloc_buffers: Sequence[Buffer] = (), annotations: dict | None = None) -> None:
        self.name = name
        self.iter_vars = tuple(iter_vars)
        self.reads = tuple(reads)
        self.writes = tuple(writes)
        self.body = body
        self.init = init
        self.alloc_buffers = tuple(alloc_buffers)
        self.annotations = dict(annotations or {})


class BlockRealize(Stmt):
    """Executes ``block`` with its iter vars bound to ``iter_values`` when ``predicate`` holds.

    Raises ValueError when the number of values differs from the number of iter vars.
    """

    __slots__ = ("iter_values", "predicate", "block")

    def __init__(self, iter_values: Sequence, predicate, block: Block) -> None:
        self.iter_values = tuple(_to_index(v) for v in iter_values)
        self.predicate = E.convert(predicate)
        self.block = block
        if len(self.iter_values) != len(block.iter_vars):
            raise ValueError(
                f"block '{block.name}' has {len(block.iter_vars)} iter vars but "
                f"{len(self.iter_values)} bindings"
            )


# ---------------------------------------------------------------------------------------------
# traversal helpers


def expr_children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """The direct sub-expressions of ``e`` (loads included)."""
    return E._children(e)


def post_order_visit(e: PrimExpr, fvisit: Callable[[PrimExpr], None]) -> None:
    """Call ``fvisit`` on every node of ``e``, children first."""
    for c in expr_children(e):
        post_order_visit(c, fvisit)
    fvisit(e)


def buffer_loads(e: PrimExpr) -> list[BufferLoad]:
    """All loads in ``e`` in pre-order (outer load before loads inside its indices)."""
    out: list[BufferLoad] = []

    def visit(x: PrimExpr) -> None:
        if isinstance(x, BufferLoad):
            out.append(x)
        for c in expr_children(x):
            visit(c)

    visit(e)
    return out


def stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    """The direct sub-statements of ``s``."""
    if isinstance(s, SeqStmt):
        return s.seq
    if isinstance(s, (For, LetStmt, Allocate)):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then_case,) if s.else_case is None else (s.then_case, s.else_case)
    if isinstance(s, BlockRealize):
        return (s.block,)
    if isinstance(s, Block):
        return (s.body,) if s.init is None else (s.init, s.body)
    return ()


def walk_stmt(s: Stmt, fvisit: Callable[[Stmt], None]) -> None:
    """Call ``fvisit`` on ``s`` and every nested statement, parents first."""
    fvisit(s)
    for c in stmt_children(s):
        walk_stmt(c, fvisit)


# ---------------------------------------------------------------------------------------------
# PrimFunc


class PrimFunc:
    """A loop-level function: buffer ``params`` (inputs then outputs), a ``body``, ``attrs``
    (``global_symbol``, ``tir.noalias``, ...) and a ``name``.

    ``sym_vars`` are the free variables of the parameter shapes in order of first appearance;
    the caller binds them from the shapes of the arrays it passes.
    """

    def __init__(self, params: Sequence[Buffer], body: Stmt, attrs: dict | None = None,
                 name: str = "main") -> None:
        self.params = tuple(params)
        self.body = body
        self.name = name
        self.attrs = dict(attrs) if attrs is not None else {
            "global_symbol": name, "tir.noalias": True}
        for p in self.params:
            if not isinstance(p, Buffer):
                raise TypeError(f"PrimFunc '{name}' params must be Buffers, got {type(p).__name__}")

    @property
    def sym_vars(self) -> list[Var]:
        """Symbolic shape variables of the params, in order of first appearance."""
        out: list[Var] = []
        for p in self.params:
            for d in p.shape:
                for v in E.free_vars(d):
                    if v not in out:
                        out.append(v)
        return out

    def with_body(self, body: Stmt, name: str | None = None) -> "PrimFunc":
        """A copy with another body (and optionally another name)."""
        return PrimFunc(self.params, body, self.attrs, name or self.name)

    def with_attr(self, key: str, value) -> "PrimFunc":
        """A copy with ``attrs[key] = value``."""
        return PrimFunc(self.params, self.body, {**self.attrs, key: value}, self.name)

    def script(self, name: str | None = None, in_module: bool = False) -> str:
        """TVMScript text of the function (see :func:`script`); ``name`` overrides the ``def``
        name (an IRModule prints its global var name). ``in_module`` is accepted for the module
        printer; the MLC-era layout is the same inside and outside a module."""
        return script(self, name)

    def show(self) -> None:
        """Print :meth:`script`."""
        print(self.script())

    def __str__(self) -> str:
        return self.script()

    def __repr__(self) -> str:
        return f"PrimFunc({self.name}, params=[{', '.join(p.name for p in self.params)}])"


# ---------------------------------------------------------------------------------------------
# TVMScript printer


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
        name, k = base, 0
        while name in self.in_use:
            k += 1
            name = f"{base}_{k}"
        self.in_use.add(name)
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


# ---------------------------------------------------------------------------------------------
# verification


class VerifyError(ValueError):
    """Raised by :func:`verify`; the message names the function and each offending statement."""


def verify(func: PrimFunc) -> None:
    """Check that ``func`` is well formed; raise :class:`VerifyError` listing every problem.

    Checks: every buffer used (loaded, stored, in a read / write region) is a param or allocated
    in an enclosing block / ``Allocate``; every variable is bound (symbolic shape vars, enclosing
    loops, ``LetStmt``\\ s, the block's own iter vars — a block body may not use outer loop vars
    directly, as in TensorIR); the index count matches each buffer's rank and indices are
    integers; a store's value dtype equals the buffer dtype; conditions are ``bool``; loop kinds
    and iter-var bindings are valid.
    """
    errors: list[str] = []
    sym = set(func.sym_vars)

    def where(s: Stmt) -> str:
        text = str(s).strip().splitlines()
        head = text[0] if text else type(s).__name__
        return head if len(head) <= 160 else head[:157] + "..."

    def check_expr(e: PrimExpr, vars_: set, bufs: set, s: Stmt) -> None:
        def visit(x: PrimExpr) -> None:
            if isinstance(x, E.Let):
                visit(x.value)
                check_expr(x.body, vars_ | {x.var}, bufs, s)
                return
            if isinstance(x, Var):
                if x not in vars_ and x not in sym:
                    errors.append(f"variable '{x.name}' is not bound, in `{where(s)}`")
            elif isinstance(x, BufferLoad):
                check_access(x.buffer, x.indices, bufs, s)
            elif isinstance(x, E.Call) and x.op in INTRINSICS and len(x.args) != INTRINSICS[x.op]:
                errors.append(f"intrinsic '{x.op}' takes {INTRINSICS[x.op]} args, in `{where(s)}`")
            for c in expr_children(x):
                visit(c)

        visit(e)

    def check_access(buf: Buffer, indices, bufs: set, s: Stmt) -> None:
        if id(buf) not in bufs:
            errors.append(f"buffer '{buf.name}' is neither a param nor allocated, in `{where(s)}`")
        if len(indices) != buf.ndim:
            errors.append(f"buffer '{buf.name}' has {buf.ndim} dims but {len(indices)} indices "
                          f"are used, in `{where(s)}`")
        for i in indices:
            if not E.is_int_dtype(i.dtype) or i.dtype == "bool":
                errors.append(f"index {i} of '{buf.name}' is {i.dtype}, not an integer, "
                              f"in `{where(s)}`")

    def check_region(r: BufferRegion, vars_: set, bufs: set, s: Stmt) -> None:
        if id(r.buffer) not in bufs:
            errors.append(f"region buffer '{r.buffer.name}' is neither a param nor allocated, "
                          f"in `{where(s)}`")
        for rng in r.region:
            check_expr(rng.min, vars_, bufs, s)
            check_expr(rng.extent, vars_, bufs, s)

    def check_cond(c: PrimExpr, s: Stmt) -> None:
        if c.dtype != "bool":
            errors.append(f"condition {c} has dtype {c.dtype}, expected bool, in `{where(s)}`")

    def visit(s: Stmt, vars_: set, bufs: set) -> None:
        if isinstance(s, SeqStmt):
            for c in s.seq:
                visit(c, vars_, bufs)
        elif isinstance(s, BufferStore):
            check_access(s.buffer, s.indices, bufs, s)
            for i in s.indices:
                check_expr(i, vars_, bufs, s)
            check_expr(s.value, vars_, bufs, s)
            if s.value.dtype != s.buffer.dtype:
                errors.append(f"store of a {s.value.dtype} value into {s.buffer.dtype} buffer "
                              f"'{s.buffer.name}', in `{where(s)}`")
        elif isinstance(s, For):
            check_expr(s.min, vars_, bufs, s)
            check_expr(s.extent, vars_, bufs, s)
            if not E.is_int_dtype(s.loop_var.dtype):
                errors.append(f"loop variable '{s.loop_var.name}' is {s.loop_var.dtype}, "
                              f"in `{where(s)}`")
            if s.loop_var in vars_ or s.loop_var in sym:
                errors.append(f"loop variable '{s.loop_var.name}' is bound twice, in `{where(s)}`")
            visit(s.body, vars_ | {s.loop_var}, bufs)
        elif isinstance(s, IfThenElse):
            check_expr(s.condition, vars_, bufs, s)
            check_cond(s.condition, s)
            visit(s.then_case, vars_, bufs)
            if s.else_case is not None:
                visit(s.else_case, vars_, bufs)
        elif isinstance(s, LetStmt):
            check_expr(s.value, vars_, bufs, s)
            if s.value.dtype != s.var.dtype:
                errors.append(f"let '{s.var.name}' of dtype {s.var.dtype} bound to a "
                              f"{s.value.dtype} value, in `{where(s)}`")
            visit(s.body, vars_ | {s.var}, bufs)
        elif isinstance(s, Evaluate):
            check_expr(s.value, vars_, bufs, s)
        elif isinstance(s, Allocate):
            for d in s.buffer.shape:
                check_expr(d, vars_, bufs, s)
            visit(s.body, vars_, bufs | {id(s.buffer)})
        elif isinstance(s, BlockRealize):
            for v in s.iter_values:
                check_expr(v, vars_, bufs, s)
            check_expr(s.predicate, vars_, bufs, s)
            check_cond(s.predicate, s)
            b = s.block
            inner_vars = {iv.var for iv in b.iter_vars}
            for iv in b.iter_vars:
                check_expr(iv.dom.min, vars_, bufs, s)
                check_expr(iv.dom.extent, vars_, bufs, s)
            inner_bufs = bufs | {id(a) for a in b.alloc_buffers}
            for r in b.reads + b.writes:
                check_region(r, inner_vars, inner_bufs, s)
            if b.init is not None:
                if not builtins.any(iv.kind == "R" for iv in b.iter_vars):
                    errors.append(f"block '{b.name}' has an init but no reduction iter var")
                visit(b.init, inner_vars, inner_bufs)
            visit(b.body, inner_vars, inner_bufs)
        elif isinstance(s, Block):
            errors.append(f"block '{s.name}' is not wrapped in a BlockRealize")
        else:
            errors.append(f"unknown statement {type(s).__name__}")

    visit(func.body, set(), {id(p) for p in func.params})
    for p in func.params:
        for d in p.shape:
            if not E.is_int_dtype(d.dtype):
                errors.append(f"param '{p.name}' has a non-integer dim {d}")
    if errors:
        raise VerifyError(f"PrimFunc '{func.name}' is ill-formed:\n  " + "\n  ".join(errors))


# ---------------------------------------------------------------------------------------------
# intrinsics (tvm.tir.exp etc.)


def _float_arg(op: str, x) -> PrimExpr:
    e = E.convert(x)
    if not E.is_float_dtype(e.dtype):
        raise TypeError(f"{op} expects a floating-point operand, got {e} of dtype {e.dtype}")
    return e


def _unary(op: str, name: str | None = None):
    def f(x) -> PrimExpr:
        e = _float_arg(name or op, x)
        return E.Call(e.dtype, op, [e])

    f.__name__ = name or op
    f.__doc__ = (f"``T.{op}(x)`` for a float ``x`` (same dtype as ``x``). "
                 "Raises TypeError for an integer operand.")
    return f


exp = _unary("exp")
exp2 = _unary("exp2")
log = _unary("log")
log2 = _unary("log2")
log10 = _unary("log10")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001 - TVM's name
trunc = _unary("trunc")
sin = _unary("sin")
cos = _unary("cos")


def abs(x) -> PrimExpr:  # noqa: A001 - TVM's name
    """Absolute value: ``T.fabs(x)`` for floats, ``T.Select(x >= 0, x, -x)`` for signed ints,
    ``x`` itself for unsigned ints and bools."""
    e = E.convert(x)
    if E.is_float_dtype(e.dtype):
        return E.Call(e.dtype, "fabs", [e])
    if e.dtype.startswith("uint") or e.dtype == "bool":
        return e
    if isinstance(e, E.IntImm):
        return E.IntImm(builtins.abs(e.value), e.dtype)
    return E.Select(e >= 0, e, -e)


def power(x, y) -> PrimExpr:
    """``T.pow(x, y)`` for floats (``y`` converted to ``x``'s dtype). Raises TypeError for ints."""
    a = _float_arg("power", x)
    b = E.convert(y, a.dtype)
    if b.dtype != a.dtype:
        b = b.astype(a.dtype)
    return E.Call(a.dtype, "pow", [a, b])


def if_then_else(cond, t, f) -> PrimExpr:
    """``T.if_then_else(cond, t, f)``: only the chosen branch is evaluated, so ``t`` may read out of
    bounds when ``cond`` is false (padding). The branches are converted to a common dtype.
    Raises TypeError when ``cond`` is not a bool expression."""
    if isinstance(cond, bool):
        raise TypeError(
            "if_then_else got a Python bool as condition; `a == b` on expressions compares them "
            "structurally, so build the comparison with tir.equal(a, b) / tir.not_equal(a, b)")
    c = E.convert(cond)
    if c.dtype != "bool":
        raise TypeError(f"if_then_else condition must be bool, got {c} ({c.dtype})")
    if isinstance(c, E.IntImm):
        return E.convert(t) if c.value else E.convert(f)
    if isinstance(t, PrimExpr) or not isinstance(f, PrimExpr):
        a = E.convert(t)
        b = E.convert(f, a.dtype)
    else:
        b = E.convert(f)
        a = E.convert(t, b.dtype)
    dtype = E._promote(a.dtype, b.dtype)
    return E.Call(dtype, "if_then_else", [c, a.astype(dtype), b.astype(dtype)])


def equal(a, b) -> PrimExpr:
    """The bool expression ``a == b`` (``==`` on PrimExprs is structural equality, as for
    dict keys, so comparisons are built with this helper, like ``tvm.tir.EQ``)."""
    return E._binary(E.EQ, a, b)


def not_equal(a, b) -> PrimExpr:
    """The bool expression ``a != b`` (see :func:`equal`)."""
    return E._binary(E.NE, a, b)


def maximum(a, b) -> PrimExpr:
    """Elementwise ``T.max(a, b)`` (TVM's ``tir.max``)."""
    return E._binary(E.Max, a, b)


def minimum(a, b) -> PrimExpr:
    """Elementwise ``T.min(a, b)`` (TVM's ``tir.min``)."""
    return E._binary(E.Min, a, b)


def max_value(dtype: str) -> PrimExpr:
    """The largest finite value of ``dtype`` as a constant (TVM's ``tvm.te.max_value``).

    Raises ValueError for an unknown dtype."""
    if dtype == "bool":
        return E.IntImm(1, "bool")
    floats = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}
    if dtype in floats:
        return E.FloatImm(floats[dtype], dtype)
    if E.is_int_dtype(dtype):
        bits = E._bits(dtype)
        return E.IntImm((1 << bits) - 1 if dtype.startswith("uint") else (1 << (bits - 1)) - 1,
                        dtype)
    raise ValueError(f"unknown dtype {dtype!r}")


def min_value(dtype: str) -> PrimExpr:
    """The lowest finite value of ``dtype`` (TVM's ``tvm.te.min_value``; ``-max`` for floats).

    Raises ValueError for an unknown dtype."""
    if dtype == "bool":
        return E.IntImm(0, "bool")
    if E.is_float_dtype(dtype):
        return E.FloatImm(-max_value(dtype).value, dtype)  # type: ignore[attr-defined]
    if E.is_int_dtype(dtype):
        bits = E._bits(dtype)
        return E.IntImm(0 if dtype.startswith("uint") else -(1 << (bits - 1)), dtype)
    raise ValueError(f"unknown dtype {dtype!r}")


def all(*conds) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical and of bool expressions (``tvm.tir.all``); ``T.bool(True)`` for none."""
    out: PrimExpr = E.IntImm(1, "bool")
    for c in conds:
        out = E._binary(E.And, out, E.convert(c)) if not (
            isinstance(out, E.IntImm) and out.value == 1) else E.convert(c)
    return out


def any(*conds) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical or of bool expressions (``tvm.tir.any``); ``T.bool(False)`` for none."""
    out: PrimExpr = E.IntImm(0, "bool")
    for c in conds:
        out = E._binary(E.Or, out, E.convert(c)) if not (
            isinstance(out, E.IntImm) and out.value == 0) else E.convert(c)
    return out

