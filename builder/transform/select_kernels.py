"""SelectKernels: choose the fast kernel for every matmul and quantized gather, before LegalizeOps
(a pattern rewrite, as TVM's ``FuseOpsByPattern``).

1. **matmul + epilogue** -- the tree of single-use elementwise ops over one or two linears
   ``matmul(x, permute_dims(W))`` with the same ``x`` (``W`` a 2-D float tensor, or
   ``group_dequantize(q, s)``: a quantized weight, read packed), matched by
   :class:`~builder.transform.patterns.FusionMatcher`, becomes one ``R.call_tir`` of
   :func:`builder.te.topi.linear_kernel` with a :class:`~builder.ir.kernel.LinearKernelSpec`, which
   the code generator compiles to a GEMV / GEMM with the epilogue applied per output tile
   (``silu(x @ Wg.T) * (x @ Wu.T)``, LLaMA's gated MLP, streams both weights in one pass). A
   ``permute_dims`` of such a tree is part of it: the kernel stores each output at its transposed
   place (a Conv1D's NCW result from its NWC GEMM, :class:`~builder.transform.ConvToGemm`, without
   a transpose pass over it).
   ``x @ W`` with ``W`` stored ``(in, out)`` and a matmul of two activations (``q @ k.T``, ``p @ v``,
   ``torch.bmm``: same batch dims, no broadcast) are linear kernels too, their weight read as stored
   (:func:`~.patterns.stored_weight`).
2. **a matmul left alone** (outside a dataflow block, or one the kernel does not take): a quantized
   weight becomes the fused ``dequantize_linear`` loops (also marked for the quantized GEMV / GEMM),
   a transposed 2-D weight the ``linear`` loops (the transpose is never materialized); any other
   matmul is legalized as ``R.matmul``.
3. **a quantized gather** ``take(group_dequantize(q, s), ids, axis=0)`` (a quantized Embedding)
   becomes one ``dequantize_take`` kernel.

The bindings this consumes (``permute_dims``, ``group_dequantize``, the epilogue's intermediates)
become dead and are removed.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir import relax as rx
from ..ir import tir
from ..ir.block_builder import BlockBuilder
from ..ir.kernel import KERNEL_ATTR, EpilogueLinear, GroupWeight, LinearKernelSpec
from ..ir.struct_info import TensorStructInfo
from ..ops.quantize import quant_attrs
from ..te import topi
from ..te.call_te import call_te
from .patterns import (FLOATS, FusionMatcher, FusionPass, Match, kernel_name, linear_weight, stored_weight,
                       void_dtype)

__all__ = ["SelectKernels", "linear_kernel_call"]


def linear_kernel_call(bb: BlockBuilder, x: rx.Expr, tensors: list, weights: list, epilogue=EpilogueLinear(0),
                       out_dtype: str | None = None, name: str = "matmul") -> rx.Call:
    """``R.call_tir`` of a :func:`builder.te.topi.linear_kernel` PrimFunc with its
    :class:`LinearKernelSpec` attribute: ``x`` and ``tensors`` are graph values (the kernel's inputs
    ``(x, *tensors)``, which the weights' and the epilogue's indices count). Raises ValueError /
    TypeError as the topi ops do."""
    spec: list = []
    return call_te(bb, _linear_kernel, (x, *tensors),
                   {"weights": tuple(weights), "epilogue": epilogue, "out_dtype": out_dtype, "spec": spec}, name,
                   on_new=lambda func: func.attrs.__setitem__(KERNEL_ATTR, spec[0]))


def _linear_kernel(xt, *ts, weights, epilogue, out_dtype, spec):
    """:func:`topi.linear_kernel` with ``weights`` as a tuple (a :func:`call_te` memo key)."""
    del spec[:]   # the key saw an empty list; the spec of this build goes in
    return topi.linear_kernel(xt, *ts, weights=list(weights), epilogue=epilogue, out_dtype=out_dtype, spec=spec)


class SelectKernels(FusionPass):
    """Pass: see the module docstring. ``SelectKernels(max_fuse_depth=32)(mod)``."""

    name = "select_kernels"
    linear = True

    def emit(self, bb: BlockBuilder, m: Match) -> rx.Expr | None:
        """The linear-kernel call for a matched tree with at least one matmul leaf (``m.weights``): one
        PrimFunc of the matmuls and their elementwise epilogue with its
        :class:`~builder.ir.kernel.LinearKernelSpec`, named ``matmul`` or ``fused_matmul_<epilogue ops>``.
        None (the tree is left to FuseOps / LegalizeOps) without a matmul, or when building the kernel raises
        ValueError / TypeError (a tree the kernel cannot take)."""
        return self._fused(bb, m) if m.weights else None

    def rewrite_rest(self, bb: BlockBuilder, matcher: FusionMatcher, replaced: dict, consumed: set) -> None:
        """Rewrite, into ``replaced``, each binding no tree took: a lone ``R.matmul`` whose right operand is a
        weight (float, group-quantized or stored (in, out)), or of two activations, becomes a linear-kernel call
        (a group-quantized weight of a non-float ``x``, or one the kernel refuses, the ``dequantize_matmul`` /
        ``matmul`` loops instead); an ``R.take`` (axis 0, mode ``fast``) of a ``group_dequantize`` becomes
        ``dequantize_take`` (rows dequantized as they are gathered)."""
        for b in matcher.order:
            if b.var in replaced or b.var in consumed:
                continue
            call = matcher.call(b.var)
            if call is not None and call.op.name == "relax.matmul":
                new = self._matmul(bb, call, matcher.defs)
            elif call is not None and call.op.name == "relax.take":
                new = self._take(bb, call, matcher.defs)
            else:
                new = None
            if new is not None:
                replaced[b.var] = new

    @staticmethod
    def _fused(bb: BlockBuilder, m: Match) -> rx.Call | None:
        epi = [op for op in m.ops if op != "matmul"]
        try:
            return linear_kernel_call(bb, m.x, list(m.tensors), list(m.weights), epilogue=m.tree,
                                      out_dtype=m.out_dtype, name="matmul" if not epi else kernel_name(["matmul", *epi]))
        except (ValueError, TypeError):
            return None

    @staticmethod
    def _matmul(bb: BlockBuilder, call: rx.Call, defs: dict) -> rx.Expr | None:
        a, b = call.args
        asi = a.struct_info
        out_dtype = void_dtype(call.attrs.get("out_dtype"))
        tensors: list = []
        weight = linear_weight(defs, b, tensors)
        if weight is None:   # x @ W with W (in, out), two activations (q @ k.T, p @ v), else the loops
            weight = stored_weight(defs, a, b, tensors)
            try:
                return None if weight is None else linear_kernel_call(bb, a, tensors, [weight], out_dtype=out_dtype,
                                                                      name="matmul")
            except (ValueError, TypeError):
                return None
        if not isinstance(asi, TensorStructInfo) or asi.ndim < 1:
            return None
        if asi.dtype in FLOATS:
            try:
                if isinstance(weight, GroupWeight):
                    return _dequantize_matmul_kernel(bb, a, tensors, weight, out_dtype)
                return linear_kernel_call(bb, a, tensors, [weight], out_dtype=out_dtype, name="matmul")
            except (ValueError, TypeError):
                pass
        if isinstance(weight, GroupWeight):
            q, s = tensors[weight.q - 1], tensors[weight.scale - 1]
            return call_te(bb, topi.dequantize_linear, (a, q, s), {**weight.op_attrs, "out_dtype": out_dtype},
                           "dequantize_matmul")
        return call_te(bb, topi.linear, (a, tensors[weight.w - 1]), {"out_dtype": out_dtype}, "matmul")

    @staticmethod
    def _take(bb: BlockBuilder, call: rx.Call, defs: dict) -> rx.Expr | None:
        data, indices = call.args
        dq = defs.get(data) if isinstance(data, rx.Var) else None
        if (isinstance(dq, rx.Call) and isinstance(dq.op, rx.Op) and dq.op.name == "relax.group_dequantize"
                and call.attrs.get("axis", 0) in (0, -2) and call.attrs.get("mode", "fast") == "fast"):
            return call_te(bb, topi.dequantize_take, (dq.args[0], dq.args[1], indices), quant_attrs(dq),
                           "dequantize_take")
        return None


def _dequantize_matmul_kernel(bb: BlockBuilder, a: rx.Expr, tensors: list, weight: GroupWeight,
                              out_dtype: str | None) -> rx.Call:
    """The ``dequantize_linear`` loops of a quantized matmul (the weight's attributes as the graph has
    them, :attr:`GroupWeight.op_attrs`), marked with a :class:`LinearKernelSpec` so that they compile to
    the quantized GEMV / GEMM where the planner knows the format."""
    q, s = tensors[weight.q - 1], tensors[weight.scale - 1]
    call = call_te(bb, topi.dequantize_linear, (a, q, s), {**weight.op_attrs, "out_dtype": out_dtype},
                   "dequantize_matmul")
    func = bb.get()[call.args[0].name_hint]
    reductions = []
    tir.walk_stmt(func.body, lambda st: reductions.append(st.block.name)
                  if isinstance(st, tir.BlockRealize) and st.block.init is not None else None)
    if len(reductions) == 1:
        # the weight as matched, every attribute carried (its inputs renumbered: x, q, s)
        func.attrs[KERNEL_ATTR] = LinearKernelSpec(0, 3, (replace(weight, q=1, scale=2),), tuple(reductions))
    return call
