"""Compilation target: the host CPU through llvmlite's native target."""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm

from core.precision import MATMUL_PRECISIONS
from runtime.host import host_target_machine, init_llvm

__all__ = ["Target", "init_llvm", "MATMUL_PRECISIONS"]

# MATMUL_PRECISIONS: the float32 matmul precisions (:data:`core.precision.MatmulPrecision`). The kernels that
# honour them: the GEMM on AMX tiles (:mod:`builder.codegen.kernels.linear.amx`); without AMX every setting
# computes in float32.


@dataclass(frozen=True)
class Target:
    """An LLVM target: ``triple`` (e.g. ``x86_64-unknown-linux-gnu``), ``cpu`` (e.g. ``znver3``),
    ``features`` (``+avx2,+fma,...``), the optimization level (0-3) and the float32 matmul precision
    the kernels may use (one of :data:`MATMUL_PRECISIONS`, like TVM's ``-fast-math`` flags of an
    ``llvm`` target a code-generation option).

    Raises ValueError for an unknown ``matmul_precision``."""

    triple: str
    cpu: str
    features: str
    opt_level: int = 3
    matmul_precision: str = "highest"

    def __post_init__(self) -> None:
        if self.matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(f"matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)}, "
                             f"got {self.matmul_precision!r}")

    @classmethod
    def host(cls, matmul_precision: str = "highest") -> "Target":
        """The machine this process runs on (process triple, host CPU name and features), with the
        features above the vector level of the ``MB_SIMD`` testing cap turned off
        (:func:`builder.codegen.kernels.simd.capped_features`: under ``MB_SIMD=avx2`` an AVX-512 host
        compiles what an AVX2 CPU runs).

        Raises ValueError for an unknown ``MB_SIMD`` or ``matmul_precision``."""
        from .kernels.simd import capped_features

        init_llvm()
        triple = llvm.get_process_triple()
        return cls(triple, llvm.get_host_cpu_name(), capped_features(triple, llvm.get_host_cpu_features().flatten()),
                   matmul_precision=matmul_precision)

    def target_machine(self) -> "llvm.TargetMachine":
        """An llvmlite TargetMachine for this target: large code model, static relocations (why:
        :func:`runtime.host.host_target_machine`).

        Raises RuntimeError when LLVM does not know the triple (only the native target is
        initialized)."""
        return host_target_machine(self.triple, self.cpu, self.features, self.opt_level)

    def to_dict(self) -> dict:
        """JSON-able description. ``triple``, ``cpu``, ``features`` (LLVM's ``+avx2,...`` string),
        ``opt_level`` and ``matmul_precision``: what the compile cache keys on (:func:`.cache.cache_key`) and
        a built object records."""
        return {"triple": self.triple, "cpu": self.cpu, "features": self.features,
                "opt_level": self.opt_level, "matmul_precision": self.matmul_precision}
