"""Compilation target: the host CPU through llvmlite's native target."""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm

from runtime.target import host_target_machine, init_llvm

__all__ = ["Target", "init_llvm"]


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
        """An llvmlite TargetMachine for this target: large code model, static relocations (why:
        :func:`runtime.target.host_target_machine`).

        Raises RuntimeError when LLVM does not know the triple (only the native target is
        initialized)."""
        return host_target_machine(self.triple, self.cpu, self.features, self.opt_level)

    def to_dict(self) -> dict:
        """JSON-able description."""
        return {"triple": self.triple, "cpu": self.cpu, "features": self.features,
                "opt_level": self.opt_level}
