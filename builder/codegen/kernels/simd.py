"""Vector ISA of a target and the IR-building helpers the kernel emitters share.

:class:`SimdInfo` is derived from a :class:`~builder.codegen.llvm_target.Target`'s feature string
(``+avx512f,+avx2,+fma,+f16c,...``) and picks the widest float32 vectors the CPU has:

=========  ======  =========  =====================================================
ISA        lanes   registers  condition
=========  ======  =========  =====================================================
avx512     16      32         ``avx512f`` (and ``avx512bw`` / ``avx512vl``)
avx2       8       16         ``avx2`` and ``fma``
avx        8       16         ``avx`` (no FMA: ``llvm.fmuladd`` becomes mul + add)
sse        4       16         x86-64 baseline (SSE2)
neon       4       32         AArch64
scalar     1       --         anything else: the kernel emitters decline and the generic
                              loop code runs
=========  ======  =========  =====================================================

``MB_SIMD`` (``avx512``, ``avx2``, ``avx``, ``sse``, ``neon``, ``scalar``) caps the choice, for
testing the fallbacks on a bigger machine: on x86 the host's target (:meth:`builder.codegen.Target.host`)
then has the features above that level turned off too (:func:`capped_features`), so LLVM generates
what a CPU of that level runs (under ``avx2``: VEX encodings and 16 vector registers, no AVX-512
instructions or embedded broadcasts, VNNI only as AVX-VNNI) and the kernels' code is checked, and
timed, as such a CPU would run it; ``MB_SIMD_SHAPE`` (``avx512``, ``avx2``, ``sse``,
``neon``) forces the kernels' vector shape (lanes, register budget) whatever the target, so the
16-lane AVX-512 kernels can be run and checked on an AVX2 host (LLVM splits the vectors). 16-bit float weights are widened in registers:
``fpext <N x half>`` (one ``vcvtph2ps`` with F16C; a libgcc call per element without) and a
shift for bfloat16. ``int8_dot`` marks hosts with AVX2 integer multiply-adds; the
int8-activation GEMV uses them on the kernels' vector width: 512 bits with the 16-lane shape
(``int8_512``: the target's own AVX512BW ``vpmaddubsw`` / ``vpmaddwd`` on zmm; without it, as
under ``MB_SIMD_SHAPE=avx512`` on an AVX2 host, each 512-bit operation is two 256-bit ones). ``avx512bf16`` marks
hosts with ``vdpbf16ps`` (bfloat16 pair dot products into float32, :meth:`KFunc.dot_bf16`):
the GEMV of bfloat16 activations and weights uses it, and the GEMM where ``bf16dot_gemm``: a
core that issues it at least at the rate of its float32 FMAs. AMD's Zen 4 / 5 do (an AMD target
is told by ``sse4a`` in its features); Intel's AVX-512 cores run it at half the FMA rate
(measured by ``benchmarks/bench_mlp.py``'s peak probe on a Xeon with AMX, 2 cores: 245 GFLOP/s
against 492 for the FMAs), where the float32 GEMM on widened weights was faster (LlamaMLP bfloat16
batch 128: 101 against 162 ms); the memory-bound GEMV keeps it (batch 1 as fast as the float32
path with the same prefetch there, 8.8 ms; 8.6 against 9.5 before the dense GEMV prefetched every line).

``vnni`` marks hosts with ``vpdpbusd`` on 256-bit vectors (AVX-VNNI, or AVX512-VNNI with
AVX512VL): the int8-activation GEMV and GEMM use it in place of ``vpmaddubsw`` + ``vpmaddwd``
(:meth:`KFunc.dot_u8s8`); ``vnni_512``: on zmm too (AVX512-VNNI).

``amx`` marks a host with AMX-BF16 tiles that this process may use (the OS grants the tile state:
:func:`runtime.host.amx_permitted`), in the target's own 16-lane shape: the GEMM of bfloat16 models, and
of float32 ones at a ``matmul_precision`` below ``highest``, runs on them (:mod:`.linear.amx`).

``MB_SIMD_OFF=vnni,avx512bf16,amx`` (testing hook, :func:`features_off`) turns those features off on the host's
target as ``MB_SIMD`` does the levels above its cap: ``MB_SIMD=avx2 MB_SIMD_OFF=vnni`` compiles what an AMD Zen 3
runs (AVX2 + FMA without any VNNI: the int8 kernels on ``vpmaddubsw`` / ``vpmaddwd``), ``MB_SIMD_OFF=vnni``
alone what a Skylake-X runs (AVX512BW without VNNI), on any host that has those instructions.

``MB_SIMD_EMULATE=avx512bf16,vnni,amx`` (testing hook) turns such an instruction on for a host
that lacks it, emitted as other IR of the same arithmetic (:attr:`SimdInfo.emulated`), so the
kernels built around it run and are checked on any machine; :func:`builder.codegen.emit_llvm_ir` for a
``Target`` that has the feature (``cpu="znver5"``) shows the real instruction being selected.

:class:`KFunc` wraps one LLVM function under construction: an ``entry`` block for
``alloca``\\ s (promoted to registers by SROA), structured loops with phi induction variables,
``if`` blocks and vector helpers (splat, ``llvm.fmuladd``, horizontal sums, in-register
transposes).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, replace

from llvmlite import ir

from runtime.host import amx_permitted

from ..llvm_emit import F16, F32, I8, I16, I32, I64, PTR, BufferExprEmitter, reg_type
from ..loop_metadata import (finalize_loop_metadata, interleave_loop_metadata, no_unroll_loop_metadata,  # noqa: F401
                             plain_loop_metadata)

__all__ = ["SimdInfo", "KFunc", "BF16", "vec", "const_vec", "plain_loop_metadata",
           "no_unroll_loop_metadata", "finalize_loop_metadata", "simd_cap", "capped_features", "features_off"]

_ORDER = ("scalar", "sse", "neon", "avx", "avx2", "avx512")
_EMULABLE = ("avx512bf16", "vnni", "amx")

#: Prefixes of the x86 target features above each vector level that ``MB_SIMD`` can cap a host to
#: (``scalar`` keeps the x86-64 baseline: its kernels decline and the loops run on SSE2).
_X86_ABOVE: dict[str, tuple[str, ...]] = {"avx2": ("avx512", "avx10", "evex512", "amx-")}
_X86_ABOVE["avx"] = _X86_ABOVE["avx2"] + ("avx2", "fma", "avxvnni", "avxifma", "avxneconvert", "vaes",
                                          "vpclmulqdq", "xop")
_X86_ABOVE["sse"] = _X86_ABOVE["avx"] + ("avx", "f16c")
_X86_ABOVE["scalar"] = _X86_ABOVE["sse"]


#: Prefixes of the x86 target features each name of ``MB_SIMD_OFF`` turns off (:func:`features_off`):
#: ``vnni`` every VNNI form (AVX-VNNI and its int8 / int16 extensions, AVX512-VNNI; AVX10 includes it),
#: ``avx512bf16`` the bfloat16 dot products, ``amx`` the tiles.
_X86_OFF: dict[str, tuple[str, ...]] = {"vnni": ("avxvnni", "avx512vnni", "avx10"),
                                        "avx512bf16": ("avx512bf16", "avx10"),
                                        "amx": ("amx-",)}


def features_off() -> frozenset[str]:
    """The feature groups ``MB_SIMD_OFF`` (a comma list of ``vnni``, ``avx512bf16``, ``amx``; testing
    hook) turns off on the host's target, lower-cased; empty when unset. ``MB_SIMD=avx2 MB_SIMD_OFF=vnni``
    compiles what an AMD Zen 3 runs (AVX2 + FMA, no VNNI: ``vpmaddubsw`` / ``vpmaddwd``), ``MB_SIMD_OFF=vnni``
    alone what a Skylake-X runs (AVX512BW without VNNI).

    Raises ValueError for an unknown name, listing the known ones."""
    off = frozenset(f.strip().lower() for f in os.environ.get("MB_SIMD_OFF", "").split(",") if f.strip())
    unknown = off - set(_X86_OFF)
    if unknown:
        raise ValueError(f"MB_SIMD_OFF: unknown feature(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(_X86_OFF)}")
    return off


def simd_cap() -> str | None:
    """The vector level ``MB_SIMD`` caps the host to (lower-cased), None when it is unset or empty.

    Raises ValueError for a value that is not one of ``scalar``, ``sse``, ``neon``, ``avx``, ``avx2``,
    ``avx512``."""
    cap = os.environ.get("MB_SIMD", "").strip().lower()
    if not cap:
        return None
    if cap not in _ORDER:
        raise ValueError(f"MB_SIMD must be one of {', '.join(_ORDER)}, got {cap!r}")
    return cap


def capped_features(triple: str, features: str, cap: str | None = None,
                    off: frozenset[str] | None = None) -> str:
    """An LLVM feature string (``+a,-b,...``) with every x86 feature above the vector level ``cap``
    (default: :func:`simd_cap`) turned off (``+avx512f`` -> ``-avx512f``, ...), so that code
    generated for it runs on a CPU of that level, and those of the groups ``off`` (default:
    :func:`features_off`, ``MB_SIMD_OFF``; e.g. ``{"vnni"}``); unchanged without a cap or groups, for
    ``avx512`` or ``neon``, and for a triple that is not x86-64.

    Raises ValueError as :func:`simd_cap` / :func:`features_off`, or for an unknown ``cap``."""
    cap = simd_cap() if cap is None else cap
    off = features_off() if off is None else off
    if cap is not None and cap not in _ORDER:
        raise ValueError(f"unknown vector level {cap!r}; known: {', '.join(_ORDER)}")
    unknown = set(off) - set(_X86_OFF)
    if unknown:
        raise ValueError(f"unknown feature group(s) {', '.join(sorted(unknown))}; known: {', '.join(_X86_OFF)}")
    above = _X86_ABOVE.get(cap, ()) + tuple(p for g in sorted(off) for p in _X86_OFF[g])
    if not above or triple.split("-")[0] not in ("x86_64", "amd64"):
        return features
    return ",".join("-" + f[1:] if f.startswith("+") and f[1:].startswith(above) else f
                    for f in features.split(",") if f)


@dataclass(frozen=True)
class SimdInfo:
    """The vector unit kernels are generated for (see the module docstring)."""

    name: str
    lanes: int
    registers: int
    f16c: bool = False
    avx512bf16: bool = False
    int8_dot: bool = False    # AVX2 integer multiply-adds (vpmaddubsw / vpmaddwd on 256 bits)
    emulated: frozenset = frozenset()   # features emitted as generic IR (MB_SIMD_EMULATE)
    vnni: bool = False        # vpdpbusd on 256 bits (AVX-VNNI, or AVX512-VNNI with AVX512VL)
    int8_512: bool = False    # the target's own 512-bit integer multiply-adds (AVX512BW)
    vnni_512: bool = False    # the target's own 512-bit vpdpbusd (AVX512-VNNI)
    bf16dot_gemm: bool = False  # vdpbf16ps at least at the FMAs' rate: the GEMM uses it too (AMD)
    amx: bool = False         # AMX-BF16 tiles the process may use (runtime.host.amx_permitted)
    matmul_precision: str = "highest"   # the target's float32 matmul precision (codegen.llvm_target)

    def native(self, feature: str) -> bool:
        """True when ``feature`` (e.g. ``"avx512bf16"``) is emitted as its instruction rather
        than emulated (see ``MB_SIMD_EMULATE``)."""
        return feature not in self.emulated

    @property
    def usable(self) -> bool:
        """True when the vector kernels apply (at least 4 float32 lanes)."""
        return self.lanes >= 4

    @classmethod
    def from_target(cls, triple: str, features: str, matmul_precision: str = "highest") -> "SimdInfo":
        """Decide from an LLVM triple and feature string (``+a,-b,...``), then apply the
        environment's testing hooks (``MB_SIMD_SHAPE``, ``MB_SIMD``, ``MB_SIMD_EMULATE``).
        ``matmul_precision`` is the target's (:data:`builder.codegen.llvm_target.MATMUL_PRECISIONS`).
        AMX counts only where the 16-lane shape is the target's own and this process may run tiles
        (:func:`runtime.host.amx_permitted`).

        Raises ValueError for an unknown value of one of those variables."""
        info = replace(cls._from_target(triple, features), matmul_precision=matmul_precision)
        feats = {f[1:] for f in features.split(",") if f.startswith("+")}
        if ({"amx-tile", "amx-bf16"} <= feats and info.name == "avx512" and not os.environ.get("MB_SIMD_SHAPE")
                and amx_permitted()):
            info = replace(info, amx=True)
        emulate = {f.strip().lower() for f in os.environ.get("MB_SIMD_EMULATE", "").split(",") if f.strip()}
        unknown = emulate - set(_EMULABLE)
        if unknown:
            raise ValueError(f"MB_SIMD_EMULATE: unknown feature(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(_EMULABLE)}")
        if "avx512bf16" in emulate and info.usable and not info.avx512bf16:
            info = replace(info, avx512bf16=True, emulated=info.emulated | {"avx512bf16"})
        if "vnni" in emulate and info.int8_dot and not info.vnni:
            info = replace(info, vnni=True, emulated=info.emulated | {"vnni"})
        if "amx" in emulate and info.lanes == 16 and not info.amx:
            info = replace(info, amx=True, emulated=info.emulated | {"amx"})
        return info

    @classmethod
    def _from_target(cls, triple: str, features: str) -> "SimdInfo":
        feats = {f[1:] for f in features.split(",") if f.startswith("+")}
        arch = triple.split("-")[0]
        if arch in ("x86_64", "amd64"):
            i8 = "avx2" in feats
            vnni = i8 and ("avxvnni" in feats or {"avx512vnni", "avx512vl"} <= feats)
            if "avx512f" in feats and "avx512bw" in feats and "avx512vl" in feats:
                info = cls("avx512", 16, 32, "f16c" in feats, "avx512bf16" in feats, i8, vnni=vnni,
                           int8_512=True, vnni_512=vnni and "avx512vnni" in feats,
                           bf16dot_gemm="avx512bf16" in feats and "sse4a" in feats)
            elif "avx2" in feats and "fma" in feats:
                info = cls("avx2", 8, 16, "f16c" in feats, int8_dot=i8, vnni=vnni)
            elif "avx" in feats:
                info = cls("avx", 8, 16, "f16c" in feats)
            else:
                info = cls("sse", 4, 16)
        elif arch in ("aarch64", "arm64"):
            info = cls("neon", 4, 32, True)
        else:
            info = cls("scalar", 1, 0)
        shape = os.environ.get("MB_SIMD_SHAPE", "").strip().lower()
        if shape:
            # testing hook: generate the kernels of another vector shape for this target (LLVM
            # splits or widens the vectors), e.g. the 16-lane AVX-512 kernels on an AVX2 host
            shapes = {"avx512": ("avx512", 16, 32), "avx2": ("avx2", 8, 16), "sse": ("sse", 4, 16),
                      "neon": ("neon", 4, 32)}
            if shape not in shapes:
                raise ValueError(f"MB_SIMD_SHAPE must be one of {', '.join(shapes)}, got {shape!r}")
            name, lanes, regs = shapes[shape]
            return cls(name, lanes, regs, info.f16c, info.avx512bf16, info.int8_dot, vnni=info.vnni,
                       int8_512=info.int8_512, vnni_512=info.vnni_512, bf16dot_gemm=info.bf16dot_gemm)
        cap = simd_cap()
        if cap:
            if _ORDER.index(cap) < _ORDER.index(info.name):
                info = {"scalar": cls("scalar", 1, 0), "sse": cls("sse", 4, 16),
                        "neon": cls("neon", 4, 32, True), "avx": cls("avx", 8, 16, info.f16c),
                        "avx2": cls("avx2", 8, 16, info.f16c, int8_dot=info.int8_dot,
                                    vnni=info.vnni)}.get(cap, info)
        return info


class _BFloat16Type(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no such type; only used as a vector element of the
    operands of the AVX512-BF16 intrinsics)."""

    def _to_string(self) -> str:
        return "bfloat"


BF16 = _BFloat16Type()


def internal_function(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """A new ``internal``, ``nounwind`` function of a kernel (its body, tasks, helpers)."""
    fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    return fn


def bind_params(mod, kf: "KFunc", sig, func, ptrs, syms) -> BufferExprEmitter:
    """An expression emitter for ``func``'s loads inside ``kf``: the symbolic vars of ``sig`` bound to
    the values ``syms`` (int64, truncated to narrower var types) and the params to the pointers ``ptrs``."""
    env = {}
    for var, s in zip(sig.sym_vars, syms):
        env[var] = s if reg_type(var.dtype) == I64 else kf.b.trunc(s, reg_type(var.dtype))
    return BufferExprEmitter(mod, kf.b, env, {id(p): a for p, a in zip(func.params, ptrs)})


def vec(t: ir.Type, n: int) -> ir.VectorType:
    """``<n x t>``."""
    return ir.VectorType(t, n)


def const_vec(t: ir.Type, values) -> ir.Constant:
    """A constant vector of ``t`` elements."""
    values = list(values)
    return ir.Constant(ir.VectorType(t, len(values)), values)


def _sfx(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_sfx(t.element)}"
    if t == F32:
        return "f32"
    if t == F16:
        return "f16"
    return f"i{t.width}"


class KFunc:
    """Builder state for one LLVM function: allocas go to ``entry``, code to ``b``."""

    FM = ("reassoc", "contract", "nsz")

    def __init__(self, module: ir.Module, fn: ir.Function) -> None:
        self.module = module
        self.fn = fn
        entry = fn.append_basic_block("entry")
        self.body = fn.append_basic_block("body")
        self.ab = ir.IRBuilder(entry)
        self.b = ir.IRBuilder(self.body)

    def finish(self) -> None:
        """Close the entry block (call once, after the body is complete)."""
        self.ab.branch(self.body)

    # -- declarations
    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """The module's function ``name`` (a runtime helper such as ``mb_parallel_for``, or an LLVM
        intrinsic), declared with type ``ret (args...)`` the first time it is asked for."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def intrinsic(self, base: str, t: ir.Type, nargs: int) -> ir.Function:
        """The overloaded LLVM intrinsic ``llvm.<base>.<t>`` (``fmuladd``, ``maxnum``, ...) on values of type
        ``t`` (a scalar or vector), taking ``nargs`` arguments of ``t`` and returning ``t``."""
        return self.declare(f"llvm.{base}.{_sfx(t)}", t, [t] * nargs)

    # -- values
    @staticmethod
    def i64(v: int) -> ir.Constant:
        """The i64 constant ``v``."""
        return ir.Constant(I64, v)

    def alloca(self, t: ir.Type, count: int = 1, name: str = "", align: int = 0) -> ir.Value:
        """A stack slot for ``count`` values of type ``t``, allocated in the entry block (so that it is
        allocated once per call, not per loop iteration); ``align`` in bytes when given."""
        slot = self.ab.alloca(t, size=None if count == 1 else ir.Constant(I64, count), name=name)
        if align:
            slot.align = align
        return slot

    def splat(self, v: ir.Value, n: int) -> ir.Value:
        """The scalar ``v`` broadcast to a vector of ``n`` lanes (an insertelement and a zero-mask shuffle,
        which LLVM selects as one broadcast instruction)."""
        b = self.b
        t = vec(v.type, n)
        one = b.insert_element(ir.Constant(t, ir.Undefined), v, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(t, ir.Undefined), ir.Constant(vec(I32, n), [0] * n))

    def fzero(self, n: int) -> ir.Constant:
        """A float32 zero: a scalar for ``n == 1``, else a vector of ``n`` zero lanes."""
        return ir.Constant(F32, 0.0) if n == 1 else ir.Constant(vec(F32, n), [0.0] * n)

    def fma(self, a: ir.Value, b_: ir.Value, c: ir.Value) -> ir.Value:
        """``a * b + c`` through ``llvm.fmuladd`` (fused where the CPU has FMA)."""
        return self.b.call(self.intrinsic("fmuladd", a.type, 3), [a, b_, c], fastmath=self.FM)

    def dot_bf16(self, acc: ir.Value, a: ir.Value, w: ir.Value, native: bool) -> ir.Value:
        """``acc[i] + a[2i+1] * w[2i+1] + a[2i] * w[2i]`` with ``acc`` ``<n x float>`` and ``a``,
        ``w`` ``<n x i32>``: each 32-bit lane holds two bfloat16 values, element ``2i`` in the
        low half (little-endian memory order). ``native``: AVX512-BF16's ``vdpbf16ps``
        (``llvm.x86.avx512bf16.dpbf16ps.{128,256,512}``; Intel SDM: the odd pair is added
        first, each step rounded to nearest even, denormal inputs and outputs flushed to zero);
        otherwise the same sums as two FMAs of the halves widened to float32 (the products of
        two bfloat16 values are exact in float32, so only denormals can differ)."""
        b = self.b
        n = acc.type.count
        if native:
            bt = vec(BF16, 2 * n)
            fn = self.declare(f"llvm.x86.avx512bf16.dpbf16ps.{32 * n}", acc.type, [acc.type, bt, bt])
            return b.call(fn, [acc, b.bitcast(a, bt), b.bitcast(w, bt)])
        vt = vec(I32, n)
        ft = vec(F32, n)

        def hi(v):
            return b.bitcast(b.and_(v, ir.Constant(vt, [-65536] * n)), ft)

        def lo(v):
            return b.bitcast(b.shl(v, ir.Constant(vt, [16] * n)), ft)

        return self.fma(lo(a), lo(w), self.fma(hi(a), hi(w), acc))

    def by_256(self, op, *vals: ir.Value) -> ir.Value:
        """``op`` (a function of 256-bit vectors returning one) applied to each 256-bit slice of
        ``vals`` (vectors of one bit width, a multiple of 256), the results concatenated: a
        512-bit integer operation on a target without its zmm form becomes two 256-bit
        instructions."""
        b = self.b
        bits = vals[0].type.count * vals[0].type.element.width
        if bits == 256:
            return op(*vals)
        parts = []
        for p in range(bits // 256):
            sl = []
            for v in vals:
                n = v.type.count * 256 // bits
                sl.append(b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                                           ir.Constant(vec(I32, n), list(range(p * n, p * n + n)))))
            parts.append(op(*sl))
        while len(parts) > 1:
            joined = []
            for a, c in zip(parts[::2], parts[1::2]):
                n = a.type.count
                joined.append(b.shuffle_vector(a, c, ir.Constant(vec(I32, 2 * n), list(range(2 * n)))))
            parts = joined
        return parts[0]

    def _pair_madd(self, a: ir.Value, w: ir.Value, zmm: bool, name512: str, name256: str,
                   out: ir.Type) -> ir.Value:
        """A pairwise multiply-add intrinsic of 256-bit operands (``name256``, results of element
        type ``out``) on ``a`` / ``w`` of 256 or 512 bits: one ``name512`` instruction for 512
        bits when ``zmm``, else :meth:`by_256`."""
        bits = a.type.count * a.type.element.width
        if bits == 512 and zmm:
            fn = self.declare(name512, vec(out, 512 // out.width), [a.type, a.type])
            return self.b.call(fn, [a, w])
        half = vec(a.type.element, 256 // a.type.element.width)
        fn = self.declare(name256, vec(out, 256 // out.width), [half, half])
        return self.by_256(lambda x, y: self.b.call(fn, [x, y]), a, w)

    def maddubs(self, a: ir.Value, w: ir.Value, zmm: bool) -> ir.Value:
        """``vpmaddubsw``: ``a[2i] * w[2i] + a[2i+1] * w[2i+1]`` per int16 lane, ``a`` read as
        unsigned and ``w`` as signed bytes, saturated to int16 (``<32 x i8>`` or ``<64 x i8>``
        in, half as many ``i16`` out). ``zmm``: a 64-byte operand is one AVX512BW instruction,
        otherwise two AVX2 ones."""
        return self._pair_madd(a, w, zmm, "llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx2.pmadd.ub.sw", I16)

    def madd_wd(self, a: ir.Value, w: ir.Value, zmm: bool) -> ir.Value:
        """``vpmaddwd``: ``a[2i] * w[2i] + a[2i+1] * w[2i+1]`` per int32 lane of int16 pairs
        (``<16 x i16>`` or ``<32 x i16>``). ``zmm`` as :meth:`maddubs`."""
        return self._pair_madd(a, w, zmm, "llvm.x86.avx512.pmaddw.d.512", "llvm.x86.avx2.pmadd.wd", I32)

    def dot_u8s8(self, acc: ir.Value, a: ir.Value, w: ir.Value, native: bool,
                 zmm: bool = False) -> ir.Value:
        """``acc[i] + sum_{j<4} a[4i+j] * w[4i+j]`` with ``acc`` ``<8 x i32>`` (``<16 x i32>``),
        ``a`` ``<32 x i8>`` (``<64 x i8>``) read as unsigned and ``w`` as signed bytes, in exact
        int32 arithmetic (wrapping on overflow). ``native``: ``vpdpbusd``
        (``llvm.x86.avx512.vpdpbusd.256``, AVX-VNNI / AVX512-VNNI; Intel SDM, no saturation;
        ``.512`` when ``zmm``, AVX512-VNNI, else two 256-bit ones for 64 bytes); otherwise the
        same sums with AVX2's ``vpmaddwd`` on the even and the odd bytes widened to int16
        (products of at most ``255 * 128`` in magnitude: exact)."""
        b = self.b
        n = a.type.count
        if native:
            if n == 64 and zmm:
                fn = self.declare("llvm.x86.avx512.vpdpbusd.512", acc.type, [acc.type, a.type, a.type])
                return b.call(fn, [acc, a, w])
            i8v, i32v = vec(I8, 32), vec(I32, 8)
            fn = self.declare("llvm.x86.avx512.vpdpbusd.256", i32v, [i32v, i8v, i8v])
            return self.by_256(lambda c, x, y: b.call(fn, [c, x, y]), acc, a, w)
        i16v = vec(I16, n // 2)
        eight = ir.Constant(i16v, [8] * (n // 2))
        a16, w16 = b.bitcast(a, i16v), b.bitcast(w, i16v)
        a_even = b.and_(a16, ir.Constant(i16v, [255] * (n // 2)))
        a_odd = b.lshr(a16, eight)
        w_even = b.ashr(b.shl(w16, eight), eight)
        w_odd = b.ashr(w16, eight)
        return b.add(acc, b.add(self.madd_wd(a_even, w_even, zmm), self.madd_wd(a_odd, w_odd, zmm)))

    def dot_s16(self, acc: ir.Value, a: ir.Value, w: ir.Value, native: bool, zmm: bool = False) -> ir.Value:
        """``acc[i] + a[2i] * w[2i] + a[2i+1] * w[2i+1]`` with ``acc`` ``<8 x i32>`` (``<16 x i32>``) and
        ``a`` / ``w`` ``<16 x i16>`` (``<32 x i16>``) signed, in exact int32 arithmetic (wrapping on
        overflow). ``native``: one ``vpdpwssd`` (AVX512-VNNI / AVX-VNNI, Intel SDM: no saturation;
        ``.512`` when ``zmm``, else 256-bit ones), otherwise ``vpmaddwd`` and an add."""
        b = self.b
        if native:
            if a.type.count == 32 and zmm:
                fn = self.declare("llvm.x86.avx512.vpdpwssd.512", acc.type, [acc.type, a.type, a.type])
                return b.call(fn, [acc, a, w])
            i16v, i32v = vec(I16, 16), vec(I32, 8)
            fn = self.declare("llvm.x86.avx512.vpdpwssd.256", i32v, [i32v, i16v, i16v])
            return self.by_256(lambda c, x, y: b.call(fn, [c, x, y]), acc, a, w)
        return b.add(acc, self.madd_wd(a, w, zmm))

    def hsum(self, v: ir.Value) -> ir.Value:
        """Sum of the lanes of a float vector (reassociated)."""
        t = v.type
        fn = self.declare(f"llvm.vector.reduce.fadd.{_sfx(t)}", F32, [F32, t])
        return self.b.call(fn, [ir.Constant(F32, -0.0), v], fastmath=self.FM)

    def prefetch(self, ptr: ir.Value, locality: int = 3) -> None:
        """``llvm.prefetch`` of the line holding ``ptr`` for reading (a hint; never faults)."""
        fn = self.declare("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
        self.b.call(fn, [ptr, ir.Constant(I32, 0), ir.Constant(I32, locality), ir.Constant(I32, 1)])

    def gep(self, ptr: ir.Value, idx: ir.Value, t: ir.Type) -> ir.Value:
        """The address of element ``idx`` (an i64 value) of type ``t`` from ``ptr`` (an ``inbounds`` GEP: the
        caller guarantees it stays inside the buffer)."""
        return self.b.gep(ptr, [idx], inbounds=True, source_etype=t)

    def load(self, t: ir.Type, ptr: ir.Value, idx: ir.Value | None = None, align: int = 1):
        """A load of type ``t`` (scalar or vector) from ``ptr``, or from element ``idx`` of ``ptr`` counted in
        ``t``'s element type; ``align`` in bytes (1: unaligned)."""
        p = ptr if idx is None else self.gep(ptr, idx, t.element if isinstance(t, ir.VectorType) else t)
        return self.b.load(p, typ=t, align=align)

    def store(self, v: ir.Value, ptr: ir.Value, idx: ir.Value | None = None, align: int = 1):
        """Store ``v`` at ``ptr``, or at element ``idx`` of ``ptr`` counted in ``v``'s element type; ``align``
        in bytes (1: unaligned)."""
        t = v.type
        p = ptr if idx is None else self.gep(ptr, idx, t.element if isinstance(t, ir.VectorType) else t)
        self.b.store(v, p, align=align)

    def add(self, a, c):
        """``a + c`` of i64 values (``c`` may be a Python int) with ``nsw``: index arithmetic, which the
        planner keeps inside the signed range."""
        return self.b.add(a, c if isinstance(c, ir.Value) else self.i64(c), flags=("nsw",))

    def mul(self, a, c):
        """``a * c`` of i64 values (``c`` may be a Python int) with ``nsw``, as :meth:`add`."""
        return self.b.mul(a, c if isinstance(c, ir.Value) else self.i64(c), flags=("nsw",))

    def sub(self, a, c):
        """``a - c`` of i64 values (``c`` may be a Python int) with ``nsw``, as :meth:`add`."""
        return self.b.sub(a, c if isinstance(c, ir.Value) else self.i64(c), flags=("nsw",))

    def smin(self, a, c):
        """The signed minimum of i64 ``a`` and ``c`` (``c`` may be a Python int), as a compare and select."""
        c = c if isinstance(c, ir.Value) else self.i64(c)
        return self.b.select(self.b.icmp_signed("<", a, c), a, c)

    def smax(self, a, c):
        """The signed maximum of i64 ``a`` and ``c`` (``c`` may be a Python int), as a compare and select."""
        c = c if isinstance(c, ir.Value) else self.i64(c)
        return self.b.select(self.b.icmp_signed(">", a, c), a, c)

    def lt(self, a, c):
        """The i1 ``a < c`` of signed i64 values (``c`` may be a Python int)."""
        return self.b.icmp_signed("<", a, c if isinstance(c, ir.Value) else self.i64(c))

    def sdiv(self, a, c):
        """``a / c`` of signed i64 values (``c`` may be a Python int), rounded toward zero (LLVM ``sdiv``;
        callers divide non-negative sizes)."""
        return self.b.sdiv(a, c if isinstance(c, ir.Value) else self.i64(c))

    # -- control flow
    @contextmanager
    def loop(self, lo, hi, step: int = 1, name: str = "i", plain: bool = True, interleave: int = 0,
             unroll: bool = True):
        """``for iv in range(lo, hi, step)`` (i64; ``step > 0``); yields ``iv``.

        ``plain`` loops carry loop metadata that turns LLVM's loop vectorizer and unroller off
        (see :func:`finalize_loop_metadata`): kernel loops are vectorized by construction, and
        letting LLVM also vectorize their scalar tails only multiplies code size and compile
        time. ``plain=False`` leaves a loop to LLVM (epilogues, conversions); ``interleave > 0``
        then asks its vectorizer for that many interleaved vector iterations, ``unroll=False`` keeps
        the unroller off it (a short constant trip count is vectorized, not unrolled into scalars)."""
        b = self.b
        lo = lo if isinstance(lo, ir.Value) else self.i64(lo)
        hi = hi if isinstance(hi, ir.Value) else self.i64(hi)
        pre = b.block
        header = self.fn.append_basic_block(f"{name}.header")
        body = self.fn.append_basic_block(f"{name}.body")
        exit_ = self.fn.append_basic_block(f"{name}.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=name)
        iv.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", iv, hi), body, exit_)
        b.position_at_end(body)
        yield iv
        nxt = b.add(iv, self.i64(step), flags=("nsw",))
        iv.add_incoming(nxt, b.block)
        br = b.branch(header)
        if plain:
            br.set_metadata("llvm.loop", plain_loop_metadata(self.module))
        elif not unroll:
            br.set_metadata("llvm.loop", no_unroll_loop_metadata(self.module))
        elif interleave:
            br.set_metadata("llvm.loop", interleave_loop_metadata(self.module, interleave))
        b.position_at_end(exit_)

    @contextmanager
    def if_(self, cond: ir.Value, name: str = "if"):
        """Code emitted inside the ``with`` runs only when ``cond`` (i1) holds."""
        b = self.b
        then = self.fn.append_basic_block(f"{name}.then")
        end = self.fn.append_basic_block(f"{name}.end")
        b.cbranch(cond, then, end)
        b.position_at_end(then)
        yield
        if not b.block.is_terminated:
            b.branch(end)
        b.position_at_end(end)

    def if_else(self, cond: ir.Value, then_fn, else_fn, name: str = "sel") -> None:
        """Emit ``then_fn()`` when ``cond`` holds, else ``else_fn()``."""
        b = self.b
        then = self.fn.append_basic_block(f"{name}.then")
        other = self.fn.append_basic_block(f"{name}.else")
        end = self.fn.append_basic_block(f"{name}.end")
        b.cbranch(cond, then, other)
        b.position_at_end(then)
        then_fn()
        if not b.block.is_terminated:
            b.branch(end)
        b.position_at_end(other)
        else_fn()
        if not b.block.is_terminated:
            b.branch(end)
        b.position_at_end(end)

    def switch_const(self, value: ir.Value, cases: dict[int, callable], name: str = "sw") -> None:
        """``switch value { case k: cases[k]() }`` (no default action)."""
        b = self.b
        end = self.fn.append_basic_block(f"{name}.end")
        sw = b.switch(value, end)
        for k, fn in cases.items():
            bb = self.fn.append_basic_block(f"{name}.{k}")
            sw.add_case(ir.Constant(value.type, k), bb)
            b.position_at_end(bb)
            fn()
            if not b.block.is_terminated:
                b.branch(end)
        b.position_at_end(end)

    # -- vector conversions
    def widen(self, raw: ir.Value, dtype: str) -> ir.Value:
        """Memory vector (``<n x half>`` / ``<n x i16>`` bf16 bits / ``<n x float>``) -> float. Exact (float16
        by ``fpext``, bfloat16 by a 16-bit shift of its bits). Raises ValueError for another dtype."""
        b = self.b
        if dtype == "float32":
            return raw
        n = raw.type.count
        if dtype == "float16":
            return b.fpext(raw, vec(F32, n))
        if dtype == "bfloat16":
            wide = b.shl(b.zext(raw, vec(I32, n)), ir.Constant(vec(I32, n), [16] * n))
            return b.bitcast(wide, vec(F32, n))
        raise ValueError(f"cannot widen {dtype}")

    def transpose(self, rows: list[ir.Value]) -> list[ir.Value]:
        """Transpose a square block of ``n`` vectors of ``n`` floats (``n`` a power of two):
        ``out[j][i] = rows[i][j]``, in ``log2(n)`` rounds of two-input shuffles."""
        n = len(rows)
        cur = list(rows)
        b = self.b
        # level s (n/2, n/4, ..., 1): inside every (2s rows) x (2s lanes) block, swap the two
        # off-diagonal s x s blocks; doing this at every level is the full transpose
        s = n // 2
        while s >= 1:
            nxt = list(cur)
            for base in range(0, n, 2 * s):
                for i in range(base, base + s):
                    a, c = cur[i], cur[i + s]
                    lo, hi = [], []
                    for g in range(0, n, 2 * s):
                        lo += list(range(g, g + s)) + list(range(n + g, n + g + s))
                        hi += list(range(g + s, g + 2 * s)) + list(range(n + g + s, n + g + 2 * s))
                    nxt[i] = b.shuffle_vector(a, c, ir.Constant(vec(I32, n), lo))
                    nxt[i + s] = b.shuffle_vector(a, c, ir.Constant(vec(I32, n), hi))
            cur = nxt
            s //= 2
        return cur
