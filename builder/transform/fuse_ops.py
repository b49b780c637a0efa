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
from .patterns import MAX_FUSE_DEPTH, FusionPass, Match, kernel_name

__all__ = ["FuseOps", "MAX_FUSE_DEPTH"]


class FuseOps(FusionPass):
    """Pass: see the module docstring. ``FuseOps()(mod)``; ``FuseOps(max_fuse_depth=8)`` bounds groups
    more tightly."""

    name = "fuse_ops"

    def emit(self, bb: BlockBuilder, m: Match) -> rx.Expr | None:
        """The fused kernel call for match ``m``: one ``R.call_tir`` of a PrimFunc that replays the topi
        computes of the matched elementwise tree with every intermediate inlined
        (:func:`builder.te.topi.inline_injective`), named after its ops (``fused_silu_multiply``). None
        (the bindings stay as they are) for a single op, or when building the computes raises ValueError /
        TypeError (a tree the computes cannot express)."""
        if len(m.ops) < 2:
            return None
        tree = m.tree
        try:
            return call_te(bb, lambda *ts: topi.inline_injective(topi.replay(tree, ts)), tuple(m.tensors), {},
                           kernel_name(m.ops))
        except (ValueError, TypeError):
            return None
