"""Graph-level IR nodes, mirroring TVM Relax.

Values: ``Var`` / ``DataflowVar`` (bound once), ``Constant`` (a numpy array), ``Tuple``,
``TupleGetItem``, ``ShapeExpr``, ``PrimValue``, ``StringImm``, ``Call`` (of an ``Op``, a
``GlobalVar`` or an ``ExternFunc``). Structure: ``VarBinding`` inside a ``BindingBlock`` or
``DataflowBlock``, ``SeqExpr(blocks, body)``, ``Function(params, body, ret_struct_info, attrs)``
and ``IRModule`` (named functions: graph-level ``Function`` or loop-level ``PrimFunc``).
Every expression carries ``struct_info`` (see ``struct_info.py``).
"""
from __future__ import annotations

import keyword
import re
from typing import Any, Iterable, Sequence

import numpy as np

from core.dtypes import bfloat16_bits_to_float32, float32_to_bfloat16_bits

from . import expr as E
from .struct_info import (
    DTYPES, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
)

__all__ = [
    "Expr", "Var", "DataflowVar", "Constant", "Tuple", "TupleGetItem", "ShapeExpr", "PrimValue",
    "StringImm", "DataTypeImm", "Op", "GlobalVar", "ExternFunc", "Call", "VarBinding", "BindingBlock",
    "DataflowBlock", "SeqExpr", "Function", "IRModule", "const", "used_vars", "substitute_vars", "valid_name",
]

_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")


def valid_name(hint: str) -> str:
    """``hint`` as a name the printer, the parser and the code generator accept (a Python identifier
    that is not a keyword): other characters become ``_``, a leading digit gets a ``_`` before it, a
    keyword gets one after it, and an empty hint becomes ``v``. ``"a b\n@R.function"`` ->
    ``"a_b__R_function"``."""
    name = _NOT_NAME_CHAR.sub("_", hint)[:200] or "v"
    if name[0].isdigit():
        name = "_" + name
    return name + "_" if keyword.iskeyword(name) else name


class Expr:
    """Base class of graph-level expressions; ``struct_info`` is set at construction."""

    struct_info: StructInfo | None = None

    @property
    def struct_info_(self) -> StructInfo | None:
        """TVM's spelling of ``struct_info``."""
        return self.struct_info


class Var(Expr):
    """A variable bound once: a function parameter or the left side of a binding.

    ``Var(name_hint, struct_info)``. Identity equality: two Vars with one name are different.
    """

    def __init__(self, name_hint: str, struct_info: StructInfo | None = None) -> None:
        if struct_info is not None and not isinstance(struct_info, StructInfo):
            raise TypeError(f"struct_info must be a StructInfo, got {type(struct_info).__name__}")
        self.name_hint = name_hint
        self.struct_info = struct_info

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name_hint}: {self.struct_info!r})"


class DataflowVar(Var):
    """A variable visible only inside its dataflow block (``lv``); outputs are plain ``Var``."""


class Constant(Expr):
    """A constant tensor (``R.const``); ``data`` is a numpy array.

    numpy has no bfloat16: a ``"bfloat16"`` constant keeps its values rounded to bfloat16
    (nearest, ties to even) as ``uint16`` bit patterns in ``data`` -- the form the runtime passes
    to kernels -- and :attr:`dtype` / the struct info say ``bfloat16``; ``uint16`` data given
    with ``dtype="bfloat16"`` is taken as bit patterns already. :meth:`values` gives the
    numbers (float32 for bfloat16)."""

    def __init__(self, data: np.ndarray, dtype: str | None = None) -> None:
        arr = np.asarray(data)
        if dtype == "bfloat16":
            if arr.dtype != np.uint16:
                arr = float32_to_bfloat16_bits(arr.astype(np.float32))
        elif dtype is not None:
            arr = arr.astype(dtype)
        self.data = arr
        self.dtype = dtype if dtype == "bfloat16" else str(arr.dtype)
        self.struct_info = TensorStructInfo(arr.shape, self.dtype)

    def values(self) -> np.ndarray:
        """The constant's numbers as a numpy array (bfloat16 widened exactly to float32)."""
        if self.dtype == "bfloat16":
            return bfloat16_bits_to_float32(self.data)
        return self.data


def const(value: Any, dtype: str | None = None) -> Constant:
    """``R.const(value, dtype)``: a scalar or array constant (default dtype from numpy,
    float64 narrowed to float32 and int64 kept)."""
    arr = np.asarray(value)
    if dtype is None and arr.dtype == np.float64:
        dtype = "float32"
    return Constant(arr, dtype)


class Tuple(Expr):
    """A tuple of values: ``(a, b)``."""

    def __init__(self, fields: Sequence[Expr]) -> None:
        self.fields = tuple(fields)
        self.struct_info = TupleStructInfo([f.struct_info for f in self.fields])


class TupleGetItem(Expr):
    """``tuple_value[index]``."""

    def __init__(self, tuple_value: Expr, index: int) -> None:
        sinfo = tuple_value.struct_info
        if not isinstance(sinfo, TupleStructInfo):
            raise TypeError(f"TupleGetItem needs a tuple, got {sinfo!r}")
        if not 0 <= index < len(sinfo.fields):
            raise IndexError(f"tuple index {index} out of range for {len(sinfo.fields)} fields")
        self.tuple_value = tuple_value
        self.index = index
        self.struct_info = sinfo.fields[index]


class ShapeExpr(Expr):
    """A shape value ``R.shape([d0, d1, ...])`` with int / int64 PrimExpr dims."""

    def __init__(self, values: Iterable) -> None:
        self.struct_info = ShapeStructInfo(list(values))
        self.values = self.struct_info.values


class PrimValue(Expr):
    """A scalar value ``R.prim_value(v)``."""

    def __init__(self, value: E.ExprLike, dtype: str = "int64") -> None:
        self.value = E.convert(value, dtype)
        self.struct_info = PrimStructInfo(self.value.dtype, self.value)


class StringImm(Expr):
    """A string value ``R.str("...")``."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.struct_info = ObjectStructInfo()


class DataTypeImm(StringImm):
    """A dtype as a graph-level value (TVM's ``relax.DataTypeImm``, printed ``R.dtype("float32")``
    by TVM). Used as the dtype argument of ``R.builtin.alloc_tensor``; ``value`` is the dtype
    string. Raises ValueError for an unknown dtype."""

    def __init__(self, value: str) -> None:
        if value not in DTYPES:
            raise ValueError(f"unknown dtype '{value}'; valid dtypes: {', '.join(DTYPES)}")
        super().__init__(value)


class Op(Expr):
    """A registered operator: the one record of everything the compiler knows about it (see
    :func:`builder.ir.op.register_op`, which fills it, and ``builder/ops/`` where every op is
    registered). ``Op.get("relax.matmul")`` finds it.

    Fields: ``name`` (``relax.nn.silu``), ``infer`` (struct-info inference, ``Call -> StructInfo``),
    ``attr_names`` (printed attribute order), ``purity``, ``pattern`` (:class:`builder.ir.op.OpPattern`,
    how it fuses), ``legalize`` (``(BlockBuilder, Call) -> Expr``: the loop-level code of a call,
    usually ``R.call_tir`` of a topi compute), ``compute`` (for elementwise ops, the topi compute on
    te tensors that fusion replays), ``intrinsic`` (the scalar intrinsic of a math op, e.g. ``erf``),
    ``frontend`` (the ``nn.op`` / recipe ``forward:`` function name, or None), ``int_args`` (positions of
    arguments printed as a plain int when they are a constant int64 ``R.prim_value``) and ``doc``.
    """

    _registry: dict[str, "Op"] = {}

    def __init__(self, name: str) -> None:
        self.name = name
        self.infer = None
        self.legalize = None
        self.attr_names: tuple[str, ...] = ()
        self.purity = True
        self.pattern = None
        self.compute = None
        self.intrinsic = None
        self.frontend: str | None = None
        self.int_args: tuple[int, ...] = ()
        self.doc = ""

    @classmethod
    def get(cls, name: str) -> "Op":
        """The registered op ``name`` (``relax.`` prefix optional). Raises KeyError if unknown."""
        full = name if name.startswith("relax.") else "relax." + name
        op = cls._registry.get(full)
        if op is None:
            load_op_library()
            op = cls._registry.get(full)
        if op is None:
            raise KeyError(f"unknown operator '{name}'")
        return op

    def __repr__(self) -> str:
        return f"Op({self.name})"


def load_op_library() -> None:
    """Import the op library (``builder.ops``), whose modules register every op's record in
    :attr:`Op._registry`; a no-op once it is loaded. ``ir`` is the room below ``ops`` (the library imports
    ``ir``), so ``ir`` loads it on the first lookup of an op by name (:meth:`Op.get`,
    :func:`builder.ir.op.registered_ops`) rather than at import: ``import builder.ir`` stays light (no
    te / topi), and any code that names an op finds it registered."""
    from .. import ops  # noqa: F401  (deferred: the one import of a higher room by ir, tests/test_imports.py)


class GlobalVar(Expr):
    """The name of a function in an IRModule (``cls.name`` when printed)."""

    def __init__(self, name_hint: str) -> None:
        self.name_hint = name_hint
        self.struct_info = ObjectStructInfo()

    def __repr__(self) -> str:
        return f"GlobalVar({self.name_hint})"


class ExternFunc(Expr):
    """A function provided by the runtime, called by name (``R.ExternFunc("vm.builtin...")``)."""

    def __init__(self, global_symbol: str) -> None:
        self.global_symbol = global_symbol
        self.struct_info = ObjectStructInfo()


class Call(Expr):
    """``op(args..., **attrs)``. ``sinfo_args`` carries output struct info (``call_tir``).

    When ``struct_info`` is not given it is inferred by the op's registered rule, which raises
    ValueError / TypeError naming both sides of a mismatch.
    """

    def __init__(self, op: Expr, args: Sequence[Expr], attrs: dict | None = None,
                 sinfo_args: Sequence[StructInfo] = (), struct_info: StructInfo | None = None) -> None:
        self.op = op
        self.args = tuple(args)
        self.attrs = dict(attrs or {})
        self.sinfo_args = tuple(sinfo_args)
        if struct_info is None and isinstance(op, Op) and op.infer is not None:
            try:
                struct_info = op.infer(self)
            except ValueError as err:
                # name the op when the rule's message does not (e.g. a negative output dim)
                if type(err) is not ValueError or str(err).startswith(op.name):
                    raise
                raise ValueError(f"{op.name}: {err}") from err
        self.struct_info = struct_info


def used_vars(e: Expr) -> list[Var]:
    """The Vars ``e`` reads (through tuples, tuple items and call arguments), in order."""
    out: list[Var] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out.append(x)
        elif isinstance(x, Tuple):
            stack.extend(reversed(x.fields))
        elif isinstance(x, TupleGetItem):
            stack.append(x.tuple_value)
        elif isinstance(x, Call):
            stack.extend(reversed(x.args))
    return out


def substitute_vars(e: Expr, vmap: dict, reinfer: bool = False) -> Expr:
    """``e`` with Vars replaced through ``vmap`` (through tuples, items and call arguments).

    With ``reinfer`` the rebuilt calls infer their struct info again (needed when the new
    variables have other shapes); otherwise they keep the old one.
    """
    if isinstance(e, Var):
        return vmap.get(e, e)
    if isinstance(e, Tuple):
        return Tuple([substitute_vars(f, vmap, reinfer) for f in e.fields])
    if isinstance(e, TupleGetItem):
        return TupleGetItem(substitute_vars(e.tuple_value, vmap, reinfer), e.index)
    if isinstance(e, Call):
        args = [substitute_vars(a, vmap, reinfer) for a in e.args]
        infer = reinfer and isinstance(e.op, Op) and e.op.infer is not None
        return Call(e.op, args, e.attrs, e.sinfo_args, None if infer else e.struct_info)
    return e


class VarBinding:
    """``var = value``."""

    def __init__(self, var: Var, value: Expr) -> None:
        self.var = var
        self.value = value


class BindingBlock:
    """A sequence of bindings (may have side effects)."""

    is_dataflow = False

    def __init__(self, bindings: Sequence[VarBinding] = ()) -> None:
        self.bindings = list(bindings)


class DataflowBlock(BindingBlock):
    """A side-effect-free block (``with R.dataflow():``); its locals are DataflowVars."""

    is_dataflow = True


class SeqExpr(Expr):
    """Blocks followed by a result expression ``body``."""

    def __init__(self, blocks: Sequence[BindingBlock], body: Expr) -> None:
        self.blocks = list(blocks)
        self.body = body
        self.struct_info = body.struct_info


class Function(Expr):
    """A graph-level function: ``params`` (Vars), ``body`` (SeqExpr), ``ret_struct_info``,
    ``attrs`` (e.g. ``{"num_input": 1}``) and ``is_pure``."""

    def __init__(self, params: Sequence[Var], body: SeqExpr, ret_struct_info: StructInfo | None = None,
                 attrs: dict | None = None, is_pure: bool = True, name: str | None = None) -> None:
        self.params = list(params)
        self.body = body
        self.ret_struct_info = ret_struct_info if ret_struct_info is not None else body.struct_info
        self.attrs = dict(attrs or {})
        self.is_pure = is_pure
        self.name = name
        self.struct_info = ObjectStructInfo()

    @property
    def num_input(self) -> int:
        """``attrs["num_input"]``, else all params."""
        return int(self.attrs.get("num_input", len(self.params)))


class IRModule:
    """Named functions: graph-level ``Function`` and loop-level ``PrimFunc``.

    ``mod["forward"]``, ``mod.functions`` (insertion ordered), ``mod.script()`` (TVMScript text),
    ``mod.show()`` (rich-highlighted on a terminal, plain when piped).
    """

    def __init__(self, functions: dict[str, Any] | None = None, attrs: dict | None = None) -> None:
        self.functions: dict[str, Any] = dict(functions or {})
        self.attrs = dict(attrs or {})

    def __getitem__(self, name: str | GlobalVar):
        key = name.name_hint if isinstance(name, GlobalVar) else name
        try:
            return self.functions[key]
        except KeyError:
            raise KeyError(f"IRModule has no function '{key}'; it has {sorted(self.functions)}") from None

    def __setitem__(self, name: str, func) -> None:
        self.functions[name] = func

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __iter__(self):
        return iter(self.functions.items())

    def get_global_var(self, name: str) -> GlobalVar:
        """A GlobalVar naming function ``name`` (KeyError if absent)."""
        self[name]
        return GlobalVar(name)

    def script(self, show_meta: bool = False) -> str:
        """The module as TVMScript text (see ``builder.ir.printer``); large constants print as
        ``metadata[...]`` references unless ``show_meta`` (as TVM's ``script(show_meta=...)``)."""
        from .printer import print_irmodule

        return print_irmodule(self, show_meta=show_meta)

    def show(self, plain: bool | None = None, file=None, show_meta: bool = False) -> None:
        """Print ``script()``: syntax-highlighted with rich on a terminal, plain otherwise."""
        from .printer import show_text

        show_text(self.script(show_meta=show_meta), plain=plain, file=file)

    def __str__(self) -> str:
        return self.script()
