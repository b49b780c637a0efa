"""Ops that call code outside the graph: a TE compute or a TIR PrimFunc (``tensor_expr_op``,
``tensor_ir_op``), a runtime function (``extern``), collectives (``ccl_*``), and ``null_value``."""
from __future__ import annotations

from typing import Sequence


from ...ir import expr as E
from ...ir import relax as rx
from ...ir.block_builder import BlockBuilder
from ...ir.struct_info import TupleStructInfo
from ..core import Tensor, wrap_nested
from .common import op_call


def tensor_expr_op(tensor_expr_func, name_hint: str, args: Sequence, *,
                   attrs: dict | None = None):
    """``R.call_tir`` of the PrimFunc that ``tensor_expr_func`` builds from tensor expressions.

    ``args``: Tensors (each becomes a ``te.placeholder``), symbolic vars or Python values passed
    through. The PrimFunc is added to the module under ``name_hint`` (deduplicated), with
    ``attrs`` merged into its attributes. Returns a Tensor (or a tuple of Tensors).
    """
    bb = BlockBuilder.current()
    call = bb.call_te(tensor_expr_func, *[a._expr if isinstance(a, Tensor) else a for a in args],
                      primfunc_name_hint=name_hint)
    if attrs:
        bb.get()[call.args[0].name_hint].attrs.update(attrs)
    return wrap_nested(bb.emit(call), name_hint)


def _out_sinfos(out) -> list:
    outs = [out] if isinstance(out, Tensor) else list(out)
    if not outs or not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"out must be a Tensor or a list of Tensors, got {out!r}")
    return [o._expr.struct_info for o in outs]


def tensor_ir_op(func, name_hint: str, args, out):
    """``R.call_tir`` of a user PrimFunc (destination-passing: ``func``'s buffers are ``args``
    then the outputs). ``out`` gives the output shapes / dtypes (``Tensor.placeholder`` or a
    list of them). A copy of ``func`` is added to the module under ``name_hint``.

    Raises TypeError for non-Tensor arguments (scalar ``tir_vars`` are not supported) and
    ValueError when the PrimFunc's parameter count differs from ``len(args) + len(out)``.
    """
    args = [args] if isinstance(args, Tensor) else list(args)
    for a in args:
        if not isinstance(a, Tensor):
            raise TypeError(f"tensor_ir_op: arguments must be Tensors (scalar tir_vars are not "
                            f"supported), got {type(a).__name__}")
    sinfos = _out_sinfos(out)
    if len(func.params) != len(args) + len(sinfos):
        raise ValueError(f"tensor_ir_op: PrimFunc '{func.name}' has {len(func.params)} buffer "
                         f"parameters but {len(args)} inputs and {len(sinfos)} outputs were given")
    bb = BlockBuilder.current()
    gvar = bb.add_func(func.with_body(func.body), name_hint)
    call = rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple([a._expr for a in args])],
                   sinfo_args=sinfos)
    return wrap_nested(bb.emit(call), name_hint)


def _extern_arg(arg) -> rx.Expr:
    if isinstance(arg, Tensor):
        return arg._expr
    if isinstance(arg, bool):
        raise TypeError("extern: bool arguments are not supported; pass an int")
    if isinstance(arg, int):
        return rx.PrimValue(E.IntImm(arg, "int64"), "int64")
    if isinstance(arg, float):
        return rx.PrimValue(E.FloatImm(arg, "float64"), "float64")
    if isinstance(arg, str):
        return rx.StringImm(arg)
    if isinstance(arg, E.PrimExpr):
        return rx.PrimValue(arg, arg.dtype)
    raise TypeError(f"extern: unsupported argument type {type(arg).__name__}")


def extern(name: str, args: Sequence, out):
    """Call the runtime function ``name`` in destination-passing style:
    ``R.call_dps_packed("name", (args...), out_sinfo=...)``.

    ``args``: Tensors, ints (int64), floats (float64), strings and scalar PrimExprs. ``out``: a
    Tensor (``Tensor.placeholder``) or a list of them giving the outputs' shapes and dtypes; the
    runtime allocates them and passes them after the arguments. On this runtime ``name`` must
    be registered with :func:`runtime.register_extern`. Returns a Tensor or a tuple of Tensors.
    """
    sinfos = _out_sinfos(out)
    out_sinfo = sinfos[0] if isinstance(out, Tensor) else TupleStructInfo(sinfos)
    call = rx.Call(rx.Op.get("call_dps_packed"),
                   [rx.ExternFunc(name), rx.Tuple([_extern_arg(a) for a in args])],
                   sinfo_args=[out_sinfo])
    hint = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return wrap_nested(call, hint)


def ccl_allreduce(x: Tensor, op_type: str = "sum", name: str = "ccl_allreduce") -> Tensor:
    """All-reduce across workers (``op_type``: sum, prod, min, max or avg). Exported and
    printed as ``R.ccl.allreduce``; compiling it needs a multi-worker runtime (LegalizeOps
    raises ValueError on this single-process one)."""
    return wrap_nested(op_call("ccl.allreduce", [x._expr], op_type=op_type), name)


def ccl_broadcast_from_worker0(x: Tensor, name: str = "broadcast_from_worker") -> Tensor:
    """Broadcast ``x`` from worker 0 to every worker (``R.ccl.broadcast_from_worker0``); needs a
    multi-worker runtime to compile, like :func:`ccl_allreduce`."""
    return wrap_nested(op_call("ccl.broadcast_from_worker0", [x._expr]), name)


def null_value() -> rx.Call:
    """``R.null_value()``: an empty object (the initial IO effect token)."""
    return op_call("null_value", [])
