"""Quantize the weights an imported module holds as constants (``from_onnx`` / ``from_fx`` /
``from_exported_program`` bind a model's weights inside ``main``), so that an imported float model
runs on the quantized kernels as a recipe with ``quantization=`` does.

``quantize_constants(mod, "q4f16_1")`` rewrites every ``matmul(x, permute_dims(W))`` whose ``W`` is a 2-D
float constant ``(out_features, in_features)`` -- the form every importer gives ``nn.Linear`` / ``MatMul``
with a constant weight -- into ``matmul(x, permute_dims(group_dequantize(q_weight, q_scale)))`` with the
constants quantized by :func:`builder.quant.packing.quantize_weight` (the same numbers a recipe gets; row
tiles where the rows allow), which :class:`~builder.transform.SelectKernels` compiles to the fused
dequantizing kernels. Other constants (biases, norms, embeddings read by ``take``, convolution weights)
are kept. The scale dtype follows ``x``'s dtype (the spec's ``model_dtype`` is for recipes, whose
activations follow it; an imported float32 model keeps float32 activations), so ``q4f16_1`` on a float32
model stores float32 scales. The spec's ``exclude`` globs name recipe modules and do not apply here.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Union

import numpy as np

from schemas import QuantizationSpec

from ..ir import relax as rx
from ..ir.quant_format import QuantFormat
from ..ir.struct_info import TensorStructInfo
from .config import QuantLayout, is_quantizing, resolve
from .packing import quantize_weight

__all__ = ["quantize_constants"]

_FLOATS = ("float32", "float16", "bfloat16")


def quantize_constants(mod: rx.IRModule, quantization: Union[str, QuantizationSpec, QuantFormat]) -> rx.IRModule:
    """``mod`` with its constant Linear weights quantized as ``quantization`` says (a preset name such
    as ``"q4f16_1"`` / ``"q8f32_1"``, a spec, or a :class:`~builder.ir.quant_format.QuantFormat`; see the
    module docstring). Returns a new module (``mod`` is not changed); a spec that does not quantize
    (``"none"``, a dtype cast) returns ``mod``. Raises ValueError for an unknown preset, and what
    :func:`~builder.quant.packing.quantize_weight` raises for a weight it cannot quantize (non-finite
    values)."""
    spec = quantization if isinstance(quantization, QuantFormat) else resolve(quantization)
    if not isinstance(spec, QuantFormat) and not is_quantizing(spec):
        return mod
    out = rx.IRModule()
    for name, func in mod.functions.items():
        out[name] = _rewrite(func, spec) if isinstance(func, rx.Function) else func
    return out


def _rewrite(func: rx.Function, spec) -> rx.Function:
    consts: dict = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, rx.Constant):
                consts[b.var] = b.value
    transposes: dict = {}       # var of permute_dims(W, [1, 0]) -> W's constant
    changed = False
    blocks = []
    for block in func.body.blocks:
        bindings = []
        done: dict = {}         # (id of the constant, scale dtype) -> the var of its transposed dequantize
        new_var = rx.DataflowVar if block.is_dataflow else rx.Var
        for b in block.bindings:
            value = b.value
            if _is_op(value, "relax.permute_dims"):
                c = _const(value.args[0], consts)
                axes = value.attrs.get("axes")
                if c is not None and c.data.ndim == 2 and c.dtype in _FLOATS and (
                        axes is None or [int(a) % 2 for a in axes] == [1, 0]):
                    transposes[b.var] = c
            elif _is_op(value, "relax.matmul") and value.args[1] in transposes:
                x = value.args[0]
                xs = x.struct_info
                w = transposes[value.args[1]]
                if isinstance(xs, TensorStructInfo) and xs.dtype == w.dtype:
                    key = (id(w), xs.dtype)
                    if key not in done:
                        dq = _dequantize(w, spec, xs.dtype)
                        done[key] = None
                        if dq is not None:
                            var = new_var("dequantize", dq.struct_info)
                            bindings.append(rx.VarBinding(var, dq))
                            wt = rx.Call(rx.Op.get("permute_dims"), [var], {"axes": [1, 0]})
                            done[key] = new_var("permute_dims", wt.struct_info)
                            bindings.append(rx.VarBinding(done[key], wt))
                    if done[key] is not None:
                        value = rx.Call(value.op, [x, done[key]], value.attrs)
                        changed = True
            bindings.append(rx.VarBinding(b.var, value))
        blocks.append(type(block)(bindings))
    if not changed:
        return func
    from ..transform.dce import dead_code_elimination

    new = rx.Function(func.params, rx.SeqExpr(blocks, func.body.body), func.ret_struct_info, func.attrs,
                      func.is_pure, name=getattr(func, "name", None))
    mod = dead_code_elimination(rx.IRModule({"main": new}))
    return mod["main"]


def _is_op(value, name: str) -> bool:
    return isinstance(value, rx.Call) and isinstance(value.op, rx.Op) and value.op.name == name


def _const(e, consts: dict):
    return e if isinstance(e, rx.Constant) else consts.get(e)


def _dequantize(w: rx.Constant, spec, dtype: str) -> rx.Expr | None:
    """``group_dequantize`` of ``w`` quantized as ``spec`` with ``dtype`` scales, or None when the
    weight is too narrow for a group."""
    rows, cols = w.data.shape
    spec = replace(spec, scale_dtype=dtype) if isinstance(spec, QuantFormat) else spec.model_copy(
        update={"model_dtype": dtype})
    try:
        layout = QuantLayout.of(spec, cols, rows)
    except ValueError:
        return None     # fewer input features than a group: the float weight stays
    data = w.values() if w.dtype == "bfloat16" else w.data
    q, s = quantize_weight(np.asarray(data, np.float32), layout)
    attrs = dict(layout.op_attrs)
    return rx.Call(rx.Op.get("group_dequantize"), [rx.Constant(q), rx.Constant(s, dtype)], attrs)
