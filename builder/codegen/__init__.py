"""Code generation: PrimFunc -> LLVM IR (llvmlite) -> optimized native object code.

Pipeline per function:

* a PrimFunc with a kernel attribute (``attrs["mb.kernel"]``, see :mod:`.kernels`) that its
  family's planner accepts for the target's vector unit is written by that family's emitter
  (the matmul family: GEMV / GEMM with in-register weight decoding, fused epilogues and work
  split over the thread pool);
* every other PrimFunc is scheduled (:func:`builder.codegen.schedule.schedule`: row fusion of
  consecutive nests, parallel outer loops), lowered (:func:`builder.codegen.lower.lower`: blocks
  -> plain loops) and emitted loop by loop (:mod:`builder.codegen.llvm_emit`; ``exp`` inlined as
  a polynomial so that loops vectorize; ``parallel`` loops outlined into thread-pool tasks);
* :func:`builder.codegen.abi.plan_signature` (prologue checks and metadata) for both;
* a function structurally equal to one emitted already (:mod:`.dedup`) becomes an alias of the
  twin's entry (``@b = alias ... @a``): identical kernels are compiled once, and each keeps its own
  metadata (parameter names in the error messages; the checks, being structurally the same, return
  the same codes); a function (kernel-family or loops) that is an emitted one with some symbolic dims fixed
  (:func:`.dedup.specialization`: a decode step's ``seq = 1`` linear and the prefill one) gets only its
  own entry, which checks its own dims and calls that one's body with the constants;
* reductions lowered to loops accumulate in a register (:mod:`.accumulate`);
* the distinct kernels split into up to :data:`MAX_PARTS` LLVM modules (:mod:`.parts` groups them before
  any is emitted, so the modules fill one after the other), each run through LLVM's new pass manager at
  ``-O3`` for the host target and ``TargetMachine.emit_object`` on its own thread -- the first while the
  next is still being emitted --, the objects merged into one (:mod:`.objmerge`), and the on-disk object
  cache (:mod:`.cache`, keyed by the IR's hash) around those steps;
* a manifest in the object (section ``.mb_manifest``: the cache key it was compiled from and
  each kernel's signature, :func:`runtime.native.manifest_bytes`), which the loader and the cache
  check against the metadata before any byte of the object reaches LLVM.

:class:`runtime.native.NativeLibrary` loads the result; the calling convention is documented in
:mod:`builder.codegen.abi`, the thread pool in :mod:`runtime.threadpool`. Each function's
metadata records which path compiled it (``"kernel": "linear/avx2"`` or ``"loops"``).
"""
from __future__ import annotations

import ctypes
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

import llvmlite.binding as llvm
from llvmlite import ir
from llvmlite.binding import ffi

from runtime.native import MANIFEST_SECTION, manifest_bytes

from ..ir import expr as E
from ..ir import tir
from ..ir.kernel import KERNEL_ATTR, WEIGHT_TRANSFORM_ATTR
from ..ir.tir import PrimFunc
from . import cache as _cache
from .abi import dim_to_json, plan_signature
from .accumulate import promote_accumulators
from .llvm_emit import ModuleEmitter
from .lower import is_lowered, lower
from .objmerge import merge_objects
from .parts import plan_kernels
from .schedule import schedule
from .kernels import KERNEL_FAMILIES, SimdInfo, plan_kernel
from .loop_metadata import finalize_loop_metadata
from .llvm_target import Target, init_llvm

__all__ = ["Target", "CompiledLibrary", "build", "build_prim_func", "lower", "dim_to_json",
           "emit_llvm_ir", "emit_llvm_parts", "LlvmParts", "manifest_ir", "build_threads", "MAX_PARTS"]


@dataclass
class CompiledLibrary:
    """The result of :func:`build`.

    ``object_code``: relocatable object for the target (``TargetMachine.emit_object``);
    ``llvm_ir``: the optimized module as text; ``functions``: JSON-able metadata per symbol
    (see :mod:`builder.codegen.abi`); ``target``: :meth:`Target.to_dict`; ``cached``: True
    when the object came from the on-disk cache (:mod:`builder.codegen.cache`); ``stats``: what
    :func:`build` measured: ``kernels`` (functions), ``distinct`` (compiled; the others are aliases),
    ``parts`` (LLVM modules), and seconds: ``emit_seconds`` (schedule, lower, LLVM IR emission in
    Python), ``optimize_seconds`` / ``codegen_seconds`` (LLVM, summed over the parts),
    ``llvm_seconds`` (wall time of the LLVM phase).
    """

    object_code: bytes
    llvm_ir: str
    functions: dict[str, dict]
    target: dict = field(default_factory=dict)
    cached: bool = False
    stats: dict = field(default_factory=dict)

    def load(self):
        """Load into this process: a :class:`runtime.native.NativeLibrary` (host target only)."""
        from runtime.native import NativeLibrary

        return NativeLibrary(self.object_code, self.functions, self.target or None)


#: A reference to an LLVM intrinsic of AMX's tile instructions (``ldtilecfg``, ``tileloadd64``,
#: ``tdpbf16ps``, ...), its name quoted or not (llvmlite quotes names with dots).
_AMX_INTRINSIC = re.compile(r'@"?llvm\.x86\.(?:ldtilecfg|sttilecfg|tile|tdp)')


def uses_amx_tiles(texts) -> bool:
    """True when the LLVM IR modules ``texts`` (strings) call an AMX tile instruction (an
    ``@llvm.x86.ldtilecfg`` / ``tile*`` / ``tdp*`` intrinsic): the code then needs the OS's grant of the
    tile state where it loads (:func:`runtime.host.check_target`). The kernels' labels do not decide
    it: under ``MB_SIMD_EMULATE=amx`` a ``+amx`` kernel is generic IR of the same arithmetic, which any
    host runs."""
    return any(_AMX_INTRINSIC.search(t) for t in texts)


#: Most LLVM modules the kernels of one build are split into (see :func:`emit_llvm_parts`). Fixed, not
#: the number of cores, so that the object code (and the cache key) is the same on every machine
#: and with any number of threads. Two, for the 2-core machines the project builds on: each module
#: emits and compiles its own copy of the helpers its kernels share (the linear kernels' tile and
#: micro-kernel functions), so more parts cost more work (measured on a Zen 3, LLVM CPU seconds for 1 /
#: 2 / 4 parts: MiniLM 3.3-3.7 / 3.6-3.7 / 3.9-4.1, the TinyLlama-shaped q4f16_1 Llama 3.3-3.5 / 3.8-3.9 /
#: 4.5, its Python emission 1.1 / 1.4-1.5 / 1.8-2.0), and on two threads the two balanced halves end
#: sooner than four parts do.
MAX_PARTS = 2

#: A build is split only when its distinct kernels add up to at least this many LLVM instructions
#: (unoptimized); smaller ones are one module (a thread and an object merge cost more than they
#: save there).
MIN_SPLIT_INSTRUCTIONS = 4000

#: ``progress(phase, done, total, item)``: see :func:`build`.
Progress = Callable[[str, int, int, str], None]


@dataclass
class LlvmParts:
    """What :func:`emit_llvm_parts` returns: ``texts``, the unoptimized LLVM IR of each module (part
    0 first); ``functions``, the metadata of every kernel (symbol -> dict); ``distinct``, how many
    kernels got code of their own (the others are aliases of a structurally equal one);
    ``seconds``, Python time spent scheduling, lowering and emitting."""

    texts: list[str]
    functions: dict[str, dict]
    distinct: int
    seconds: float


def _instructions(module, first: int) -> int:
    """LLVM instructions in the functions of ``module`` from index ``first`` on."""
    fns = [g for g in module.globals.values() if isinstance(g, ir.Function)]
    return sum(len(b.instructions) for f in fns[first:] for b in f.blocks)


#: The share of the estimated instructions the first of two modules takes (:func:`emit_llvm_parts`): it goes
#: to LLVM while the second one is emitted, so it may take more. Both end together when ``f = (1 + e) / (2 +
#: e)``, ``e`` the Python emission's time over LLVM's CPU time for the same kernels (about 0.35 for the 2-layer
#: Llama recipe on a Zen 4: 0.88 s of emission, 2.5 s of LLVM).
FIRST_PART_SHARE = 0.57


def emit_llvm_parts(prim_funcs: dict[str, PrimFunc], target: Target | None = None,
                    max_parts: int | None = None, progress: Progress | None = None,
                    on_part: Callable[[int, str], None] | None = None) -> LlvmParts:
    """Unoptimized LLVM IR and metadata for ``prim_funcs`` (symbol name -> PrimFunc), split into at
    most ``max_parts`` (default :data:`MAX_PARTS`) modules that can be optimized and compiled
    independently.

    The functions are grouped first (:func:`.parts.plan_kernels`): a function structurally equal to one
    before it is an alias of that one's entry, a function that is a distinct kernel with some symbolic dims
    fixed gets only an entry calling its body, each in the module of its distinct kernel. The groups fill
    the modules one after the other, in order: the first module takes groups until the instructions written
    reach :data:`FIRST_PART_SHARE` of all (two modules; with more, equal shares), the estimates of the
    groups not yet written (:func:`.parts.estimate_instructions`) standing for their code; the split depends
    only on the input. Below :data:`MIN_SPLIT_INSTRUCTIONS` estimated in all, everything is one module.
    ``on_part(k, text)``, when given, is called with each module but the last as soon as it is complete
    (its final text, as in the result), so that LLVM can start on it while the rest is emitted.
    ``progress`` is called as ``progress("kernels", done, total, name)`` after each function.

    Blocks are lowered first. Raises ValueError for unsupported dtypes / unbindable symbolic
    vars, :class:`builder.ir.tir.VerifyError` for ill-formed functions, TypeError for a value that
    is not a PrimFunc.
    """
    t0 = time.perf_counter()
    max_parts = MAX_PARTS if max_parts is None else max_parts
    target = target or Target.host()
    tm = target.target_machine()
    simd = SimdInfo.from_target(target.triple, target.features, target.matmul_precision)
    data_layout = str(tm.target_data)
    ordered = _general_first(prim_funcs)
    for name, func in ordered:
        if not isinstance(func, PrimFunc):
            raise TypeError(f"'{name}' is not a PrimFunc")
        if not name.isidentifier():
            raise ValueError(f"function name {name!r} is not a valid symbol")
    planned: dict[int, tuple] = {}      # id(func) -> plan_kernel(func, simd): grouping and emission share it
    colds: dict[int, bool] = {}         # id(func) -> cold_kernel(func)

    def plan_of(func: PrimFunc) -> tuple:
        got = planned.get(id(func))
        if got is None:
            got = planned[id(func)] = plan_kernel(func, simd)
        return got

    def cold_of(func: PrimFunc) -> bool:
        got = colds.get(id(func))
        if got is None:
            got = colds[id(func)] = cold_kernel(func)
        return got

    groups = plan_kernels(ordered, lambda f: _label(plan_of(f), simd), cold_of)
    remaining = sum(g.estimate for g in groups)
    nparts = 1 if max_parts <= 1 or remaining < MIN_SPLIT_INSTRUCTIONS else min(max_parts, len(groups))
    shares = [FIRST_PART_SHARE] if nparts == 2 else [k / nparts for k in range(1, nparts)]
    emitters: list[ModuleEmitter] = []
    loads: list[int] = []
    texts: list[str] = []
    aliases: list[tuple[str, str]] = []       # the current module's
    home: dict[str, int] = {}           # distinct kernel -> the module holding it
    functions: dict[str, dict] = {}
    extras: dict[str, list[str]] = {}   # name -> its body's extra error messages
    bodies: dict[str, tuple] = {}       # distinct kernel -> (body function, signature)
    written, done, total = 0, 0, len(prim_funcs)

    def close(last: bool) -> None:
        text = finalize_loop_metadata(str(emitters[-1].module))
        text += "".join(f'\n@"{name}" = alias i32 (ptr, ptr), ptr @"{twin}"' for name, twin in aliases)
        texts.append(text + "\n" if aliases else text)
        aliases.clear()
        if on_part is not None and not last:
            on_part(len(texts) - 1, texts[-1])

    def distinct(emitter: ModuleEmitter, name: str, func: PrimFunc) -> None:
        plan = plan_of(func)
        loops = plan[0] is None or isinstance(plan[1], str)
        functions[name], extras[name], body = _emit_kernel(emitter, name, func, simd, plan,
                                                           loops and cold_of(func))
        if body is not None:
            bodies[name] = body
        home[name] = len(emitters) - 1

    def inherit(name: str, sig, of: str) -> None:
        """``name``'s metadata: its own signature, the kernel label and notes of ``of``, whose code it runs."""
        functions[name] = {**sig.metadata(extras[of]), "kernel": functions[of]["kernel"]}
        if "notes" in functions[of]:
            functions[name]["notes"] = functions[of]["notes"]

    for group in groups:
        if not emitters or (len(emitters) < nparts and loads[-1] > 0
                            and written >= shares[len(emitters) - 1] * (written + remaining)):
            if emitters:
                close(last=False)
            emitters.append(ModuleEmitter(target.triple, data_layout))
            loads.append(0)
        emitter = emitters[-1]
        first = sum(1 for g in emitter.module.globals.values() if isinstance(g, ir.Function))
        distinct(emitter, group.name, group.func)
        done += 1
        if progress is not None:
            progress("kernels", done, total, group.name)
        for name, kind, of, order in group.members:
            func = prim_funcs[name]
            if kind == "alias":   # an identical kernel is emitted already: this symbol is its entry
                inherit(name, plan_signature(func, name), of)
                aliases.append((name, of))
            elif of in bodies:      # the head's body with some dims fixed
                body_fn, gsig = bodies[of]
                sig = plan_signature(func, name)
                emitter.add_entry(name, body_fn, func, sig, order, len(sig.checks) - len(gsig.checks))
                inherit(name, sig, of)
                extras[name] = extras[of]
            else:                   # the head's lowering left no body to call: code of its own
                distinct(emitter, name, func)
            done += 1
            if progress is not None:
                progress("kernels", done, total, name)
        count = _instructions(emitter.module, first)
        loads[-1] += count
        written += count
        remaining -= group.estimate
    if emitters:
        close(last=True)
    functions = {name: functions[name] for name in prim_funcs}   # the caller's order
    for name, func in prim_funcs.items():
        if func.attrs.get(WEIGHT_TRANSFORM_ATTR):   # the VM may keep its results (runtime.vm)
            functions[name]["weight_transform"] = True
    return LlvmParts(texts or [""], functions, len(home), time.perf_counter() - t0)


def _constant_dims(func) -> int:
    """How many of ``func``'s parameter dims are constants (0 for a value that is not a PrimFunc)."""
    return sum(isinstance(d, E.IntImm) for p in getattr(func, "params", ()) for d in p.shape)


def _general_first(prim_funcs: dict[str, PrimFunc]) -> list[tuple[str, PrimFunc]]:
    """``prim_funcs``' items, those with fewer constant dims first (a stable order): a kernel more general
    than another (symbolic where the other has constants, :func:`.dedup.specialization`) is emitted
    before it, so that the other can call its body (the embedding gather of MiniLM's packed tokens, whose
    table is ``(v0, 384)``, before the gathers from the word, position and type tables)."""
    return sorted(prim_funcs.items(), key=lambda item: _constant_dims(item[1]))


def _kernel_label(family: str, plan, simd: SimdInfo) -> str:
    """``family/simd[+variant]``: the ``kernel`` entry of a kernel-family function's metadata."""
    ksimd = getattr(plan, "simd", None) or simd   # a plan may ask for narrower vectors
    variant = getattr(plan, "variant", "")
    return f"{family}/{ksimd.name}" + (f"+{variant}" if variant else "")


def _label(planned: tuple, simd: SimdInfo) -> str:
    """The ``kernel`` entry of a function's metadata from its :func:`plan_kernel` result ``planned``:
    ``family/simd[+variant]`` for a kernel its family's planner accepts, ``loops`` (or ``loops (family: why
    not)``) for one emitted as loops."""
    family, plan = planned
    if family is None:
        return "loops"
    if isinstance(plan, str):
        return f"loops ({family}: {plan})"
    return _kernel_label(family, plan, simd)


#: A loops kernel is cold (:func:`cold_kernel`) when no parameter has more than this many elements per
#: value of its symbolic dims (kernels that write integers or bools only) ...
COLD_ELEMENTS = 16
#: ... or this many (kernels that write floats over ``(batch, seq)``: a rotary table's ``head_dim`` values per
#: token).
COLD_FLOAT_ELEMENTS = 64


def cold_kernel(func: PrimFunc) -> bool:
    """True when every parameter of ``func`` has at most two symbolic dims (an expression dim counts as
    one) and few elements per combination of them (the product of its constant dims): at most
    :data:`COLD_ELEMENTS` when ``func`` writes only integer or bool tensors (indices, positions, masks,
    lengths), at most :data:`COLD_FLOAT_ELEMENTS` when it writes floats, which must then also run over
    rows of two symbolic dims (a parameter with two: ``(batch, seq, ...)``; rows of one could be a small
    model's activation, ``(n, 37)``, or a flattened one, ``(n,)``). That is a few values per sequence or
    per token: the rotary tables of a prefill or decode step (``positions * inv_freq``, their ``cos`` /
    ``sin``, ``(batch, seq, 1, head_dim)``), never a hidden-size row or an image with symbolic height and
    width. Such loops kernels are compiled without LLVM's optimizer (``optnone``), which costs them
    microseconds per call (their cost is the call; the ``cos`` of a 512-token prefill's 32-wide table 34 ->
    39 us, Zen 4) and saves the build tens of milliseconds each (the 2-layer Llama recipe's rotary-table
    kernels 40-120 ms of LLVM CPU each, 5 ms cold); weight transforms (``WEIGHT_TRANSFORM_ATTR``: a model's
    weights go through them at load, whatever their shapes say) and every kernel over hidden-size rows stay
    at ``-O3``.

    Raises ValueError as :func:`.abi.plan_signature` for a parameter dtype it does not support."""
    if func.attrs.get(WEIGHT_TRANSFORM_ATTR):       # a model's weights go through it at load
        return False
    written = plan_signature(func).written
    floats = any(out and not (p.dtype == "bool" or p.dtype.startswith(("int", "uint")))
                 for p, out in zip(func.params, written))
    limit = COLD_FLOAT_ELEMENTS if floats else COLD_ELEMENTS
    rows = 0                  # the most symbolic dims of a parameter
    for p in func.params:
        n, symbolic = 1, 0
        for d in p.shape:
            if isinstance(d, E.IntImm):
                n *= d.value
            else:
                symbolic += 1
        if n > limit or symbolic > 2:
            return False
        rows = max(rows, symbolic)
    return not floats or rows == 2


def _emit_kernel(emitter: ModuleEmitter, name: str, func: PrimFunc, simd: SimdInfo, planned: tuple,
                 cold: bool) -> tuple[dict, list[str], tuple | None]:
    """Emit one distinct kernel (entry and body) into ``emitter``, ``planned`` its :func:`plan_kernel` result
    and ``cold`` its :func:`cold_kernel` (read for loops kernels only); returns its metadata, the body's extra
    error messages and ``(body function, signature)``, the body a specialization of the kernel may call (None
    for a loops kernel whose lowering changed its parameters' symbolic vars)."""
    family, plan = planned
    if family is not None and not isinstance(plan, str):
        tir.verify(func)
        sig = plan_signature(func, name)
        ksimd = getattr(plan, "simd", None) or simd   # a plan may ask for narrower vectors
        body_fn, extra = KERNEL_FAMILIES[family][1](emitter, name, func, sig, plan, ksimd)
        emitter.add_entry(name, body_fn, func, sig)
        meta = {**sig.metadata(extra), "kernel": _kernel_label(family, plan, simd)}
        if getattr(plan, "notes", ()):   # fallbacks in words (builder.summary.kernel_notes)
            meta["notes"] = list(plan.notes)
        return meta, extra, (body_fn, sig)
    lowered = func if is_lowered(func) else promote_accumulators(lower(schedule(func)))
    sig = plan_signature(lowered, name)
    extra, body_fn = emitter.add_function(name, lowered, sig, optimize=not cold)
    meta = sig.metadata(extra)
    meta["kernel"] = "loops" if family is None else f"loops ({family}: {plan})"
    # the body takes the lowered function's symbolic vars; a specialization orders them as func's
    same_vars = [id(v) for v in lowered.sym_vars] == [id(v) for v in func.sym_vars]
    return meta, extra, ((body_fn, sig) if same_vars else None)


def emit_llvm_ir(prim_funcs: dict[str, PrimFunc], target: Target | None = None
                 ) -> tuple[str, dict[str, dict]]:
    """Unoptimized LLVM IR text (one module) and metadata for ``prim_funcs`` (symbol name ->
    PrimFunc): :func:`emit_llvm_parts` with one part.

    Raises as :func:`emit_llvm_parts`.
    """
    parts = emit_llvm_parts(prim_funcs, target, max_parts=1)
    return parts.texts[0], parts.functions


def _raw(fn):
    """The ctypes function behind an llvmlite binding function, without llvmlite's global lock
    (``llvmlite.binding.ffi`` serializes every call through one RLock), or the locked wrapper when
    llvmlite's internals differ. Only for calls on objects no other thread touches: a module of
    its own LLVMContext, its own TargetMachine and pass builder."""
    return getattr(fn, "_cfn", fn)


class _Part:
    """One LLVM module of a build on its way to object code: parsed (in its own LLVMContext) and set
    up on the calling thread; :meth:`compile` optimizes and emits it, and may run on another."""

    def __init__(self, text: str, target: Target) -> None:
        self.context = llvm.create_context()
        try:
            self.module = llvm.parse_assembly(text, context=self.context)
            self.module.verify()
        except RuntimeError as err:  # pragma: no cover - generator bug
            raise RuntimeError(f"generated LLVM IR is invalid: {err}\n{text}") from err
        self.tm = target.target_machine()
        self.module.triple = target.triple
        self.module.data_layout = str(self.tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=target.opt_level)
        if target.opt_level >= 2:
            pto.loop_vectorization = True
            pto.slp_vectorization = True
            pto.loop_unrolling = True
        self.pto = pto
        self.pb = llvm.create_pass_builder(self.tm, pto)
        self.mpm = self.pb.getModulePassManager()
        # resolved here, on the calling thread (llvmlite fills its function table lazily)
        self.run_passes = _raw(ffi.lib.LLVMPY_RunNewModulePassManager)
        self.emit = _raw(ffi.lib.LLVMPY_TargetMachineEmitToMemory)
        self.buffer_start = _raw(ffi.lib.LLVMPY_GetBufferStart)
        self.buffer_size = _raw(ffi.lib.LLVMPY_GetBufferSize)
        self.dispose_buffer = ffi.lib.LLVMPY_DisposeMemoryBuffer
        self.object = b""
        self.seconds = (0.0, 0.0)

    def close(self) -> None:
        """Free the module, then its context (in that order: a module outliving its context
        crashes LLVM)."""
        self.module.close()
        self.context.close()

    def compile(self) -> None:
        """Optimize (new pass manager) and emit object code; sets ``object`` and ``seconds``
        (optimize, codegen). Raises RuntimeError when LLVM cannot emit the object."""
        t0 = time.perf_counter()
        self.run_passes(self.mpm, self.module, self.pb)
        t1 = time.perf_counter()
        with ffi.OutputString() as err:
            buf = self.emit(self.tm, self.module, 1, err)
            if not buf:
                raise RuntimeError(f"LLVM could not emit object code: {err}")
        try:
            self.object = ctypes.string_at(self.buffer_start(buf), self.buffer_size(buf))
        finally:
            self.dispose_buffer(buf)
        self.seconds = (t1 - t0, time.perf_counter() - t1)


def build_threads() -> int:
    """Threads :func:`build` compiles on: ``$MB_BUILD_THREADS`` when set (>= 1), else the CPUs this
    process may run on. Raises ValueError for a value that is not a positive integer."""
    env = os.environ.get("MB_BUILD_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"MB_BUILD_THREADS must be a positive integer, got {env!r}")
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):   # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def build(prim_funcs: dict[str, PrimFunc], target: Target | None = None,
          progress: Progress | None = None) -> CompiledLibrary:
    """Compile ``prim_funcs`` (symbol name -> PrimFunc) into one object file for ``target``
    (default: the host), optimized with the new pass manager at ``speed_level=3``.

    The kernels are emitted as up to :data:`MAX_PARTS` LLVM modules (:func:`emit_llvm_parts`), each
    optimized and compiled on its own thread (:func:`build_threads` at a time; llvmlite's calls are
    ctypes calls that release the GIL, and each module has its own LLVMContext and TargetMachine): with
    two threads or more a module goes to LLVM as soon as it is complete, while this thread emits the
    next, and the last (which carries the manifest) after the IR's cache key is known. The objects are
    merged into one (:func:`.objmerge.merge_objects`). The parts depend only on
    the input, never on the thread count, so the object's bytes do not either. The object is looked
    up in / added to the on-disk cache (:mod:`builder.codegen.cache`) by the hash of the generated IR
    and the target; before any IR is emitted, by the hash of the build's inputs
    (:func:`.cache.input_key` with :func:`codegen_settings`), so that a build seen before emits nothing
    (``emit_seconds`` 0). ``stats`` on the result: kernel counts and seconds per phase.

    ``progress``, when given, is called on this thread as ``progress(phase, done, total, item)``:
    ``("kernels", k, n, name)`` after each of the ``n`` functions is emitted, then
    ``("llvm", 0, parts, "")`` before LLVM starts and ``("llvm", k, parts, "part i")`` as each module
    is compiled, or ``("llvm", 1, 1, "cached")`` on a cache hit. An exception it raises aborts the
    build (after the running LLVM work ends). On an object-cache hit found by the IR's key, the modules
    already handed to LLVM finish on their threads, unused.

    Raises ValueError / VerifyError as :func:`emit_llvm_parts`; RuntimeError if LLVM rejects the
    generated IR (a code generator bug).
    """
    target = target or Target.host()
    init_llvm()
    inputs = None
    if _cache.enabled():   # a build seen before: its object without emitting the IR (cache.input_key)
        inputs = _cache.input_key(prim_funcs, target.to_dict(), codegen_settings(target))
        found = _cache.load_index(inputs)
        hit = _cache.load(found["ir_key"], found["functions"]) if found is not None else None
        if hit is not None:
            if progress is not None:
                progress("llvm", 1, 1, "cached")
            stats = {**found["stats"], "emit_seconds": 0.0, "optimize_seconds": 0.0, "codegen_seconds": 0.0,
                     "llvm_seconds": 0.0}
            return CompiledLibrary(hit[0], hit[1], found["functions"], found["target"], cached=True, stats=stats)
    threads = min(build_threads(), MAX_PARTS)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mb-llvm") if threads > 1 else None
    parts: list[_Part] = []
    futures: dict = {}                  # future -> the index of its module
    t_llvm = None

    def on_part(k: int, text: str) -> None:      # a module complete before the others: to LLVM now
        nonlocal t_llvm
        t_llvm = t_llvm or time.perf_counter()
        part = _Part(text, target)
        parts.append(part)
        futures[pool.submit(part.compile)] = k

    def release() -> None:
        """Let the modules already handed to LLVM finish on their threads and free themselves there."""
        for fut, k in futures.items():
            fut.add_done_callback(lambda _f, part=parts[k]: part.close())
        pool.shutdown(wait=False)

    try:
        emitted = emit_llvm_parts(prim_funcs, target, max_parts=MAX_PARTS, progress=progress,
                                  on_part=on_part if pool is not None else None)
    except BaseException:
        if pool is not None:
            pool.shutdown(wait=True)
            for part in parts:
                part.close()
        raise
    texts, functions = emitted.texts, emitted.functions
    stats = {"kernels": len(functions), "distinct": emitted.distinct, "parts": len(texts),
             "emit_seconds": emitted.seconds, "optimize_seconds": 0.0, "codegen_seconds": 0.0,
             "llvm_seconds": 0.0}
    released = False
    try:
        source = texts[0] if len(texts) == 1 else "".join(f"; part {k}\n{t}" for k, t in enumerate(texts))
        tdict = target.to_dict()
        if uses_amx_tiles(texts):
            tdict["amx"] = True   # the loader asks the OS for the tile state (runtime.host.check_target)
        key = _cache.cache_key(source, tdict)
        index_stats = {k: stats[k] for k in ("kernels", "distinct", "parts")}
        hit = _cache.load(key, functions)
        if hit is not None:
            if pool is not None:
                release()
                released = True
            if inputs is not None:
                _cache.store_index(inputs, key, tdict, index_stats, functions)
            if progress is not None:
                progress("llvm", 1, 1, "cached")
            return CompiledLibrary(hit[0], hit[1], functions, tdict, cached=True, stats=stats)
        t0 = t_llvm or time.perf_counter()
        # the manifest goes with the last module, the one no thread has yet
        for k in range(len(parts), len(texts)):
            text = texts[k] + manifest_ir(key, functions) if k == len(texts) - 1 else texts[k]
            parts.append(_Part(text, target))
        if progress is not None:
            progress("llvm", 0, len(parts), "")
        if pool is None:
            for k, part in enumerate(parts, start=1):
                part.compile()
                if progress is not None:
                    progress("llvm", k, len(parts), f"part {k - 1}")
        else:
            for k in range(len(futures), len(parts)):
                futures[pool.submit(parts[k].compile)] = k
            for done, fut in enumerate(as_completed(futures), start=1):
                fut.result()
                if progress is not None:
                    progress("llvm", done, len(parts), f"part {futures[fut]}")
        obj = merge_objects([p.object for p in parts])
        optimized = "".join(("" if len(parts) == 1 else f"; part {k}\n") + str(p.module)
                            for k, p in enumerate(parts))
    finally:
        if not released:
            if pool is not None:
                pool.shutdown(wait=True)
            for p in parts:
                p.close()
    stats["optimize_seconds"] = sum(p.seconds[0] for p in parts)
    stats["codegen_seconds"] = sum(p.seconds[1] for p in parts)
    stats["llvm_seconds"] = time.perf_counter() - t0
    if _cache.store(key, obj, optimized) and inputs is not None:
        _cache.store_index(inputs, key, tdict, index_stats, functions)
    return CompiledLibrary(obj, optimized, functions, tdict, stats=stats)


def codegen_settings(target: Target) -> dict:
    """What steers the code generator besides the PrimFuncs and ``target`` itself, JSON-able: the vector
    unit (:class:`SimdInfo`, which reads the ``MB_SIMD*`` testing hooks and the OS's AMX grant), the
    kernel families' tunables (``TUNING``, ``ATTENTION_TUNING``), the module split (:data:`MAX_PARTS`,
    :data:`MIN_SPLIT_INSTRUCTIONS`, :data:`FIRST_PART_SHARE`), :data:`COLD_ELEMENTS`, :data:`COLD_FLOAT_ELEMENTS`
    and every ``MB_*`` environment variable but
    the thread count and the cache's own. Part of the cache's input key (:func:`.cache.input_key`)."""
    from .kernels.attention.plan import ATTENTION_TUNING
    from .kernels.linear.plan import TUNING

    simd = SimdInfo.from_target(target.triple, target.features, target.matmul_precision)
    skip = ("MB_BUILD_THREADS", "MB_CACHE", "MB_CACHE_DIR")
    return {"simd": repr(simd), "tuning": dict(TUNING), "attention_tuning": dict(ATTENTION_TUNING),
            "max_parts": MAX_PARTS, "min_split_instructions": MIN_SPLIT_INSTRUCTIONS,
            "first_part_share": FIRST_PART_SHARE,
            "cold_elements": COLD_ELEMENTS, "cold_float_elements": COLD_FLOAT_ELEMENTS,
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MB_") and k not in skip}}


def manifest_ir(source: str, functions: dict[str, dict]) -> str:
    """LLVM IR of the object's manifest (:func:`runtime.native.manifest_bytes` of ``source`` and the
    kernels' metadata ``functions``): a constant in section ``.mb_manifest``, exported so that the
    optimizer keeps it. Appended to a module's text before it is compiled."""
    data = manifest_bytes(source, functions)
    body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)
    return (f'\n@__mb_manifest = constant [{len(data)} x i8] c"{body}", '
            f'section "{MANIFEST_SECTION}", align 1\n')


def build_prim_func(func: PrimFunc, name: str | None = None, target: Target | None = None
                    ) -> CompiledLibrary:
    """``build({name or func.name: func}, target)``. One PrimFunc compiled alone into a
    :class:`CompiledLibrary`, exported as ``name`` (default: the function's name). Raises as :func:`build`."""
    return build({name or func.name: func}, target)
