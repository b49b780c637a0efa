"""LLVM IR emission (llvmlite.ir) for lowered PrimFuncs (plain loops, no blocks).

For each function two LLVM functions are emitted:

* ``i32 @<name>(ptr %data, ptr %shapes)`` — the ABI entry (see :mod:`builder.codegen.abi`):
  loads the symbolic vars and checks every dim, returns the 1-based index of the first failing
  check, otherwise unpacks the data pointers and calls the body;
* ``internal i32 @"<name>.compute"(ptr noalias %p0, ..., i64 %n, ...)`` — the body. Its buffer
  params are ``noalias`` (TVM's ``tir.noalias``); after inlining LLVM keeps that as scoped alias
  metadata, which lets it vectorize.

Value representation: ``bool`` is ``i1`` in registers and ``i8`` in memory; ``bfloat16`` is a
``float`` in registers (computed in float32) and ``i16`` in memory (rounded to nearest even on
store / cast); ``float16`` is ``half``. Index arithmetic is ``i64``. Float arithmetic carries the
fast-math flags ``reassoc contract nsz`` (no ``nnan`` / ``ninf``: ``-inf`` is a legal value).
Intermediate buffers are ``alloca``\\ s when small and static, ``malloc`` / ``free`` otherwise
(a failed ``malloc`` frees what is live and returns an error code).
"""
from __future__ import annotations

import struct
from typing import Callable

from llvmlite import ir

from ..ir import expr as E
from ..ir.expr import PrimExpr, Var
from ..ir.tir import (INTRINSICS, Allocate, Buffer, BufferLoad, BufferStore, Evaluate, For, IfThenElse,
                      LetStmt, PrimFunc, SeqStmt, Stmt, buffer_loads)
from ..ir.printer import print_prim_expr
from . import fastmath
from .fastmath import FAST_MATH
from .abi import Signature
from .loop_metadata import no_unroll_loop_metadata

__all__ = ["FAST_MATH", "NO_UNROLL", "ModuleEmitter", "reg_type", "mem_type", "elem_bytes", "round_to_bf16_bits"]

#: Static intermediate buffers up to this many bytes live on the stack.
ALLOCA_LIMIT = 32 * 1024

#: A serial ``For`` annotated ``{NO_UNROLL: True}`` gets ``llvm.loop.unroll.disable``: LLVM may
#: vectorize it but not unroll it (see :mod:`builder.codegen.accumulate`).
NO_UNROLL = "llvm.loop.unroll.disable"

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()


def _is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint") or dtype == "bool"


def reg_type(dtype: str) -> ir.Type:
    """LLVM type of a ``dtype`` value in registers. Raises ValueError for unknown dtypes."""
    if dtype == "bool":
        return I1
    if dtype in ("float32", "bfloat16"):
        return F32
    if dtype == "float16":
        return F16
    if dtype == "float64":
        return F64
    if dtype.startswith(("int", "uint")):
        bits = int(dtype.lstrip("uint") or 0)
        if bits in (8, 16, 32, 64):
            return ir.IntType(bits)
    raise ValueError(f"unsupported dtype {dtype!r}")


def mem_type(dtype: str) -> ir.Type:
    """LLVM type of a ``dtype`` element in memory. ``bool`` is an ``i8`` byte, ``bfloat16`` its ``i16`` bits,
    float16 / float32 / float64 ``half`` / ``float`` / ``double``, integers ``iN`` of their width (signedness
    is in the instructions). Raises ValueError for another dtype."""
    if dtype == "bool":
        return I8
    if dtype == "bfloat16":
        return I16
    return reg_type(dtype)


def elem_bytes(dtype: str) -> int:
    """Size of one element in memory. In bytes: 1 for ``bool`` and 8-bit integers, 2 for float16 / bfloat16 /
    16-bit integers, 4 and 8 for the 32- and 64-bit types. Raises ValueError for an unsupported dtype
    (:func:`mem_type`)."""
    t = mem_type(dtype)
    return {F16: 2, F32: 4, F64: 8}.get(t, None) or t.width // 8  # type: ignore[attr-defined]


def _suffix(t: ir.Type) -> str:
    return {F16: "f16", F32: "f32", F64: "f64"}[t] if t in (F16, F32, F64) else f"i{t.width}"


_FLOAT_ARITH = {E.Add: "fadd", E.Sub: "fsub", E.Mul: "fmul", E.Div: "fdiv"}
_INT_ARITH = {E.Add: "add", E.Sub: "sub", E.Mul: "mul"}
_CMP = {E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">="}


class ModuleEmitter:
    """Accumulates functions into one ``llvmlite.ir.Module`` (declarations shared)."""

    def __init__(self, triple: str = "", data_layout: str = "") -> None:
        self.module = ir.Module(name="model_builder_kernels")
        self.module.triple = triple
        self.module.data_layout = data_layout

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Get or declare an external function."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def intrinsic(self, base: str, t: ir.Type, nargs: int = 1) -> ir.Function:
        """``llvm.<base>.<type>`` taking ``nargs`` operands of type ``t``."""
        return self.declare(f"llvm.{base}.{_suffix(t)}", t, [t] * nargs)

    def add_function(self, name: str, func: PrimFunc, sig: Signature, optimize: bool = True
                     ) -> tuple[list[str], ir.Function]:
        """Emit entry + body of the lowered ``func`` under the symbol ``name``. ``optimize=False`` marks
        the kernel's functions (entry, body, thread-pool tasks) ``optnone noinline``: LLVM's optimizer
        skips them and its code generator takes its fast path (``-O0``) for them; for kernels whose work
        is a few values per row (:func:`builder.codegen.cold_kernel`).

        Returns the body's extra error messages (codes after the signature checks) and the body,
        ``i32 @"<name>.compute"(ptrs..., sym_vars...)``, which the entry of a specialization of ``func``
        (:func:`builder.codegen.dedup.specialization`) calls with some of the vars fixed.
        """
        before = set(self.module.globals)
        body_fn = ir.Function(
            self.module,
            ir.FunctionType(I32, [PTR] * len(func.params) + [I64] * len(sig.sym_vars)),
            name=f"{name}.compute")
        body_fn.linkage = "internal"
        body_fn.attributes.add("nounwind")
        for a in body_fn.args[:len(func.params)]:
            a.add_attribute("noalias")
        emitter = _BodyEmitter(self, body_fn, func, sig)
        emitter.run()
        self.add_entry(name, body_fn, func, sig)
        if not optimize:
            for g in self.module.globals.values():
                if (g.name not in before and isinstance(g, ir.Function) and g.blocks
                        and "alwaysinline" not in g.attributes):   # the inlined bodies go with their callers
                    g.attributes.add("optnone")
                    g.attributes.add("noinline")
        return emitter.extra_errors, body_fn

    def add_entry(self, name: str, body_fn: ir.Function, func: PrimFunc, sig: Signature,
                  body_syms: list | None = None, code_shift: int = 0) -> None:
        """Emit the exported entry ``int32 name(void **data, int64 *shapes)`` (the ABI of
        :mod:`builder.codegen.abi`) in front of ``body_fn``: it binds each symbolic var from ``shapes``, runs
        ``sig.checks`` in order (returning check ``k``'s 1-based code when a dim is negative or differs from
        its expected value), loads the parameters' data pointers and returns what ``body_fn(ptrs...,
        sym_vars...)`` returns (0 on success, else an error code).

        ``body_syms`` (the body of a more general kernel, :func:`builder.codegen.dedup.specialization`): the
        body's symbolic arguments instead, each an int constant or a Var of ``sig``; a nonzero code the body
        returns is then moved by ``code_shift`` (its errors are numbered after the general kernel's checks)."""
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR, PTR]), name=name)
        fn.attributes.add("nounwind")
        data, shapes = fn.args
        data.name, shapes.name = "data", "shapes"
        b = ir.IRBuilder(fn.append_basic_block("entry"))

        def shape_at(off: int) -> ir.Value:
            p = b.gep(shapes, [ir.Constant(I64, off)], inbounds=True, source_etype=I64)
            return b.load(p, typ=I64, align=8)

        env: dict = {}
        for var, off in sig.binds:
            v = shape_at(off)
            env[var] = v if reg_type(var.dtype) == I64 else b.trunc(v, reg_type(var.dtype))
        ex = _ExprEmitter(self, b, env)
        for k, chk in enumerate(sig.checks, start=1):
            actual = shape_at(chk.offset)
            if chk.kind == "nonneg":
                ok = b.icmp_signed(">=", actual, ir.Constant(I64, 0))
            else:
                expected = ex.cast_value(ex.expr(chk.expected), chk.expected.dtype, "int64")
                ok = b.icmp_signed("==", actual, expected)
            fail = fn.append_basic_block(f"check{k}.fail")
            cont = fn.append_basic_block(f"check{k}.ok")
            b.cbranch(ok, cont, fail)
            b.position_at_end(fail)
            b.ret(ir.Constant(I32, k))
            b.position_at_end(cont)
        ptrs = []
        for i in range(len(func.params)):
            p = b.gep(data, [ir.Constant(I64, i)], inbounds=True, source_etype=PTR)
            ptrs.append(b.load(p, typ=PTR, align=8))
        if body_syms is None:
            syms = [ex.cast_value(env[v], v.dtype, "int64") for v in sig.sym_vars]
        else:
            syms = [ir.Constant(I64, v) if isinstance(v, int) else ex.cast_value(env[v], v.dtype, "int64")
                    for v in body_syms]
        code = b.call(body_fn, ptrs + syms)
        if code_shift:
            code = b.select(b.icmp_signed("==", code, ir.Constant(I32, 0)), code,
                            b.add(code, ir.Constant(I32, code_shift)))
        b.ret(code)


class _ExprEmitter:
    """Emits scalar expressions with an IRBuilder; ``env`` maps Var -> LLVM value."""

    def __init__(self, mod: ModuleEmitter, builder: ir.IRBuilder, env: dict) -> None:
        self.mod = mod
        self.b = builder
        self.env = env

    # -- loads are only available in function bodies
    def load(self, e: BufferLoad) -> ir.Value:
        raise ValueError(f"buffer load {e} is not allowed in a shape expression")

    def expr(self, e: PrimExpr) -> ir.Value:
        b = self.b
        if isinstance(e, E.IntImm):
            return ir.Constant(reg_type(e.dtype), int(bool(e.value)) if e.dtype == "bool" else e.value)
        if isinstance(e, E.FloatImm):
            return self.float_const(e.value, e.dtype)
        if isinstance(e, Var):
            if e not in self.env:
                raise ValueError(f"variable '{e.name}' is not bound")
            return self.env[e]
        if isinstance(e, BufferLoad):
            return self.load(e)
        if isinstance(e, E.CmpOp) and type(e) in _CMP:
            a, c, dt = self.operands(e)
            op = _CMP[type(e)]
            if E.is_float_dtype(dt):
                if op == "!=":
                    return b.fcmp_unordered(op, a, c)
                return b.fcmp_ordered(op, a, c)
            if _is_unsigned(dt):
                return b.icmp_unsigned(op, a, c)
            return b.icmp_signed(op, a, c)
        if isinstance(e, (E.And, E.Or)):
            lhs = self.cast_value(self.expr(e.a), e.a.dtype, "bool")
            if buffer_loads(e.b):  # short-circuit: the rhs may read out of bounds
                if isinstance(e, E.And):
                    return self.conditional(lhs, lambda: self.as_bool(e.b),
                                            lambda: ir.Constant(I1, 0), I1)
                return self.conditional(lhs, lambda: ir.Constant(I1, 1),
                                        lambda: self.as_bool(e.b), I1)
            rhs = self.as_bool(e.b)
            return b.and_(lhs, rhs) if isinstance(e, E.And) else b.or_(lhs, rhs)
        if isinstance(e, E.Not):
            return b.xor(self.as_bool(e.a), ir.Constant(I1, 1))
        if isinstance(e, E.BinaryOp):
            return self.arith(e)
        if isinstance(e, E.Select):
            cond = self.as_bool(e.condition)
            if buffer_loads(e.true_value) or buffer_loads(e.false_value):
                return self.conditional(cond, lambda: self.typed(e.true_value, e.dtype),
                                        lambda: self.typed(e.false_value, e.dtype),
                                        reg_type(e.dtype))
            return b.select(cond, self.typed(e.true_value, e.dtype),
                            self.typed(e.false_value, e.dtype))
        if isinstance(e, E.Cast):
            return self.cast_value(self.expr(e.value), e.value.dtype, e.dtype)
        if isinstance(e, E.Call):
            return self.call(e)
        if isinstance(e, E.Let):
            self.env[e.var] = self.expr(e.value)
            try:
                return self.expr(e.body)
            finally:
                del self.env[e.var]
        raise TypeError(f"cannot generate code for {type(e).__name__} {e}")

    # -- helpers
    def typed(self, e: PrimExpr, dtype: str) -> ir.Value:
        return self.cast_value(self.expr(e), e.dtype, dtype)

    def as_bool(self, e: PrimExpr) -> ir.Value:
        return self.typed(e, "bool")

    def operands(self, e: E.BinaryOp) -> tuple[ir.Value, ir.Value, str]:
        dt = E.promote_dtype(e.a.dtype, e.b.dtype)
        return self.typed(e.a, dt), self.typed(e.b, dt), dt

    def float_const(self, value: float, dtype: str) -> ir.Value:
        if dtype == "bfloat16":
            value = _round_bf16_py(value)
        elif dtype in ("float16", "float32"):
            value = E.FloatImm(value, "float64").astype(dtype).value  # type: ignore[attr-defined]
        return ir.Constant(reg_type(dtype), value)

    def conditional(self, cond: ir.Value, then_fn: Callable[[], ir.Value],
                    else_fn: Callable[[], ir.Value], ty: ir.Type) -> ir.Value:
        """``cond ? then_fn() : else_fn()`` evaluating only the taken side."""
        b = self.b
        fn = b.block.parent
        then_bb = fn.append_basic_block("cond.then")
        else_bb = fn.append_basic_block("cond.else")
        merge_bb = fn.append_basic_block("cond.end")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = then_fn()
        then_end = b.block
        b.branch(merge_bb)
        b.position_at_end(else_bb)
        ev = else_fn()
        else_end = b.block
        b.branch(merge_bb)
        b.position_at_end(merge_bb)
        phi = b.phi(ty)
        phi.add_incoming(tv, then_end)
        phi.add_incoming(ev, else_end)
        return phi

    def arith(self, e: E.BinaryOp) -> ir.Value:
        b = self.b
        a, c, dt = self.operands(e)
        kind = type(e)
        if E.is_float_dtype(dt):
            if kind in _FLOAT_ARITH:
                return getattr(b, _FLOAT_ARITH[kind])(a, c, flags=FAST_MATH)
            if kind in (E.FloorDiv, E.FloorMod):
                q = self.fcall("floor", [b.fdiv(a, c, flags=FAST_MATH)])
                return q if kind is E.FloorDiv else b.fsub(a, b.fmul(q, c, flags=FAST_MATH), flags=FAST_MATH)
            # NaN-propagating (IEEE 754-2019 minimum / maximum): numpy's np.minimum /
            # np.maximum and PyTorch's relu / max keep a NaN, where minnum / maxnum drop it
            if kind in (E.Min, E.Max):
                return self.fcall("minimum" if kind is E.Min else "maximum", [a, c])
        else:
            unsigned = _is_unsigned(dt)
            if kind in _INT_ARITH:
                nsw = () if unsigned or reg_type(dt).width < 32 else ("nsw",)
                return getattr(b, _INT_ARITH[kind])(a, c, flags=nsw)
            if kind is E.Div:
                return b.udiv(a, c) if unsigned else b.sdiv(a, c)
            if kind in (E.FloorDiv, E.FloorMod):
                if unsigned:
                    return b.udiv(a, c) if kind is E.FloorDiv else b.urem(a, c)
                return self.floor_divmod(a, c, kind is E.FloorDiv)
            if kind in (E.Min, E.Max):
                op = "<" if kind is E.Min else ">"
                cmp = b.icmp_unsigned(op, a, c) if unsigned else b.icmp_signed(op, a, c)
                return b.select(cmp, a, c)
        raise TypeError(f"cannot generate code for {kind.__name__} on {dt}")

    def floor_divmod(self, a: ir.Value, c: ir.Value, want_div: bool) -> ir.Value:
        """Signed floor division / modulo (rounds toward minus infinity, as TVM's ``//``)."""
        b = self.b
        zero = ir.Constant(a.type, 0)
        q = b.sdiv(a, c)
        r = b.srem(a, c)
        # adjust when the remainder is nonzero and its sign differs from the divisor's
        adjust = b.and_(b.icmp_signed("!=", r, zero),
                        b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", c, zero)))
        if want_div:
            return b.sub(q, b.zext(adjust, a.type))
        return b.add(r, b.select(adjust, c, zero))

    def fcall(self, base: str, args: list[ir.Value]) -> ir.Value:
        """``llvm.<base>`` on ``args``; float32 ``exp`` is :func:`~builder.codegen.fastmath.exp_f32`
        instead (plain arithmetic the loop vectorizer can vectorize; ``llvm.exp`` becomes a libm
        call per element)."""
        if base == "exp" and args[0].type == F32:
            return fastmath.exp_f32(self, args[0])
        return self.b.call(self.mod.intrinsic(base, args[0].type, len(args)), args, fastmath=FAST_MATH)

    def libm_call(self, names: tuple[str, str], x: ir.Value) -> ir.Value:
        """The C library function ``names[0]`` (float32; float16 ``x`` goes through float32) or
        ``names[1]`` (float64) on ``x``: one call per element (the loop is not vectorized)."""
        b = self.b
        if x.type == F64:
            return b.call(self.mod.declare(names[1], F64, [F64]), [x], fastmath=FAST_MATH)
        y = b.call(self.mod.declare(names[0], F32, [F32]), [b.fpext(x, F32) if x.type == F16 else x],
                   fastmath=FAST_MATH)
        return b.fptrunc(y, F16) if x.type == F16 else y

    def fail_if(self, cond: ir.Value, message: str) -> None:
        """Return the error ``message`` from the function when ``cond`` holds. Only a function
        body can (``_BodyEmitter``); elsewhere raises TypeError."""
        raise TypeError(f"a run-time check ({message}) can only be emitted in a function body")

    def call(self, e: E.Call) -> ir.Value:
        b = self.b
        op = e.op
        if op == "checked_index":
            # ``checked_index(j, dim)``: j, after returning an error code when j is outside
            # [0, dim) (see builder.te.topi.checked_index)
            j = self.typed(e.args[0], "int64")
            dim = self.typed(e.args[1], "int64")
            self.fail_if(b.icmp_unsigned(">=", j, dim),
                         f"index out of range: expected 0 <= index < {print_prim_expr(e.args[1])}")
            return j
        if op == "assert_le":
            # ``assert_le(E, D)`` (see builder.te.prim_func._read_checks): an error when a loop
            # of E iterations would read past a dim of D elements
            ext = self.typed(e.args[0], "int64")
            dim = self.typed(e.args[1], "int64")
            message = (f"{e.args[2].value} ({print_prim_expr(e.args[0])} > {print_prim_expr(e.args[1])})"
                       if len(e.args) > 2 else
                       f"shapes do not match: a loop of {print_prim_expr(e.args[0])} iterations "
                       f"reads a dim of {print_prim_expr(e.args[1])} elements")
            self.fail_if(b.icmp_signed(">", ext, dim), message)
            return ext
        if op == "if_then_else":
            cond = self.as_bool(e.args[0])
            return self.conditional(cond, lambda: self.typed(e.args[1], e.dtype),
                                    lambda: self.typed(e.args[2], e.dtype), reg_type(e.dtype))
        if not E.is_float_dtype(e.dtype):
            raise TypeError(f"intrinsic {op} needs a float operand, got {e.dtype} in {e}")
        intrinsic = INTRINSICS.get(op)
        args = [self.typed(a, e.dtype) for a in e.args]
        if intrinsic is not None and intrinsic.emit:
            return getattr(fastmath, intrinsic.emit)(self, *args)
        if intrinsic is not None and intrinsic.llvm:
            return self.fcall(intrinsic.llvm, args)
        if intrinsic is not None and intrinsic.libm:
            return self.libm_call(intrinsic.libm, args[0])
        raise ValueError(f"unknown intrinsic {op!r} in {e}")

    def cast_value(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        """Convert a register value from dtype ``src`` to dtype ``dst`` (C conversion rules;
        ``bfloat16`` results are rounded to bfloat16 precision)."""
        if src == dst:
            return v
        b = self.b
        st, dt = reg_type(src), reg_type(dst)
        sf, df = E.is_float_dtype(src), E.is_float_dtype(dst)
        if dst == "bool":
            if sf:
                return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
        if sf and df:
            if st == F64 and dst in ("float16", "bfloat16"):
                # via float32 rounded to odd: one correct rounding, and no __truncdfhf2 libcall
                out = self.f64_to_f32_round_odd(v)
                if dt == F16:
                    out = b.fptrunc(out, F16)
            elif st == dt:
                out = v
            elif _fbits(st) < _fbits(dt):
                out = b.fpext(v, dt)
            else:
                out = b.fptrunc(v, dt)
        elif sf:
            return b.fptoui(v, dt) if _is_unsigned(dst) else b.fptosi(v, dt)
        elif df:
            out = b.uitofp(v, dt) if _is_unsigned(src) else b.sitofp(v, dt)
        else:
            if st.width == dt.width:
                return v
            if st.width > dt.width:
                return b.trunc(v, dt)
            return b.zext(v, dt) if _is_unsigned(src) else b.sext(v, dt)
        if dst == "bfloat16":
            out = self.bf16_bits_to_float(self.float_to_bf16_bits(out))
        return out

    def f64_to_f32_round_odd(self, v: ir.Value) -> ir.Value:
        """``double`` -> ``float`` rounded to odd (truncate, then set the last bit when inexact);
        a further round-to-nearest-even to a narrower float is then correctly rounded."""
        b = self.b
        f = b.fptrunc(v, F32)
        back = b.fpext(f, F64)
        inexact = b.fcmp_ordered("!=", back, v)  # false for NaN
        away = b.fcmp_ordered(">", self.fcall("fabs", [back]), self.fcall("fabs", [v]))
        bits = b.sub(b.bitcast(f, I32), b.zext(away, I32))  # step the magnitude toward zero
        bits = b.or_(bits, b.zext(inexact, I32))
        return b.bitcast(bits, F32)

    def float_to_bf16_bits(self, v: ir.Value) -> ir.Value:
        """Round a ``float`` to the nearest-even bfloat16 and return its ``i16`` bits."""
        return round_to_bf16_bits(self.b, v)

    def bf16_bits_to_float(self, v: ir.Value) -> ir.Value:
        """Widen bfloat16 ``i16`` bits to a ``float``."""
        b = self.b
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)


def round_to_bf16_bits(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Round ``float`` (or ``<n x float>``) ``v`` to the nearest-even bfloat16 and return its ``i16``
    (``<n x i16>``) bits: add ``0x7FFF`` plus the lowest kept bit, keep the upper 16 bits (PyTorch's
    ``round_to_nearest_even`` in ``c10/util/BFloat16.h``); a NaN becomes the quiet NaN ``0x7FC0``."""
    n = v.type.count if isinstance(v.type, ir.VectorType) else 0

    def c(t, value):
        return ir.Constant(ir.VectorType(t, n), [value] * n) if n else ir.Constant(t, value)

    bits = b.bitcast(v, ir.VectorType(I32, n) if n else I32)
    lsb = b.and_(b.lshr(bits, c(I32, 16)), c(I32, 1))
    rounded = b.add(b.add(bits, c(I32, 0x7FFF)), lsb)
    hi = b.trunc(b.lshr(rounded, c(I32, 16)), ir.VectorType(I16, n) if n else I16)
    return b.select(b.fcmp_unordered("uno", v, v), c(I16, 0x7FC0), hi)


def _fbits(t: ir.Type) -> int:
    return {F16: 16, F32: 32, F64: 64}[t]


def _round_bf16_py(value: float) -> float:
    """Round a Python float to the nearest-even bfloat16 value (as a float)."""
    if value != value:
        return value
    try:
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:
        return value
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


class BufferExprEmitter(_ExprEmitter):
    """Expressions with buffer loads / stores: ``ptrs`` maps ``id(buffer)`` to its base pointer,
    ``env`` maps Var -> LLVM value. Used by function bodies and by the kernel emitters of
    :mod:`builder.codegen.kernels` (which build one per task function)."""

    def __init__(self, mod: ModuleEmitter, builder: ir.IRBuilder, env: dict,
                 ptrs: dict[int, ir.Value]) -> None:
        super().__init__(mod, builder, env)
        self.ptrs = ptrs

    # -- memory
    def address(self, buf: Buffer, indices) -> ir.Value:
        """The address of ``buf[indices]`` (row-major, an ``inbounds`` GEP from the buffer's base pointer;
        no indices: the base pointer itself). Raises ValueError for a buffer that is neither a parameter nor
        allocated in the function."""
        ptr = self.ptrs.get(id(buf))
        if ptr is None:
            raise ValueError(f"buffer '{buf.name}' is neither a param nor allocated")
        if not indices:
            return ptr
        b = self.b
        off = None
        for d, idx in enumerate(indices):
            i = self.typed(idx, "int64")
            if off is None:
                off = i
            else:
                dim = self.typed(buf.shape[d], "int64")
                off = b.add(b.mul(off, dim, flags=("nsw",)), i, flags=("nsw",))
        return b.gep(ptr, [off], inbounds=True, source_etype=mem_type(buf.dtype))

    def load(self, e: BufferLoad) -> ir.Value:
        """The value of ``BufferLoad`` ``e`` in register form: ``bool`` bytes as i1, ``bfloat16`` bits widened
        to float32, other dtypes as stored. Raises ValueError for an unknown buffer (:meth:`address`)."""
        dtype = e.buffer.dtype
        v = self.b.load(self.address(e.buffer, e.indices), typ=mem_type(dtype),
                        align=elem_bytes(dtype))
        if dtype == "bool":
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        if dtype == "bfloat16":
            return self.bf16_bits_to_float(v)
        return v

    def store_value(self, buf: Buffer, value: ir.Value, ptr: ir.Value) -> None:
        """Store a register value of ``buf.dtype`` at ``ptr`` (memory representation)."""
        dtype = buf.dtype
        if dtype == "bool":
            value = self.b.zext(value, I8)
        elif dtype == "bfloat16":
            value = self.float_to_bf16_bits(value)
        self.b.store(value, ptr, align=elem_bytes(dtype))

    def store(self, s: BufferStore) -> None:
        """Emit ``BufferStore`` ``s``: its value cast to the buffer's dtype, stored in memory form
        (:meth:`store_value`) at :meth:`address`. Raises ValueError for an unknown buffer
        (:meth:`address`) or a dtype with no memory type here (:func:`mem_type`)."""
        v = self.typed(s.value, s.buffer.dtype)
        self.store_value(s.buffer, v, self.address(s.buffer, s.indices))


class _BodyEmitter(BufferExprEmitter):
    """Emits the statements of a lowered PrimFunc into ``<name>.compute``."""

    def __init__(self, mod: ModuleEmitter, fn: ir.Function, func: PrimFunc, sig: Signature) -> None:
        self.fn = fn
        self.func = func
        self.sig = sig
        self.alloca_block = fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(self.alloca_block)
        start = fn.append_basic_block("body")
        super().__init__(mod, ir.IRBuilder(start), {}, {})
        self.start = start
        self.extra_errors: list[str] = []
        self.live_heap: list[ir.Value] = []
        nparams = len(func.params)
        for p, arg in zip(func.params, fn.args[:nparams]):
            arg.name = _llvm_name(p.name)
            self.ptrs[id(p)] = arg
        for v, arg in zip(sig.sym_vars, fn.args[nparams:]):
            arg.name = _llvm_name(sig.sym_names[v])
            self.env[v] = self.b.trunc(arg, reg_type(v.dtype)) if reg_type(v.dtype) != I64 else arg

    def fail_if(self, cond: ir.Value, message: str) -> None:
        """Branch out of the function with a new body error ``message`` (its code numbered after
        the signature checks) when ``cond`` holds, freeing the live heap buffers first."""
        b = self.b
        self.extra_errors.append(message)
        code = len(self.sig.checks) + len(self.extra_errors)
        fail = self.fn.append_basic_block("check.fail")
        ok = self.fn.append_basic_block("check.ok")
        b.cbranch(cond, fail, ok)
        b.position_at_end(fail)
        free = self.mod.declare("free", ir.VoidType(), [PTR])
        for live in reversed(self.live_heap):
            b.call(free, [live])
        b.ret(ir.Constant(I32, code))
        b.position_at_end(ok)

    def run(self) -> None:
        self.stmt(self.func.body)
        if not self.b.block.is_terminated:
            self.b.ret(ir.Constant(I32, 0))
        self.alloca_builder.branch(self.start)

    # -- statements
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, SeqStmt):
            for c in s.seq:
                self.stmt(c)
        elif isinstance(s, BufferStore):
            self.store(s)
        elif isinstance(s, For):
            self.for_(s)
        elif isinstance(s, IfThenElse):
            self.if_(s)
        elif isinstance(s, LetStmt):
            self.env[s.var] = self.typed(s.value, s.var.dtype)
            self.stmt(s.body)
            del self.env[s.var]
        elif isinstance(s, Evaluate):
            self.expr(s.value)
        elif isinstance(s, Allocate):
            self.allocate(s)
        else:
            raise TypeError(f"cannot generate code for {type(s).__name__}; lower blocks first")

    def for_(self, f: For) -> None:
        if f.kind == "parallel":
            self.parallel_for(f)
            return
        self.serial_for(f, self.typed(f.min, f.loop_var.dtype),
                        self.b.add(self.typed(f.min, f.loop_var.dtype),
                                   self.typed(f.extent, f.loop_var.dtype), flags=("nsw",)))

    def serial_for(self, f: For, lo: ir.Value, hi: ir.Value) -> None:
        """``for f.loop_var in [lo, hi): f.body``."""
        b = self.b
        t = reg_type(f.loop_var.dtype)
        pre = b.block
        name = _llvm_name(f.loop_var.name)
        header = self.fn.append_basic_block(f"{name}.header")
        body = self.fn.append_basic_block(f"{name}.body")
        exit_ = self.fn.append_basic_block(f"{name}.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(t, name=name)
        iv.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", iv, hi), body, exit_)
        b.position_at_end(body)
        self.env[f.loop_var] = iv
        self.stmt(f.body)
        del self.env[f.loop_var]
        nxt = b.add(iv, ir.Constant(t, 1), flags=("nsw",))
        iv.add_incoming(nxt, b.block)
        br = b.branch(header)
        if f.annotations.get(NO_UNROLL):
            br.set_metadata("llvm.loop", no_unroll_loop_metadata(self.mod.module))
        b.position_at_end(exit_)

    def _inner_work(self, s: Stmt) -> PrimExpr:
        """Innermost iterations of ``s`` per execution (loop extents that only use values
        known here; others count as 1)."""
        if isinstance(s, SeqStmt):
            total: PrimExpr = E.IntImm(0, "int64")
            for c in s.seq:
                total = total + self._inner_work(c)
            return total
        if isinstance(s, For):
            ext = s.extent if all(v in self.env for v in E.free_vars(s.extent)) else E.IntImm(1, "int64")
            return ext.astype("int64") * self._inner_work(s.body)
        if isinstance(s, (LetStmt, Allocate)):
            return self._inner_work(s.body)
        if isinstance(s, IfThenElse):
            return self._inner_work(s.then_case)
        return E.IntImm(1, "int64")

    def parallel_for(self, f: For) -> None:
        """A ``parallel`` loop: its body is outlined into ``<fn>.par<k>(ctx, task)``, which runs
        a contiguous chunk of iterations; the chunks go to ``mb_parallel_for`` when the loop
        has at least :data:`~builder.codegen.schedule.PARALLEL_MIN_ELEMENTS` innermost
        iterations and the pool has several threads, else the one chunk runs here."""
        from .schedule import PARALLEL_MIN_ELEMENTS

        b = self.b
        dt = f.loop_var.dtype
        lo = self.typed(f.min, dt)
        ext = self.typed(f.extent, dt)
        lo64 = self.cast_value(lo, dt, "int64")
        ext64 = self.cast_value(ext, dt, "int64")
        work = b.mul(ext64, self.typed(E.simplify(self._inner_work(f.body)), "int64"))
        env_items = list(self.env.items())
        ptr_items = list(self.ptrs.items())
        fields = [v.type for _, v in env_items] + [PTR] * len(ptr_items) + [I64, I64, I64]
        ctx_t = ir.LiteralStructType(fields)
        k = getattr(self.mod, "_par_count", 0)
        self.mod._par_count = k + 1
        task = ir.Function(self.mod.module, ir.FunctionType(I32, [PTR, I64]),
                           name=f"{self.fn.name}.par{k}")
        task.linkage = "internal"
        task.attributes.add("nounwind")
        _TaskEmitter(self, task, ctx_t, env_items, ptr_items, f).run()
        nthreads = b.sext(b.call(self.mod.declare("mb_num_threads", I32, []), []), I64)
        big = b.and_(b.icmp_signed(">=", work, ir.Constant(I64, PARALLEL_MIN_ELEMENTS)),
                     b.icmp_signed(">", nthreads, ir.Constant(I64, 1)))
        many = b.mul(nthreads, ir.Constant(I64, 4))
        many = b.select(b.icmp_signed("<", ext64, many), ext64, many)
        ntasks = b.select(big, many, ir.Constant(I64, 1))
        ntasks = b.select(b.icmp_signed("<", ntasks, ir.Constant(I64, 1)), ir.Constant(I64, 1), ntasks)
        slot = self.alloca_builder.alloca(ctx_t, name="par.ctx")
        values = [v for _, v in env_items] + [p for _, p in ptr_items] + [lo64, ext64, ntasks]
        for i, v in enumerate(values):
            b.store(v, b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
        one = b.icmp_signed("==", ntasks, ir.Constant(I64, 1))
        par = self.mod.declare("mb_parallel_for", I32, [PTR, PTR, I64])
        rc_serial_bb = self.fn.append_basic_block("par.serial")
        rc_par_bb = self.fn.append_basic_block("par.pool")
        join = self.fn.append_basic_block("par.join")
        b.cbranch(one, rc_serial_bb, rc_par_bb)
        b.position_at_end(rc_serial_bb)
        rc1 = b.call(task, [slot, ir.Constant(I64, 0)])
        b.branch(join)
        b.position_at_end(rc_par_bb)
        rc2 = b.call(par, [task, slot, ntasks])
        b.branch(join)
        b.position_at_end(join)
        rc = b.phi(I32)
        rc.add_incoming(rc1, rc_serial_bb)
        rc.add_incoming(rc2, rc_par_bb)
        fail = self.fn.append_basic_block("par.fail")
        ok = self.fn.append_basic_block("par.ok")
        b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), fail, ok)
        b.position_at_end(fail)
        free = self.mod.declare("free", ir.VoidType(), [PTR])
        for live in reversed(self.live_heap):
            b.call(free, [live])
        b.ret(rc)
        b.position_at_end(ok)

    def if_(self, s: IfThenElse) -> None:
        b = self.b
        cond = self.as_bool(s.condition)
        then_bb = self.fn.append_basic_block("if.then")
        end_bb = self.fn.append_basic_block("if.end")
        else_bb = self.fn.append_basic_block("if.else") if s.else_case is not None else end_bb
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        self.stmt(s.then_case)
        if not b.block.is_terminated:
            b.branch(end_bb)
        if s.else_case is not None:
            b.position_at_end(else_bb)
            self.stmt(s.else_case)
            if not b.block.is_terminated:
                b.branch(end_bb)
        b.position_at_end(end_bb)

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        b = self.b
        esize = elem_bytes(buf.dtype)
        static = all(isinstance(E.simplify(d), E.IntImm) for d in buf.shape)
        count = 1
        if static:
            for d in buf.shape:
                count *= E.simplify(d).value  # type: ignore[attr-defined]
        if static and count * esize <= ALLOCA_LIMIT:
            slot = self.alloca_builder.alloca(mem_type(buf.dtype),
                                              size=ir.Constant(I64, max(count, 1)),
                                              name=_llvm_name(buf.name))
            slot.align = 64
            self.ptrs[id(buf)] = slot
            self.stmt(s.body)
            del self.ptrs[id(buf)]
            return
        nbytes = ir.Constant(I64, esize)
        for d in buf.shape:
            nbytes = b.mul(nbytes, self.typed(d, "int64"), flags=("nsw",))
        one = ir.Constant(I64, 1)
        size = b.select(b.icmp_signed("<", nbytes, one), one, nbytes)
        malloc = self.mod.declare("malloc", PTR, [I64])
        free = self.mod.declare("free", ir.VoidType(), [PTR])
        ptr = b.call(malloc, [size], name=_llvm_name(buf.name))
        self.extra_errors.append(f"out of memory allocating intermediate buffer '{buf.name}'")
        code = len(self.sig.checks) + len(self.extra_errors)
        fail = self.fn.append_basic_block("alloc.fail")
        ok = self.fn.append_basic_block("alloc.ok")
        b.cbranch(b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), fail, ok)
        b.position_at_end(fail)
        for live in reversed(self.live_heap):
            b.call(free, [live])
        b.ret(ir.Constant(I32, code))
        b.position_at_end(ok)
        self.live_heap.append(ptr)
        self.ptrs[id(buf)] = ptr
        self.stmt(s.body)
        del self.ptrs[id(buf)]
        self.live_heap.pop()
        self.b.call(free, [ptr])


class _TaskEmitter(_BodyEmitter):
    """The outlined body of a parallel loop.

    ``i32 <fn>.par<k>(ptr ctx, i64 index)`` loads every value and buffer pointer the body may
    use from ``ctx`` (layout: env values, pointers, lo, ext, ntasks) and calls
    ``<fn>.par<k>.body(values..., ptr noalias buffers..., i64 lo, i64 hi)``, which runs
    iterations ``[lo, hi)`` of chunk ``index`` (``lo + index * ext / ntasks`` up to the next
    chunk). The buffer pointers are ``noalias`` parameters again (the struct loses that), so
    LLVM vectorizes the body as it would inline. Errors inside (failed allocations) return
    their code, as the parent would."""

    def __init__(self, parent: "_BodyEmitter", fn: ir.Function, ctx_t: ir.LiteralStructType,
                 env_items: list, ptr_items: list, loop: For) -> None:
        module = parent.mod.module
        n_env = len(env_items)
        body_t = ir.FunctionType(I32, [v.type for _, v in env_items] + [PTR] * len(ptr_items)
                                 + [I64, I64])
        inner = ir.Function(module, body_t, name=f"{fn.name}.body")
        inner.linkage = "internal"
        inner.attributes.add("nounwind")
        inner.attributes.add("alwaysinline")
        for a in inner.args[n_env:n_env + len(ptr_items)]:
            a.add_attribute("noalias")
        # the wrapper: unpack the context, pick the chunk, call the body
        wb = ir.IRBuilder(fn.append_basic_block("entry"))
        ctx, idx = fn.args
        vals = []
        for i, t in enumerate(ctx_t.elements):
            p = wb.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                       source_etype=ctx_t)
            vals.append(wb.load(p, typ=t))
        lo, ext, ntasks = vals[-3:]
        start_i = wb.sdiv(wb.mul(idx, ext), ntasks)
        end_i = wb.sdiv(wb.mul(wb.add(idx, ir.Constant(I64, 1)), ext), ntasks)
        wb.ret(wb.call(inner, vals[:-3] + [wb.add(lo, start_i), wb.add(lo, end_i)]))
        # the body
        self.fn = inner
        self.func = parent.func
        self.sig = parent.sig
        self.loop = loop
        self.alloca_block = inner.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(self.alloca_block)
        start = inner.append_basic_block("body")
        BufferExprEmitter.__init__(self, parent.mod, ir.IRBuilder(start), {}, {})
        self.start = start
        self.extra_errors = parent.extra_errors  # shared numbering of body errors
        self.live_heap = []
        args = list(inner.args)
        for (var, _), v in zip(env_items, args[:n_env]):
            self.env[var] = v
        for (key, _), v in zip(ptr_items, args[n_env:n_env + len(ptr_items)]):
            self.ptrs[key] = v
        self.range = (args[-2], args[-1])

    def run(self) -> None:
        dt = self.loop.loop_var.dtype
        lo, hi = (self.cast_value(v, "int64", dt) for v in self.range)
        self.serial_for(self.loop, lo, hi)
        if not self.b.block.is_terminated:
            self.b.ret(ir.Constant(I32, 0))
        self.alloca_builder.branch(self.start)


def _llvm_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._" else "_" for c in name) or "v"
