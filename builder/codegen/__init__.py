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
  the same codes);
* LLVM's new pass manager at ``-O3`` for the host target, ``TargetMachine.emit_object``, and
  the on-disk object cache (:mod:`.cache`, keyed by the IR's hash) around those two steps;
* a manifest in the object (section ``.mb_manifest``: the cache key it was compiled from and
  each kernel's signature, :func:`runtime.native.manifest_bytes`), which the loader and the cache
  check against the metadata before any byte of the object reaches LLVM.

:class:`runtime.native.NativeLibrary` loads the result; the calling convention is documented in
:mod:`builder.codegen.abi`, the thread pool in :mod:`runtime.threadpool`. Each function's
metadata records which path compiled it (``"kernel": "linear/avx2"`` or ``"loops"``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.binding as llvm

from runtime.native import MANIFEST_SECTION, manifest_bytes

from ..ir import tir
from ..ir.tir import PrimFunc
from . import cache as _cache
from .abi import dim_to_json, plan_signature
from .accumulate import promote_accumulators
from .dedup import KernelTwins
from .llvm_emit import ModuleEmitter
from .lower import is_lowered, lower
from .schedule import schedule
from .kernels import KERNEL_FAMILIES, SimdInfo, plan_kernel
from .kernels.simd import finalize_loop_metadata
from .target import Target, init_llvm

__all__ = ["Target", "CompiledLibrary", "build", "build_prim_func", "lower", "dim_to_json",
           "emit_llvm_ir", "manifest_ir"]


@dataclass
class CompiledLibrary:
    """The result of :func:`build`.

    ``object_code``: relocatable object for the target (``TargetMachine.emit_object``);
    ``llvm_ir``: the optimized module as text; ``functions``: JSON-able metadata per symbol
    (see :mod:`builder.codegen.abi`); ``target``: :meth:`Target.to_dict`; ``cached``: True
    when the object came from the on-disk cache (:mod:`builder.codegen.cache`).
    """

    object_code: bytes
    llvm_ir: str
    functions: dict[str, dict]
    target: dict = field(default_factory=dict)
    cached: bool = False

    def load(self):
        """Load into this process: a :class:`runtime.native.NativeLibrary` (host target only)."""
        from runtime.native import NativeLibrary

        return NativeLibrary(self.object_code, self.functions, self.target or None)


def emit_llvm_ir(prim_funcs: dict[str, PrimFunc], target: Target | None = None
                 ) -> tuple[str, dict[str, dict]]:
    """Unoptimized LLVM IR text and metadata for ``prim_funcs`` (symbol name -> PrimFunc).

    Blocks are lowered first. Raises ValueError for unsupported dtypes / unbindable symbolic
    vars, :class:`builder.ir.tir.VerifyError` for ill-formed functions.
    """
    target = target or Target.host()
    tm = target.target_machine()
    simd = SimdInfo.from_target(target.triple, target.features)
    emitter = ModuleEmitter(target.triple, str(tm.target_data))
    functions: dict[str, dict] = {}
    twins = KernelTwins()
    extras: dict[str, list[str]] = {}   # name -> its body's extra error messages
    aliases: list[tuple[str, str]] = []
    for name, func in prim_funcs.items():
        if not isinstance(func, PrimFunc):
            raise TypeError(f"'{name}' is not a PrimFunc")
        if not name.isidentifier():
            raise ValueError(f"function name {name!r} is not a valid symbol")
        twin = twins.find(func)
        if twin is not None:   # an identical kernel is emitted already: this symbol is its entry
            sig = plan_signature(func, name)
            functions[name] = {**sig.metadata(extras[twin]), "kernel": functions[twin]["kernel"]}
            aliases.append((name, twin))
            continue
        twins.add(name, func)
        family, plan = plan_kernel(func, simd)
        if family is not None and not isinstance(plan, str):
            tir.verify(func)
            sig = plan_signature(func, name)
            ksimd = getattr(plan, "simd", None) or simd   # a plan may ask for narrower vectors
            body_fn, extra = KERNEL_FAMILIES[family][1](emitter, name, func, sig, plan, ksimd)
            emitter.add_entry(name, body_fn, func, sig)
            extras[name] = extra
            variant = getattr(plan, "variant", "")
            functions[name] = {**sig.metadata(extra),
                               "kernel": f"{family}/{ksimd.name}" + (f"+{variant}" if variant else "")}
            continue
        lowered = func if is_lowered(func) else promote_accumulators(lower(schedule(func)))
        sig = plan_signature(lowered, name)
        extra = emitter.add_function(name, lowered, sig)
        extras[name] = extra
        functions[name] = sig.metadata(extra)
        functions[name]["kernel"] = "loops" if family is None else f"loops ({family}: {plan})"
    text = finalize_loop_metadata(str(emitter.module))
    if aliases:
        text += "".join(f'\n@"{name}" = alias i32 (ptr, ptr), ptr @"{twin}"' for name, twin in aliases) + "\n"
    return text, functions


def build(prim_funcs: dict[str, PrimFunc], target: Target | None = None) -> CompiledLibrary:
    """Compile ``prim_funcs`` (symbol name -> PrimFunc) into one object file for ``target``
    (default: the host), optimized with the new pass manager at ``speed_level=3``. The object
    is looked up in / added to the on-disk cache (:mod:`builder.codegen.cache`) by the hash of
    the generated IR and the target.

    Raises ValueError / VerifyError as :func:`emit_llvm_ir`; RuntimeError if LLVM rejects the
    generated IR (a code generator bug).
    """
    target = target or Target.host()
    init_llvm()
    text, functions = emit_llvm_ir(prim_funcs, target)
    key = _cache.cache_key(text, target.to_dict())
    hit = _cache.load(key, functions)
    if hit is not None:
        return CompiledLibrary(hit[0], hit[1], functions, target.to_dict(), cached=True)
    tm = target.target_machine()
    try:
        mod = llvm.parse_assembly(text + manifest_ir(key, functions))
        mod.verify()
    except RuntimeError as err:  # pragma: no cover - generator bug
        raise RuntimeError(f"generated LLVM IR is invalid: {err}\n{text}") from err
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=target.opt_level)
    if target.opt_level >= 2:
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    obj, optimized = tm.emit_object(mod), str(mod)
    _cache.store(key, obj, optimized)
    return CompiledLibrary(obj, optimized, functions, target.to_dict())


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
    """``build({name or func.name: func}, target)``."""
    return build({name or func.name: func}, target)
