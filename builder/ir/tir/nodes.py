"""Loop-level IR nodes, modelled on TVM TensorIR (``tvm.tir``): buffers, loads, statements and
:class:`PrimFunc`.

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
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .. import expr as E
from ..expr import PrimExpr, Var

FOR_KINDS = ("serial", "parallel", "vectorized", "unroll")


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
        """Accept a ``Range``, a ``(min, extent)`` pair or a single extent. Raises ValueError for a sequence
        that is not a pair."""
        if isinstance(dom, Range):
            return dom
        if isinstance(dom, (tuple, list)):
            if len(dom) != 2:
                raise ValueError(f"a range needs (min, extent), got {dom!r}")
            return Range(dom[0], dom[1])
        return Range(0, dom)

    def __repr__(self) -> str:
        return f"Range(min={self.min}, extent={self.extent})"


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


class Stmt:
    """Base class of statements. ``str(stmt)`` prints it as TVMScript."""

    __slots__ = ()

    def __str__(self) -> str:
        from .printer import _ScriptPrinter

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
        from .printer import script

        return script(self, name)

    def show(self) -> None:
        """Print :meth:`script`."""
        print(self.script())

    def __str__(self) -> str:
        return self.script()

    def __repr__(self) -> str:
        return f"PrimFunc({self.name}, params=[{', '.join(p.name for p in self.params)}])"
