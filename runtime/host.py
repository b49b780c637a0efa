"""The host as a compilation target: LLVM's initialization, the one TargetMachine all our native code is
generated and loaded with, the check that code made elsewhere can run here, and the host's cache sizes
(which size the kernels' blocks).

Imports only llvmlite and the standard library (the thread pool and the object loader both need it).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

import llvmlite.binding as llvm

__all__ = ["init_llvm", "host_target_machine", "check_target", "host_cache_bytes", "amx_permitted"]

_LLVM_LOCK = threading.Lock()
_LLVM_READY = False


def init_llvm() -> None:
    """Initialize LLVM's native target and asm printer once per process, and make libm / libc /
    libgcc_s visible to the JIT's symbol lookup (generated code calls ``erff``, ``expf``, half-precision
    helpers such as ``__truncsfhf2`` on CPUs without F16C)."""
    global _LLVM_READY
    with _LLVM_LOCK:
        if _LLVM_READY:
            return
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        for lib in ("m", "c", "gcc_s"):
            path = ctypes.util.find_library(lib)
            if path:
                try:
                    llvm.load_library_permanently(path)
                except RuntimeError:
                    pass
        _LLVM_READY = True


def host_target_machine(triple: str, cpu: str, features: str, opt: int = 3) -> "llvm.TargetMachine":
    """The LLVM TargetMachine every piece of our native code is generated with (the code generator's
    kernels, the thread pool) -- the one place that chooses the code and relocation models.

    Large code model, static relocations: every reference from code to its constants, to other
    functions and to external symbols (libm, the thread pool) is an absolute 64-bit address
    (``R_X86_64_64``), which the JIT's loader patches wherever it places the sections. The default
    small code model uses 32-bit PC-relative references (``R_X86_64_PC32`` / ``PLT32``): when a large
    address space (torch, transformers imported in the same process) puts the constants more than
    2 GB from the code, RuntimeDyld aborts the process (``isInt<32>(RealOffset)``). PIC with the large
    code model reaches data through GOT-relative relocations (``R_X86_64_GOTOFF64``, ``GOTPC64``) that
    need a GOT the MCJIT loader builds only partially; the object is loaded once, in this process, so
    position independence buys nothing.

    With ``+avx512f`` in ``features`` the CPU's tuning flag ``prefer-256-bit`` is turned off: LLVM sets
    it for Intel's AVX-512 cores (``skylake-avx512`` to ``sapphirerapids``, and ``rocketlake``, the
    name LLVM gives some virtualized Xeons), and its loop vectorizer then makes 256-bit loops of the
    epilogues and elementwise kernels while the hand-written kernels (:class:`~builder.codegen.kernels.simd.SimdInfo`,
    16 lanes from ``avx512f``) already run on zmm registers. Raises RuntimeError for a triple LLVM
    does not know.
    """
    init_llvm()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=_vector_width_features(features), opt=opt,
                                        reloc="static", codemodel="large")


def _vector_width_features(features: str) -> str:
    """``features`` with ``-prefer-256-bit`` appended when it enables AVX-512 (see
    :func:`host_target_machine`)."""
    if "avx512f" in _plus_features(features) and "prefer-256-bit" not in features:
        return f"{features},-prefer-256-bit" if features else "-prefer-256-bit"
    return features


def _plus_features(features: str) -> set[str]:
    return {f[1:] for f in features.split(",") if f.startswith("+")}


def check_target(target: dict) -> None:
    """Raise ValueError when native code made for ``target`` (``{"triple", "cpu", "features"}``, as
    an Executable records it) cannot run on this host: another triple, CPU features (``+avx512f``)
    the host lacks, or kernels that run AMX tiles (``"amx": true``) where :func:`amx_permitted` says
    no. The message names both sides and says to rebuild."""
    init_llvm()
    if not isinstance(target, dict) or not isinstance(target.get("triple"), str) \
            or not isinstance(target.get("features", ""), str):
        raise ValueError(f"the executable's target is malformed: {target!r}")
    host = llvm.get_process_triple()
    if target["triple"] != host:
        raise ValueError(f"the executable was compiled for {target['triple']} ({target.get('cpu', '?')}); "
                         f"this host is {host} ({llvm.get_host_cpu_name()}): rebuild it here")
    missing = sorted(_plus_features(target.get("features", "")) - _plus_features(
        llvm.get_host_cpu_features().flatten()))
    if missing:
        raise ValueError(f"the executable was compiled for a CPU with {', '.join(missing)} "
                         f"({target.get('cpu', '?')}), which this host ({llvm.get_host_cpu_name()}) lacks: "
                         "rebuild it here")
    if target.get("amx") and not amx_permitted():
        raise ValueError("the executable's kernels use AMX tiles, which this host's CPU or operating system does "
                         "not grant this process: rebuild it here")


_AMX_LOCK = threading.Lock()
_AMX: bool | None = None


def amx_permitted() -> bool:
    """True when this process may run Intel AMX tile instructions: the CPU has them (``amx-tile`` and
    ``amx-bf16`` in LLVM's host features) and Linux granted the tile data state to the process.

    Linux (5.16 and later) leaves AMX's 8 KiB register state off until a process asks for it with
    ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`` (``0x1023``, feature 18; the kernel's
    ``Documentation/arch/x86/xstate.rst``); a tile instruction without it is a SIGILL. Asked once per
    process; the answer is cached. False on other CPUs, OSes and architectures, or when the request
    fails (an older kernel, a sandbox that filters the call)."""
    global _AMX
    with _AMX_LOCK:
        if _AMX is None:
            _AMX = _request_amx()
        return _AMX


def _request_amx() -> bool:
    init_llvm()
    if not {"amx-tile", "amx-bf16"} <= _plus_features(llvm.get_host_cpu_features().flatten()):
        return False
    if not llvm.get_process_triple().startswith(("x86_64", "amd64")) or not os.uname().sysname == "Linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
        return libc.syscall(ctypes.c_long(sys_arch_prctl), ctypes.c_long(arch_req_xcomp_perm),
                            ctypes.c_ulong(xfeature_xtiledata)) == 0
    except (OSError, AttributeError):
        return False


def host_cache_bytes(level: int, base: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The size in bytes of the first CPU's level-``level`` data or unified cache (per core for the
    L1 / L2 of an x86 core, the whole L3), from Linux's cache directory ``base`` (``index*/level``,
    ``type`` and ``size`` such as ``2048K`` / ``480M``), else ``sysconf`` where Python knows the name;
    0 when unknown (another OS, a VM that hides its caches)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        for idx in sorted(base.glob("index*")):
            if (idx / "level").read_text().strip() != str(level):
                continue
            kind = idx / "type"
            if kind.exists() and kind.read_text().strip() == "Instruction":
                continue
            text = (idx / "size").read_text().strip().upper()
            return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    except (OSError, ValueError):
        pass
    try:
        return max(0, int(os.sysconf(f"SC_LEVEL{level}_{'D' if level == 1 else ''}CACHE_SIZE")))
    except (ValueError, OSError, AttributeError):
        return 0
