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
* the distinct kernels split into up to :data:`MAX_PARTS` LLVM modules, each run through LLVM's new
  pass manager at ``-O3`` for the host target and ``TargetMachine.emit_object`` on its own thread,
  the objects merged into one (:mod:`.objmerge`), and the on-disk object cache (:mod:`.cache`,
  keyed by the IR's hash) around those steps;
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
from .dedup import KernelTwins, specialization
from .llvm_emit import ModuleEmitter
from .lower import is_lowered, lower
from .objmerge import merge_objects
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


def emit_llvm_parts(prim_funcs: dict[str, PrimFunc], target: Target | None = None,
                    max_parts: int | None = None, progress: Progress | None = None) -> LlvmParts:
    """Unoptimized LLVM IR and metadata for ``prim_funcs`` (symbol name -> PrimFunc), split into at
    most ``max_parts`` (default :data:`MAX_PARTS`) modules that can be optimized and compiled
    independently.

    A function structurally equal to one emitted before (:class:`.dedup.KernelTwins`) is an alias of
    that one's entry, in the same module. The distinct kernels go, in order, each to the module with
    the fewest LLVM instructions so far (a deterministic balance: the same input always gives the same
    modules); below :data:`MIN_SPLIT_INSTRUCTIONS` in all, everything is one module. ``progress``
    is called as ``progress("kernels", done, total, name)`` after each function.

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
    emitters: list[ModuleEmitter] = []
    loads: list[int] = []
    home: dict[str, int] = {}           # distinct kernel -> the module holding it
    functions: dict[str, dict] = {}
    twins = KernelTwins()
    extras: dict[str, list[str]] = {}   # name -> its body's extra error messages
    aliases: list[tuple[str, str]] = []
    module_of: dict[str, int] = {}      # every emitted entry -> its module
    bodies: dict[str, tuple] = {}       # kernel-family kernel -> (func, body function, signature)
    total = len(prim_funcs)
    for done, (name, func) in enumerate(_general_first(prim_funcs), start=1):
        if not isinstance(func, PrimFunc):
            raise TypeError(f"'{name}' is not a PrimFunc")
        if not name.isidentifier():
            raise ValueError(f"function name {name!r} is not a valid symbol")
        twin = twins.find(func)
        if twin is not None:   # an identical kernel is emitted already: this symbol is its entry
            sig = plan_signature(func, name)
            functions[name] = {**sig.metadata(extras[twin]), "kernel": functions[twin]["kernel"]}
            if "notes" in functions[twin]:
                functions[name]["notes"] = functions[twin]["notes"]
            aliases.append((name, twin))
        elif (general := _general_body(func, bodies, functions, simd)) is not None:
            gname, body_syms = general
            _, body_fn, gsig = bodies[gname]
            sig = plan_signature(func, name)
            module_of[name] = module_of[gname]
            emitters[module_of[name]].add_entry(name, body_fn, func, sig, body_syms,
                                                len(sig.checks) - len(gsig.checks))
            functions[name] = {**sig.metadata(extras[gname]), "kernel": functions[gname]["kernel"]}
            if "notes" in functions[gname]:
                functions[name]["notes"] = functions[gname]["notes"]
            extras[name] = extras[gname]
            twins.add(name, func)
        else:
            twins.add(name, func)
            if len(emitters) < max(1, max_parts) and (not emitters or sum(loads) >= MIN_SPLIT_INSTRUCTIONS):
                emitters.append(ModuleEmitter(target.triple, data_layout))
                loads.append(0)
            part = min(range(len(emitters)), key=lambda k: (loads[k], k))
            emitter = emitters[part]
            first = sum(1 for g in emitter.module.globals.values() if isinstance(g, ir.Function))
            functions[name], extras[name], body = _emit_kernel(emitter, name, func, simd)
            if body is not None:
                bodies[name] = (func, *body)
            loads[part] += _instructions(emitter.module, first)
            home[name] = module_of[name] = part
        if progress is not None:
            progress("kernels", done, total, name)
    functions = {name: functions[name] for name in prim_funcs}   # the caller's order
    for name, func in prim_funcs.items():
        if func.attrs.get(WEIGHT_TRANSFORM_ATTR):   # the VM may keep its results (runtime.vm)
            functions[name]["weight_transform"] = True
    texts = [finalize_loop_metadata(str(e.module)) for e in emitters] or [""]
    for name, twin in aliases:
        texts[module_of[twin]] += f'\n@"{name}" = alias i32 (ptr, ptr), ptr @"{twin}"'
    texts = [t + "\n" if aliases else t for t in texts]
    return LlvmParts(texts, functions, len(home), time.perf_counter() - t0)


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


def _label(func: PrimFunc, simd: SimdInfo) -> str:
    """The ``kernel`` entry of ``func``'s metadata: ``family/simd[+variant]`` for a kernel its family's
    planner accepts, ``loops`` (or ``loops (family: why not)``) for one emitted as loops."""
    family, plan = plan_kernel(func, simd)
    if family is None:
        return "loops"
    if isinstance(plan, str):
        return f"loops ({family}: {plan})"
    return _kernel_label(family, plan, simd)


def _general_body(func: PrimFunc, bodies: dict[str, tuple], functions: dict[str, dict], simd: SimdInfo
                  ) -> tuple[str, list] | None:
    """A kernel emitted already whose body computes ``func`` when called with some of its symbolic dims
    fixed (:func:`.dedup.specialization`: a decode step's ``seq = 1`` kernel and the prefill kernel; a
    kernel-family kernel or loops), compiled the same way (the same ``kernel`` label): ``(name,
    body_syms)``, or None."""
    if not bodies:
        return None
    label = None
    for gname, (general, _, _) in bodies.items():
        order = specialization(general, func)
        if order is None:
            continue
        if label is None:
            label = _label(func, simd)
        if functions[gname]["kernel"] == label:
            return gname, order
    return None


#: A loops kernel is cold (:func:`cold_kernel`) when no parameter has more than this many elements per
#: value of its symbolic dims (kernels that write integers or bools only) ...
COLD_ELEMENTS = 16
#: ... or this many (kernels that write floats: a RoPE table's row of ``head_dim`` values per token).
COLD_FLOAT_ELEMENTS = 64


def cold_kernel(func: PrimFunc) -> bool:
    """True when every parameter of ``func`` has at most two symbolic dims (an expression dim counts as
    one) and few elements per combination of them (the product of its constant dims): at most
    :data:`COLD_ELEMENTS` when ``func`` writes only integer or bool tensors (indices, positions, masks,
    lengths), at most :data:`COLD_FLOAT_ELEMENTS` when it writes floats, whose parameters with a symbolic
    dim then have at least two dims (a flattened activation is a long 1-D vector, ``(n,)``). That is a few values per
    sequence or per token over ``(batch, seq)``: the rotary tables of a decode step (``positions *
    inv_freq``, their ``cos`` / ``sin``, ``(batch, seq, 1, head_dim)``), never a hidden-size row or an
    image with symbolic height and width. Such loops kernels are compiled without LLVM's optimizer
    (``optnone``), which costs them microseconds per call (their cost is the call; the ``cos`` of a
    512-token prefill's 32-wide table 34 -> 39 us, Zen 4) and saves the build tens of milliseconds each
    (the 2-layer Llama recipe's nine rotary-table kernels 0.36-0.5 -> 0.03 s of LLVM CPU); weight
    transforms (large constant shapes) and every kernel over hidden-size rows stay at ``-O3``.

    Raises ValueError as :func:`.abi.plan_signature` for a parameter dtype it does not support."""
    written = plan_signature(func).written
    floats = any(out and not (p.dtype == "bool" or p.dtype.startswith(("int", "uint")))
                 for p, out in zip(func.params, written))
    limit = COLD_FLOAT_ELEMENTS if floats else COLD_ELEMENTS
    for p in func.params:
        n, symbolic = 1, 0
        for d in p.shape:
            if isinstance(d, E.IntImm):
                n *= d.value
            else:
                symbolic += 1
        if n > limit or symbolic > 2 or (floats and symbolic and len(p.shape) < 2):
            return False
    return True


def _emit_kernel(emitter: ModuleEmitter, name: str, func: PrimFunc, simd: SimdInfo
                 ) -> tuple[dict, list[str], tuple | None]:
    """Emit one distinct kernel (entry and body) into ``emitter``; returns its metadata, the
    body's extra error messages and ``(body function, signature)``, the body a specialization of the
    kernel may call (None for a loops kernel whose lowering changed its parameters' symbolic vars)."""
    family, plan = plan_kernel(func, simd)
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
    extra, body_fn = emitter.add_function(name, lowered, sig, optimize=not cold_kernel(func))
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
    ctypes calls that release the GIL, and each module has its own LLVMContext and TargetMachine),
    and the objects are merged into one (:func:`.objmerge.merge_objects`). The parts depend only on
    the input, never on the thread count, so the object's bytes do not either. The object is looked
    up in / added to the on-disk cache (:mod:`builder.codegen.cache`) by the hash of the generated IR
    and the target; before any IR is emitted, by the hash of the build's inputs
    (:func:`.cache.input_key` with :func:`codegen_settings`), so that a build seen before emits nothing
    (``emit_seconds`` 0). ``stats`` on the result: kernel counts and seconds per phase.

    ``progress``, when given, is called on this thread as ``progress(phase, done, total, item)``:
    ``("kernels", k, n, name)`` after each of the ``n`` functions is emitted, then
    ``("llvm", 0, parts, "")`` before LLVM starts and ``("llvm", k, parts, "part i")`` as each module
    is compiled, or ``("llvm", 1, 1, "cached")`` on a cache hit. An exception it raises aborts the
    build (after the running LLVM work ends).

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
    emitted = emit_llvm_parts(prim_funcs, target, max_parts=MAX_PARTS, progress=progress)
    texts, functions = emitted.texts, emitted.functions
    stats = {"kernels": len(functions), "distinct": emitted.distinct, "parts": len(texts),
             "emit_seconds": emitted.seconds, "optimize_seconds": 0.0, "codegen_seconds": 0.0,
             "llvm_seconds": 0.0}
    source = texts[0] if len(texts) == 1 else "".join(f"; part {k}\n{t}" for k, t in enumerate(texts))
    tdict = target.to_dict()
    if uses_amx_tiles(texts):
        tdict["amx"] = True   # the loader asks the OS for the tile state (runtime.host.check_target)
    key = _cache.cache_key(source, tdict)
    index_stats = {k: stats[k] for k in ("kernels", "distinct", "parts")}
    hit = _cache.load(key, functions)
    if hit is not None:
        if inputs is not None:
            _cache.store_index(inputs, key, tdict, index_stats, functions)
        if progress is not None:
            progress("llvm", 1, 1, "cached")
        return CompiledLibrary(hit[0], hit[1], functions, tdict, cached=True, stats=stats)
    t0 = time.perf_counter()
    texts = [texts[0] + manifest_ir(key, functions), *texts[1:]]
    parts: list[_Part] = []
    try:
        for t in texts:
            parts.append(_Part(t, target))
        if progress is not None:
            progress("llvm", 0, len(parts), "")
        threads = min(build_threads(), len(parts))
        if threads == 1:
            for k, part in enumerate(parts, start=1):
                part.compile()
                if progress is not None:
                    progress("llvm", k, len(parts), f"part {k - 1}")
        else:
            with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mb-llvm") as pool:
                futures = {pool.submit(p.compile): k for k, p in enumerate(parts)}
                for done, fut in enumerate(as_completed(futures), start=1):
                    fut.result()
                    if progress is not None:
                        progress("llvm", done, len(parts), f"part {futures[fut]}")
        obj = merge_objects([p.object for p in parts])
        optimized = "".join(("" if len(parts) == 1 else f"; part {k}\n") + str(p.module)
                            for k, p in enumerate(parts))
    finally:
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
    :data:`MIN_SPLIT_INSTRUCTIONS`), :data:`COLD_ELEMENTS`, :data:`COLD_FLOAT_ELEMENTS` and every ``MB_*`` environment variable but
    the thread count and the cache's own. Part of the cache's input key (:func:`.cache.input_key`)."""
    from .kernels.attention.plan import ATTENTION_TUNING
    from .kernels.linear.plan import TUNING

    simd = SimdInfo.from_target(target.triple, target.features, target.matmul_precision)
    skip = ("MB_BUILD_THREADS", "MB_CACHE", "MB_CACHE_DIR")
    return {"simd": repr(simd), "tuning": dict(TUNING), "attention_tuning": dict(ATTENTION_TUNING),
            "max_parts": MAX_PARTS, "min_split_instructions": MIN_SPLIT_INSTRUCTIONS,
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
