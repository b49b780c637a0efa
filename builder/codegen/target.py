"""Compilation target: the host CPU through llvmlite's native target."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

__all__ = ["Target", "init_llvm"]

_INIT_LOCK = threading.Lock()
_INITIALIZED = False


def init_llvm() -> None:
    """Initialize LLVM's native target and asm printer once (``llvm.initialize()`` is gone in
    llvmlite 0.50)."""
    global _INITIALIZED
    with _INIT_LOCK:
        if not _INITIALIZED:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _INITIALIZED = True


@dataclass(frozen=True)
class Target:
    """An LLVM target: ``triple`` (e.g. ``x86_64-unknown-linux-gnu``), ``cpu`` (e.g. ``znver3``),
    ``features`` (``+avx2,+fma,...``) and the optimization level (0-3)."""

    triple: str
    cpu: str
    features: str
    opt_level: int = 3

    @classmethod
    def host(cls) -> "Target":
        """The machine this process runs on (process triple, host CPU name and features)."""
        init_llvm()
        return cls(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                   llvm.get_host_cpu_features().flatten())

    def target_machine(self) -> "llvm.TargetMachine":
        """An llvmlite TargetMachine for this target (PIC, default code model).

        Raises RuntimeError when LLVM does not know the triple (only the native target is
        initialized)."""
        init_llvm()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features,
                                            opt=self.opt_level, reloc="pic", codemodel="default")

    def to_dict(self) -> dict:
        """JSON-able description."""
        return {"triple": self.triple, "cpu": self.cpu, "features": self.features,
                "opt_level": self.opt_level}
