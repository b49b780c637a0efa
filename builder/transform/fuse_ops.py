"""FuseOps: chains of elementwise ops become one ``R.call_tir`` kernel each (graph level, after
:class:`~builder.transform.SelectKernels` and before :class:`~builder.transform.LegalizeOps`).

A group is the tree of at least two single-use elementwise ops (ops whose record has pattern
``ELEMWISE`` or ``BROADCAST`` and a fusion ``compute``) rooted at a binding, matched by
:class:`~builder.transform.patterns.FusionMatcher`: ``silu(a) * b`` is one loop nest with every
intermediate inlined (:func:`builder.te.topi.inline_injective`). Inner ops must produce the
result's shape (only leaves broadcast), so no value is recomputed. The fused semantics are those of
the ops it replaces (the same topi computes, float16 / bfloat16 roundings of the intermediates
included).

A group holds at most ``max_fuse_depth`` ops along any path from its result to a leaf (default
:data:`~builder.transform.patterns.MAX_FUSE_DEPTH`, as TVM's ``max_fuse_depth``): a longer chain
(2,000 ``silu`` ops in a row) becomes several kernels, each of bounded size, so that compile time
stays linear and no pass recurses deeper than a kernel.
"""
from __future__ import annotations

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..te import topi
from ..te.call_te import call_te
from .dce import dead_code_elimination
from .pass_infra import FunctionPass
from .patterns import MAX_FUSE_DEPTH, FusionMatcher, kernel_name, rewrite_bindings

__all__ = ["FuseOps", "MAX_FUSE_DEPTH"]


class FuseOps(FunctionPass):
    """Pass: see the module docstring. ``FuseOps()(mod)``; ``FuseOps(max_fuse_depth=8)`` bounds groups
    more tightly."""

    name = "fuse_ops"

    def __init__(self, max_fuse_depth: int = MAX_FUSE_DEPTH) -> None:
        if max_fuse_depth < 1:
            raise ValueError(f"max_fuse_depth must be at least 1, got {max_fuse_depth}")
        self.max_fuse_depth = max_fuse_depth

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        return dead_code_elimination(super().transform_module(mod))

    def transform_function(self, bb: BlockBuilder, func: rx.Function, name: str) -> rx.Function:
        matcher = FusionMatcher(func, linear=False, max_fuse_depth=self.max_fuse_depth)
        replaced: dict[rx.Var, rx.Expr] = {}
        consumed: set = set()
        for b in reversed(matcher.order):
            if b.var in consumed:
                continue
            m = matcher.match(b.var)
            if m is None or len(m.ops) < 2:
                continue
            tree = m.tree
            try:
                call = call_te(bb, lambda *ts: topi.inline_injective(topi.replay(tree, ts)), tuple(m.tensors), {},
                               kernel_name(m.ops))
            except (ValueError, TypeError):
                continue
            replaced[b.var] = call
            consumed.update(m.consumed)
        return rewrite_bindings(func, replaced)
