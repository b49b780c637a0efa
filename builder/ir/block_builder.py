"""BlockBuilder: builds graph-level functions binding by binding (TVM Relax's ``BlockBuilder``).

Usage, as in the MLC course and TVM::

    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            lv = bb.emit(op.matmul(x, w))          # DataflowVar "lv"
            gv = bb.emit_output(lv)                 # Var "gv"
        bb.emit_func_output(gv)
    mod = bb.get()

Names come from one name table per builder (module-wide, as TVM's exporter shows): the first
``lv`` is ``lv``, the next ``lv1``, ``lv2``, ... Nested call arguments are bound to fresh ``lv``
variables before the call that uses them (A-normal form).

Tensor expressions (the MLC course's "Integration with ML frameworks" chapter)::

    with bb.function("main"):
        with bb.dataflow():
            C = bb.emit_te(te_matmul, A, B)    # lv = R.call_tir(cls.te_matmul, (A, B), out_sinfo=...)
            D = bb.emit_te(te_relu, C)         # lv1 = R.call_tir(cls.te_relu, (lv,), out_sinfo=...)
            R = bb.emit_output(D)              # gv = lv1
        bb.emit_func_output(R, params=[A, B])

``emit_te`` builds a PrimFunc with ``te.create_prim_func`` and adds it to the module under the
te function's name (``te_matmul``; ``te_matmul1`` for a second one). Its buffer parameters are
named after the graph variables they receive (``A``, ``B``, ``lv``), with ``_1``, ``_2`` for a
variable passed twice; the outputs keep their ``te.compute`` names (``matmul``). The course's
2022 TVM named every input ``rxplaceholder``, ``rxplaceholder_1``, ...; we name them after the
arguments instead because the kernel then reads like the graph that calls it, because the
runtime's argument checks and the printed PrimFunc name the same thing, and because
``LegalizeOps`` (which lowers every op through the same :func:`call_te`) names its kernels'
parameters the same way, so hand-written and legalized kernels look alike.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

from . import relax as rx
from .struct_info import StructInfo, TensorStructInfo

__all__ = ["BlockBuilder", "tensor_sinfo"]

_LEAF = (rx.Var, rx.Constant, rx.ShapeExpr, rx.PrimValue, rx.StringImm, rx.GlobalVar, rx.Op, rx.ExternFunc)


class _FunctionFrame:
    def __init__(self, name: str, params: Sequence[rx.Var] | None, attrs: dict, pure: bool) -> None:
        self.name = name
        self.params = list(params) if params is not None else None
        self.attrs = dict(attrs)
        self.pure = pure
        self.blocks: list[rx.BindingBlock] = []
        self.current: rx.BindingBlock | None = None
        self.done = False


class BlockBuilder:
    """Incremental builder of an :class:`~builder.ir.relax.IRModule`.

    Raises RuntimeError when called outside the right context (``emit`` outside a function,
    ``emit_output`` outside a dataflow block, a function left without ``emit_func_output``).
    """

    _stack: list["BlockBuilder"] = []

    def __init__(self, mod: rx.IRModule | None = None) -> None:
        self._mod = mod if mod is not None else rx.IRModule()
        self._names: dict[str, int] = {}
        self._frame: _FunctionFrame | None = None
        for name in self._mod.functions:
            self._names.setdefault(name, 0)

    # -- context -------------------------------------------------------------------------
    @classmethod
    def current(cls) -> "BlockBuilder":
        """The innermost builder inside a ``with bb.function(...)`` (RuntimeError if none)."""
        if not cls._stack:
            raise RuntimeError("no BlockBuilder is active (use `with bb.function(...)`)")
        return cls._stack[-1]

    def fresh_name(self, hint: str) -> str:
        """``hint`` made a valid, unique name in this builder: ``lv``, ``lv1``, ``lv2``, ...
        (characters other than letters, digits and ``_`` become ``_``; see :func:`builder.ir.relax.valid_name`)."""
        hint = rx.valid_name(hint or "lv")
        if hint not in self._names:
            self._names[hint] = 0
            return hint
        while True:
            self._names[hint] += 1
            cand = f"{hint}{self._names[hint]}"
            if cand not in self._names:
                self._names[cand] = 0
                return cand

    @contextlib.contextmanager
    def function(self, name: str, params: Sequence[rx.Var] | None = None, attrs: dict | None = None,
                 pure: bool = True):
        """Open function ``name`` with ``params`` (may be given later to emit_func_output). Raises
        RuntimeError for a ``bb.function`` inside another, and when the ``with`` body ends without
        :meth:`emit_func_output`."""
        if self._frame is not None:
            raise RuntimeError("nested bb.function is not supported")
        self._frame = _FunctionFrame(name, params, attrs or {}, pure)
        BlockBuilder._stack.append(self)
        try:
            yield self
            if not self._frame.done:
                raise RuntimeError(f"function '{name}' ended without bb.emit_func_output")
        finally:
            BlockBuilder._stack.pop()
            self._frame = None

    @contextlib.contextmanager
    def dataflow(self):
        """Open a dataflow block; bindings are DataflowVars unless emitted with emit_output. Raises
        RuntimeError outside a ``with bb.function(...)``."""
        frame = self._require_frame()
        self._close_block()
        frame.current = rx.DataflowBlock()
        try:
            yield self
        finally:
            self._close_block()

    def _require_frame(self) -> _FunctionFrame:
        if self._frame is None:
            raise RuntimeError("emit called outside `with bb.function(...)`")
        return self._frame

    def _close_block(self) -> None:
        frame = self._frame
        if frame is not None and frame.current is not None:
            if frame.current.bindings:
                frame.blocks.append(frame.current)
            frame.current = None

    def _block(self) -> rx.BindingBlock:
        frame = self._require_frame()
        if frame.current is None:
            frame.current = rx.BindingBlock()
        return frame.current

    # -- emission ------------------------------------------------------------------------
    def normalize(self, expr: rx.Expr) -> rx.Expr:
        """Bind nested non-leaf call arguments to fresh ``lv`` vars (A-normal form)."""
        if isinstance(expr, rx.Call):
            args = [self._normalize_arg(a) for a in expr.args]
            if any(a is not b for a, b in zip(args, expr.args)):
                expr = rx.Call(expr.op, args, expr.attrs, expr.sinfo_args, expr.struct_info)
            return expr
        if isinstance(expr, rx.Tuple):
            fields = [self._normalize_arg(f) for f in expr.fields]
            if any(a is not b for a, b in zip(fields, expr.fields)):
                expr = rx.Tuple(fields)
        return expr

    def _normalize_arg(self, arg: rx.Expr) -> rx.Expr:
        if isinstance(arg, _LEAF):
            return arg
        if isinstance(arg, rx.Tuple):
            return self.normalize(arg)
        return self.emit(arg)

    def emit(self, expr: rx.Expr, name_hint: str = "") -> rx.Var:
        """Bind ``expr`` to a new variable (DataflowVar inside a dataflow block) and return it. Nested calls
        among the arguments are bound first (:meth:`normalize`); the variable's struct info is ``expr``'s, and
        its name ``name_hint`` (default ``lv``) made unique. Raises RuntimeError outside a ``with
        bb.function(...)``."""
        expr = self.normalize(expr)
        block = self._block()
        cls = rx.DataflowVar if block.is_dataflow else rx.Var
        var = cls(self.fresh_name(name_hint or "lv"), expr.struct_info)
        block.bindings.append(rx.VarBinding(var, expr))
        return var

    def emit_output(self, output: rx.Expr | Sequence[rx.Expr], name_hint: str = "") -> rx.Var:
        """Bind ``output`` to a non-dataflow Var (``gv``) that is visible after the block. Raises RuntimeError
        outside a ``with bb.dataflow()`` block."""
        block = self._block()
        if not block.is_dataflow:
            raise RuntimeError("emit_output must be called inside `with bb.dataflow()`")
        if isinstance(output, (list, tuple)):
            output = rx.Tuple(output)
        output = self.normalize(output)
        var = rx.Var(self.fresh_name(name_hint or "gv"), output.struct_info)
        block.bindings.append(rx.VarBinding(var, output))
        return var

    def emit_func_output(self, output: rx.Expr | Sequence[rx.Expr], params: Sequence[rx.Var] | None = None,
                         ret_struct_info: StructInfo | None = None) -> rx.GlobalVar:
        """Finish the current function with ``output`` and add it to the module. Returns the function's
        GlobalVar. Raises RuntimeError outside a ``bb.function``, when called twice for one function, while a
        dataflow block is still open, or when no parameters were given (neither to :meth:`function` nor here)."""
        frame = self._require_frame()
        if frame.done:
            raise RuntimeError(f"emit_func_output was already called for function '{frame.name}'; "
                               "it may be called once per function")
        if frame.current is not None and frame.current.is_dataflow:
            raise RuntimeError("emit_func_output must be called after the dataflow block is closed")
        if params is not None:
            frame.params = list(params)
        if frame.params is None:
            raise RuntimeError(f"function '{frame.name}' has no parameters given")
        if isinstance(output, (list, tuple)):
            output = rx.Tuple(output)
        self._close_block()
        body = rx.SeqExpr(frame.blocks, output)
        func = rx.Function(frame.params, body, ret_struct_info, frame.attrs, frame.pure, name=frame.name)
        self._mod[frame.name] = func
        frame.done = True
        return rx.GlobalVar(frame.name)

    def add_func(self, func: Any, name_hint: str) -> rx.GlobalVar:
        """Add a function (graph-level or PrimFunc) under a fresh name; returns its GlobalVar."""
        name = name_hint if name_hint not in self._mod.functions else self.fresh_name(name_hint)
        self._names.setdefault(name, 0)
        if hasattr(func, "name"):
            func.name = name
        if isinstance(getattr(func, "attrs", None), dict) and "global_symbol" in func.attrs:
            func.attrs["global_symbol"] = name
        self._mod[name] = func
        return rx.GlobalVar(name)

    def call_te(self, te_func: Callable, *args: Any, primfunc_name_hint: str | None = None,
                **kwargs: Any) -> rx.Call:
        """``R.call_tir`` of the PrimFunc that ``te_func`` builds from tensor expressions.

        Graph-level tensor arguments (Exprs with TensorStructInfo, also inside lists) become
        ``te.placeholder``\\ s named after the argument variables (see the module docstring for
        why not ``rxplaceholder``); ``te_func(*placeholders, **kwargs)`` returns a te.Tensor (or
        a list); symbolic dims stay symbolic. The PrimFunc is added to the module under
        ``primfunc_name_hint`` or ``te_func.__name__`` (made unique).
        """
        if BlockBuilder._te_bridge is None:
            raise RuntimeError("call_te needs builder.te (import builder)")
        return BlockBuilder._te_bridge(self, te_func, args, kwargs, primfunc_name_hint)

    _te_bridge: Callable | None = None

    @classmethod
    def set_te_bridge(cls, fn: Callable) -> None:
        """Install the function behind :meth:`call_te` (``builder.te.call_te.call_te``, which
        installs itself when imported): the IR does not import the tensor-expression layer."""
        cls._te_bridge = fn

    def emit_te(self, te_func: Callable, *args: Any, primfunc_name_hint: str | None = None,
                **kwargs: Any) -> rx.Var:
        """Emit ``call_te(...)`` as a binding (``lv = R.call_tir(te_func, ...)``). Returns the bound variable.
        Raises RuntimeError as :meth:`call_te` and :meth:`emit`; errors of ``te_func`` (shape or dtype checks
        of the compute) pass through."""
        return self.emit(self.call_te(te_func, *args, primfunc_name_hint=primfunc_name_hint, **kwargs))

    def get(self) -> rx.IRModule:
        """The module built so far."""
        return self._mod

    def finalize(self) -> rx.IRModule:
        """TVM's name for :meth:`get`."""
        return self._mod


def tensor_sinfo(expr: rx.Expr) -> TensorStructInfo:
    """``expr.struct_info`` when it is a tensor; TypeError otherwise."""
    sinfo = expr.struct_info
    if not isinstance(sinfo, TensorStructInfo):
        raise TypeError(f"expected a tensor, got {sinfo!r}")
    return sinfo

