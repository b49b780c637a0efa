"""LegalizeOps: rewrite every graph-level op call into the loop-level code its op record says
(``op.legalize``, see ``builder/ops/``): usually ``R.call_tir`` of a PrimFunc built from a topi compute
(named after the op: ``matmul``, ``matmul1``, ...). Ops that move no data or that the VM runs itself
(``R.reshape``, ``R.null_value``, packed calls) stay as they are.

Matmuls and gathers that have a fast kernel were rewritten before, by
:class:`~builder.transform.SelectKernels`; what reaches this pass is legalized op by op.
"""
from __future__ import annotations

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from .dce import dead_code_elimination
from .pass_infra import FunctionPass

__all__ = ["LegalizeOps"]


class LegalizeOps(FunctionPass):
    """Pass: every op call -> its legalization; dead bindings removed. ``LegalizeOps()(mod)``.

    Raises ValueError naming the function and the op when an op has no legalization here (its
    record's ``legalize`` is None or raises, e.g. ``ccl_*``, which need a multi-worker runtime).
    """

    name = "legalize_ops"

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """The module with every op call legalized (:meth:`transform_function`) and the bindings left unused
        removed. Raises ValueError as the class docstring says."""
        return dead_code_elimination(super().transform_module(mod))

    def transform_function(self, bb: BlockBuilder, func: rx.Function, name: str) -> rx.Function:
        """``func`` with each binding's op call replaced by what its record's ``legalize(bb, call)`` returns
        (new PrimFuncs added through ``bb``); each variable is rebound with the new value's struct info.
        Raises ValueError naming ``name`` and the op when an op has no legalization."""
        vmap: dict[rx.Var, rx.Var] = {}
        blocks = []
        for block in func.body.blocks:
            new = type(block)()
            for b in block.bindings:
                value = rx.substitute_vars(b.value, vmap)
                if isinstance(value, rx.Call) and isinstance(value.op, rx.Op):
                    if value.op.legalize is None:
                        raise ValueError(f"{name}: operator {value.op.name} has no legalization to loop-level "
                                         "code on this runtime")
                    value = value.op.legalize(bb, value)
                var = type(b.var)(b.var.name_hint, value.struct_info)
                vmap[b.var] = var
                new.bindings.append(rx.VarBinding(var, value))
            blocks.append(new)
        body = rx.SeqExpr(blocks, rx.substitute_vars(func.body.body, vmap))
        return rx.Function(func.params, body, func.ret_struct_info, func.attrs, func.is_pure, name=name)
