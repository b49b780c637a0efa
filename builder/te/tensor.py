"""Tensor expressions: placeholders, computes and commutative reductions (TVM's ``tvm.te``).

A :class:`Tensor` is produced by an operation: :class:`PlaceholderOp` (an input) or
:class:`ComputeOp` (``out[i, j] = fcompute(i, j)``). Indexing a tensor gives a load expression
(a :class:`~builder.ir.tir.BufferLoad` on the tensor's buffer), so compute bodies are ordinary
:mod:`builder.ir.expr` trees. A reduction (``sum`` / ``max`` / ``min`` / ``prod`` or a
:func:`comm_reducer`) must be the top-level expression of a compute, as in TVM.
"""
from __future__ import annotations

import builtins
import inspect
from typing import Callable, Sequence

from ..ir import expr as E
from ..ir import tir
from ..ir.expr import PrimExpr, Var
from ..ir.tir import Buffer, BufferLoad, IterVar, Range

__all__ = [
    "Tensor", "Operation", "PlaceholderOp", "ComputeOp", "CommReducer", "Reduce", "placeholder",
    "compute", "reduce_axis", "comm_reducer", "sum", "max", "min", "prod",
    "var", "size_var", "const",
]


class _TensorBuffer(Buffer):
    """The buffer that holds a tensor's values; remembers its tensor for dependency analysis."""

    def __init__(self, name: str, shape, dtype: str, tensor: "Tensor") -> None:
        super().__init__(name, shape, dtype)
        self.tensor = tensor


class Operation:
    """Base of tensor-producing operations; ``input_tensors`` lists the tensors it reads."""

    name: str
    tag: str = ""
    attrs: dict

    @property
    def input_tensors(self) -> list["Tensor"]:
        """Tensors read by this operation, in order of first read."""
        return []

    def output(self, index: int = 0) -> "Tensor":
        """The ``index``-th output tensor (every operation here has one)."""
        if index != 0:
            raise IndexError(f"operation '{self.name}' has a single output")
        return self._output  # type: ignore[attr-defined]


class PlaceholderOp(Operation):
    """An input tensor (``te.placeholder``)."""

    def __init__(self, name: str, shape: tuple[PrimExpr, ...], dtype: str) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.attrs = {}


class ComputeOp(Operation):
    """``out[axis] = body``; ``body`` may be a top-level :class:`Reduce` over ``reduce_axis``.

    ``axis`` are the spatial :class:`~builder.ir.tir.IterVar`\\ s (one per output dim, named
    after ``fcompute``'s parameters), ``reduce_axis`` the reduction iter vars the body uses.
    """

    def __init__(self, name: str, tag: str, attrs: dict, axis: list[IterVar], body: PrimExpr) -> None:
        self.name = name
        self.tag = tag
        self.attrs = attrs
        self.axis = axis
        self.body = body
        self.reduce_axis = list(body.axis) if isinstance(body, Reduce) else []
        inputs: list[Tensor] = []
        for load in tir.buffer_loads(body):
            t = getattr(load.buffer, "tensor", None)
            if t is not None and builtins.all(t is not x for x in inputs):
                inputs.append(t)
        self._inputs = inputs

    @property
    def input_tensors(self) -> list["Tensor"]:
        return list(self._inputs)


class Tensor:
    """The output of an operation: ``shape`` (tuple of int64 PrimExpr), ``dtype``, ``name``.

    ``t[i, j]`` (or ``t(i, j)``) is a load expression usable inside :func:`compute`. Raises
    ValueError when indexed with the wrong number of indices.
    """

    def __init__(self, shape: tuple[PrimExpr, ...], dtype: str, op: Operation) -> None:
        self.shape = shape
        self.dtype = dtype
        self.op = op
        self.value_index = 0
        self.buffer: Buffer = _TensorBuffer(op.name, shape, dtype, self)

    @property
    def name(self) -> str:
        """The producing operation's name."""
        return self.op.name

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __getitem__(self, indices) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise ValueError(f"tensor '{self.name}' has {self.ndim} dims but is indexed with "
                             f"{len(indices)} indices")
        return BufferLoad(self.buffer, indices)

    def __call__(self, *indices) -> BufferLoad:
        return self[tuple(indices)]

    def __repr__(self) -> str:
        return f"Tensor(shape=({', '.join(str(d) for d in self.shape)}), op.name={self.name})"


def _shape(shape) -> tuple[PrimExpr, ...]:
    if isinstance(shape, (int, PrimExpr)):
        shape = (shape,)
    out = []
    for d in shape:
        e = E.convert(d)
        if not E.is_int_dtype(e.dtype) or e.dtype == "bool":
            raise TypeError(f"shape dims must be integers, got {d!r}")
        # constants become int64; symbolic dims keep their dtype so a Var stays bindable
        out.append(e.astype("int64") if isinstance(e, E.IntImm) else e)
    return tuple(out)


def var(name: str = "tindex", dtype: str = "int64") -> Var:
    """A symbolic scalar (e.g. a dynamic dim ``n``); int64 by default, like graph-level dims."""
    return Var(name, dtype)


def size_var(name: str = "size", dtype: str = "int64") -> Var:
    """A symbolic non-negative scalar (shape dim)."""
    return E.SizeVar(name, dtype)


def const(value, dtype: str | None = None) -> PrimExpr:
    """A constant of ``dtype`` (int64 / float32 / bool by default from the Python type)."""
    return E.const(value, dtype)


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` (ints and/or symbolic int ``Var``\\ s) and ``dtype``."""
    op = PlaceholderOp(name, _shape(shape), dtype)
    t = Tensor(op.shape, dtype, op)
    op._output = t
    return t


def _arg_names(fcompute: Callable, ndim: int) -> list[str]:
    code = getattr(fcompute, "__code__", None)
    if code is None:
        params = inspect.signature(fcompute).parameters
        names = [p.name for p in params.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = builtins.any(p.kind == p.VAR_POSITIONAL for p in params.values())
    else:
        names = list(code.co_varnames[:code.co_argcount])
        varargs = bool(code.co_flags & inspect.CO_VARARGS)
    if varargs and not names:
        return [f"i{k}" for k in range(ndim)]
    if len(names) != ndim:
        raise ValueError(f"fcompute takes {len(names)} arguments but the shape has {ndim} dims")
    return names


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "",
            attrs: dict | None = None) -> Tensor:
    """The tensor ``out[i0, ..., ik] = fcompute(i0, ..., ik)`` (TVM's ``te.compute``).

    ``fcompute`` gets one int64 ``Var`` per output dim (named after its parameters; ``i0, i1, ...``
    for ``lambda *i``) and returns a PrimExpr (Python numbers become constants) or a top-level
    reduction (``te.sum(..., axis=k)``). The output dtype is the body's dtype. Raises ValueError
    for a reduction nested inside another expression or a wrong parameter count.
    """
    shp = _shape(shape)
    names = _arg_names(fcompute, len(shp))
    axis = [IterVar(Var(n, "int64"), Range(0, d), "S") for n, d in zip(names, shp)]
    body = fcompute(*[iv.var for iv in axis])
    if isinstance(body, (list, tuple)):
        if len(body) != 1:
            raise ValueError("compute with several outputs is not supported")
        body = body[0]
    body = E.convert(body)
    _check_no_nested_reduce(body, top=True)
    op = ComputeOp(name, tag, dict(attrs or {}), axis, body)
    t = Tensor(shp, body.dtype, op)
    op._output = t
    return t


def _check_no_nested_reduce(e: PrimExpr, top: bool) -> None:
    """Raise ValueError when a ``Reduce`` sits anywhere in ``e`` but at its top (``top=True``).

    Walks each distinct node once with an explicit stack: a body of any depth (a chain of selects, a
    long sum) and shared subexpressions cost no recursion and no repeated walks."""
    stack: list[PrimExpr] = [e]
    seen: dict[int, PrimExpr] = {}   # id -> node (kept alive so that ids stay unique)
    if top and isinstance(e, Reduce):
        stack = [e.source, e.condition]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if isinstance(node, Reduce):
            raise ValueError("a reduction must be the top-level expression of te.compute; "
                             "compute it into its own tensor first")
        stack.extend(tir.expr_children(node))


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction iter var over ``dom`` = ``(lo, hi)`` (half-open, TVM's convention) or an
    extent; usable directly in expressions (``A[i, k]``)."""
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise ValueError(f"reduce_axis needs (lo, hi), got {dom!r}")
        lo, hi = E.convert(dom[0]), E.convert(dom[1])
        rng = Range(lo, E.simplify(hi - lo))
    else:
        rng = Range(0, dom)
    return IterVar(Var(name, "int64"), rng, "R")


class CommReducer:
    """A commutative reducer: ``combine(lhs, rhs)`` and an ``identity(dtype)`` element.

    Calling it as ``r(expr, axis, where=None, init=None)`` builds a :class:`Reduce`; called on two
    expressions (``r(a, b)`` with ``b`` not an iter var) it combines them elementwise, as TVM's
    reducers do (``te.max(x, 0)``).
    """

    def __init__(self, fcombine: Callable[[PrimExpr, PrimExpr], PrimExpr],
                 fidentity: Callable[[str], PrimExpr], name: str) -> None:
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name

    def combine(self, lhs: PrimExpr, rhs: PrimExpr) -> PrimExpr:
        """``fcombine(lhs, rhs)`` as a PrimExpr."""
        return E.convert(self.fcombine(lhs, rhs))

    def identity(self, dtype: str) -> PrimExpr:
        """The identity element for ``dtype``."""
        return E.convert(self.fidentity(dtype), dtype)

    def __call__(self, expr, axis=None, where=None, init=None, *args) -> PrimExpr:
        is_axis = isinstance(axis, IterVar) or (
            isinstance(axis, (list, tuple)) and builtins.all(isinstance(a, IterVar) for a in axis))
        if axis is not None and not is_axis:
            if where is not None or init is not None or args:
                raise TypeError(f"elementwise {self.name} takes two operands")
            a = E.convert(expr)
            return self.combine(a, E.convert(axis, a.dtype))
        if axis is None:
            raise TypeError(f"te.{self.name} needs axis= (a reduce_axis or a list of them)")
        axes = [axis] if isinstance(axis, IterVar) else list(axis)
        for a in axes:
            if a.kind != "R":
                raise ValueError(f"axis '{a.name}' of te.{self.name} is not a reduce_axis")
        src = E.convert(expr)
        cond = E.IntImm(1, "bool") if where is None else E.convert(where)
        init_e = None if init is None else E.convert(init, src.dtype)
        return Reduce(self, src, axes, cond, init_e)

    def __repr__(self) -> str:
        return f"CommReducer({self.name})"


class Reduce(PrimExpr):
    """A reduction ``combiner`` of ``source`` over ``axis`` where ``condition`` holds, starting
    from ``init`` (default: the combiner's identity). Only valid as a compute body."""

    __slots__ = ("combiner", "source", "axis", "condition", "init")

    def __init__(self, combiner: CommReducer, source: PrimExpr, axis: Sequence[IterVar],
                 condition: PrimExpr, init: PrimExpr | None = None) -> None:
        self.combiner = combiner
        self.source = source
        self.axis = tuple(axis)
        self.condition = condition
        self.init = init
        self.dtype = source.dtype

    def _key(self) -> tuple:
        return (id(self.combiner), self.source, tuple(id(a) for a in self.axis), self.condition,
                self.init)

    def children(self) -> tuple[PrimExpr, ...]:
        """Source, condition (and init) expressions."""
        extra = () if self.init is None else (self.init,)
        return (self.source, self.condition) + extra

    def substitute(self, vmap: dict) -> "Reduce":
        """Substitute variables inside the reduction."""
        init = None if self.init is None else E.substitute(self.init, vmap)
        return Reduce(self.combiner, E.substitute(self.source, vmap), self.axis,
                      E.substitute(self.condition, vmap), init)

    def _print(self, name_of, recurse) -> str:
        axes = ", ".join(name_of(a.var) for a in self.axis)
        text = f"T.reduce_{self.combiner.name}({recurse(self.source)}, axis=[{axes}]"
        if not (isinstance(self.condition, E.IntImm) and self.condition.value == 1):
            text += f", where={recurse(self.condition)}"
        return text + ")"


def comm_reducer(fcombine: Callable[[PrimExpr, PrimExpr], PrimExpr],
                 fidentity: Callable[[str], PrimExpr], name: str = "comm_reducer") -> CommReducer:
    """A custom commutative reducer (TVM's ``te.comm_reducer``), e.g.
    ``comm_reducer(lambda x, y: x * y, lambda t: const(1, t), "prod")``."""
    return CommReducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda t: E.const(0, t), "sum")  # noqa: A001
max = comm_reducer(tir.maximum, tir.min_value, "max")  # noqa: A001
min = comm_reducer(tir.minimum, tir.max_value, "min")  # noqa: A001
prod = comm_reducer(lambda x, y: x * y, lambda t: E.const(1, t), "prod")
