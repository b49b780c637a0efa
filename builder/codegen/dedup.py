"""Identical kernels compiled once: :class:`KernelTwins` finds, for a PrimFunc, a function emitted
already that is structurally equal to it (:func:`builder.ir.structural_equal`: the same loops,
expressions, dtypes, shapes up to the renaming of buffers and variables, and the same attributes but
the symbol name). The code generator then emits only the new function's entry (its own argument
checks and messages) and calls the twin's body, so a model whose layers repeat (12 identical
attention blocks) pays LLVM for one body per distinct kernel.
"""
from __future__ import annotations

from ..ir.structural import structural_equal
from ..ir.tir import PrimFunc

__all__ = ["KernelTwins"]


def _anonymous(func: PrimFunc) -> PrimFunc:
    """``func`` without its name (the ``global_symbol`` attribute and the name hint)."""
    attrs = {k: v for k, v in func.attrs.items() if k != "global_symbol"}
    return PrimFunc(func.params, func.body, attrs, "kernel")


def _fingerprint(func: PrimFunc) -> tuple:
    """A cheap key that structurally equal functions share (parameter dtypes and ranks)."""
    return tuple((p.dtype, len(p.shape)) for p in func.params)


class KernelTwins:
    """The functions emitted so far, by fingerprint. ``find(func)`` returns the name of an emitted
    function structurally equal to ``func`` (or None); ``add(name, func)`` records one."""

    def __init__(self) -> None:
        self._seen: dict[tuple, list[tuple[str, PrimFunc]]] = {}

    def find(self, func: PrimFunc) -> str | None:
        anon = None
        for name, other in self._seen.get(_fingerprint(func), ()):
            anon = anon or _anonymous(func)
            if structural_equal(anon, other, map_free_vars=True):
                return name
        return None

    def add(self, name: str, func: PrimFunc) -> None:
        self._seen.setdefault(_fingerprint(func), []).append((name, _anonymous(func)))
