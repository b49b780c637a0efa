"""Hand-scheduled kernel emitters, registered per op family.

A PrimFunc whose ``attrs["mb.kernel"]`` holds a kernel spec of :mod:`builder.ir.kernel` (its
``kind`` names the family: :class:`~builder.ir.kernel.LinearKernelSpec` is ``"linear"``) is offered
to that family's planner first; when the planner accepts it (shapes, dtypes and block structure
check out for the target's vector unit), the family's emitter writes the function body
instead of the generic loop lowering. Otherwise -- or on a CPU without usable vectors -- the
generic path compiles the PrimFunc's reference loops, so the attribute is only ever a
performance hint. ``MB_KERNELS=0`` disables every emitter (for comparisons and debugging).

Families: ``linear`` (:mod:`.linear`: GEMV / GEMM with in-register weight decoding and fused
epilogues), ``attention`` (:mod:`.attention`: scaled dot-product attention with an online softmax,
FlashAttention-2's schedule). Reusable pieces: :mod:`.simd` (ISA detection, IR helpers), :mod:`.decode` (weight
decoders: dense float32 / float16 / bfloat16, group-quantized).
"""
from __future__ import annotations

import os
from typing import Callable

from ...ir.tir import PrimFunc
from .attention import AttentionPlan, emit_attention, plan_attention
from .linear import KERNEL_ATTR, TUNING, LinearPlan, emit_linear, plan_linear  # noqa: F401
from .simd import SimdInfo

__all__ = ["KERNEL_ATTR", "SimdInfo", "KERNEL_FAMILIES", "plan_kernel", "TUNING", "LinearPlan", "AttentionPlan"]

#: family -> (planner(func, simd) -> plan | reason, emitter(mod, name, func, sig, plan, simd)).
KERNEL_FAMILIES: dict[str, tuple[Callable, Callable]] = {
    "linear": (plan_linear, emit_linear),
    "attention": (plan_attention, emit_attention),
}


def plan_kernel(func: PrimFunc, simd: SimdInfo):
    """``(family, plan)`` when a registered emitter takes ``func``, else ``(family, reason)``
    with ``reason`` a string (family ``None`` when ``func`` has no kernel attribute)."""
    family = getattr(func.attrs.get(KERNEL_ATTR), "kind", None)
    if family is None:
        return None, "no kernel attribute"
    if os.environ.get("MB_KERNELS", "1").strip() == "0":
        return family, "disabled by MB_KERNELS=0"
    entry = KERNEL_FAMILIES.get(family)
    if entry is None:
        return family, f"unknown kernel family {family!r}"
    if _has_runtime_checks(func):
        return family, "run-time shape checks (symbolic dims the graph could not relate)"
    return family, entry[0](func, simd)


def _has_runtime_checks(func: PrimFunc) -> bool:
    """Whether the body holds ``T.evaluate(T.assert_le(...))`` statements, which only the
    generic loop lowering emits."""
    from ...ir import expr as E
    from ...ir.tir import Evaluate, walk_stmt

    found = []
    walk_stmt(func.body, lambda s: found.append(s) if isinstance(s, Evaluate) and isinstance(
        s.value, E.Call) and s.value.op == "assert_le" else None)
    return bool(found)

