"""TileWeights: a model's float Linear weights read by the matmul kernels in row tiles (issue 15;
TVM's weight layout rewrite, ``relax.transform.SplitLayoutRewritePreproc`` with the rewritten
weights computed once, as ``LiftTransformParams`` would).

After :class:`~builder.transform.SelectKernels`, every matmul kernel (a PrimFunc with a
:class:`~builder.ir.kernel.LinearKernelSpec`) whose float weights ``W`` (out, in) are all model
parameters of the calling function (its parameters after ``num_input``) with static shapes and
``out`` a multiple of 16 reads them in row tiles instead::

    w_tiled = R.call_tir(tile_rows, (w,), R.Tensor((out // 16, in, 16), dtype))   # once per weight
    y = R.call_tir(fused_matmul_add_tiled, (x, w_tiled, b), ...)

``w_tiled[t, k, r] = W[16 t + r, k]`` (:func:`core.layout.tile_rows`): a column of 16 rows is
one 64-byte load, so the kernel multiplies x with whole columns of a tile (a GEMM micro-kernel whose
panel is the tile; no horizontal sums, no per-call packing). The ``tile_rows`` PrimFunc carries
:data:`WEIGHT_TRANSFORM_ATTR`: the VM keeps its result while the same read-only weight array is
passed (:class:`runtime.vm.VirtualMachine`), so the copy is made once per weight, not per call;
the parameters, the checkpoint and the saved files keep the (out, in) layout. MiniLM's 384 -> 1536
matmul at 12 tokens: 101 -> 42 us, 1536 -> 384 85 -> 43 us (Intel Xeon, weights in cache).

A weight stored (in, out) (``DenseWeight.kn``, ``x @ W``: GPT-2's ``Conv1D``) gets the same tiles of
its transpose (:func:`tile_rows` with ``kn``), so it runs on the row-tiled GEMV as well.

Constant weights (imported models: ``from_onnx`` initializers, ``from_exported_program`` parameters bound
as named constants) are tiled at build time, in numpy (:func:`core.layout.tile_rows`): the kernel reads
the tiled constant. MiniLM-L6 imported from ONNX, batch 1 x 12: 3.38 -> 2.33 ms (the recipe: 2.25; Intel
Xeon, 2 threads, `bench_models.py`).

Left as they are: weights that are neither model parameters nor constants (a reshaped Conv1D weight, a
computed matrix), symbolic or non-multiple-of-16 ``out``, and kernels whose weights are not all tileable
(the kernel reads all its weights in one layout).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from core.layout import tile_rows as np_tile_rows

from ..ir import expr as E
from ..ir import relax as rx
from ..ir import tir
from ..ir.block_builder import BlockBuilder
from ..ir.kernel import KERNEL_ATTR, WEIGHT_TRANSFORM_ATTR, DenseWeight, LinearKernelSpec
from ..ir.op.quantize import ROW_TILE
from ..ir.struct_info import TensorStructInfo
from ..te import compute, create_prim_func, placeholder
from .pass_infra import Pass

__all__ = ["TileWeights", "WEIGHT_TRANSFORM_ATTR", "tile_rows"]

_FLOATS = ("float32", "float16", "bfloat16")


def tile_rows(w, row_tile: int = ROW_TILE, kn: bool = False):
    """te: ``w`` (out, in), any dtype -> the same values and dtype as (out / T, in, T), ``[t, k, r] =
    w[T t + r, k]`` (:func:`core.layout.tile_rows` in numpy). ``kn``: ``w`` is stored (in, out)
    (``DenseWeight.kn``, ``x @ w``) and the tiles are those of its transpose, ``[t, k, r] = w[k, T t +
    r]``, so the kernels read both alike. ``out`` must be a multiple of ``T`` (:class:`TileWeights`
    checks it; other rows would be dropped)."""
    n, k = w.shape[::-1] if kn else w.shape
    return compute((E.simplify(n // row_tile), k, row_tile),
                   (lambda t, c, r: w[c, t * row_tile + r]) if kn else (lambda t, c, r: w[t * row_tile + r, c]),
                   name="T_tile_rows")


def _static(d) -> int | None:
    d = E.simplify(d)
    return d.value if isinstance(d, E.IntImm) else None


def _tileable(e: rx.Expr, model: set, consts: dict, kn: bool = False) -> bool:
    """Whether ``e`` is a model parameter or a constant (inline or bound) 2-D float weight whose rows
    (its columns for ``kn``) fill whole tiles."""
    si = e.struct_info if isinstance(e, (rx.Var, rx.Constant)) else None
    if not ((e in model or isinstance(e, rx.Constant) or e in consts) and isinstance(si, TensorStructInfo)
            and si.ndim == 2 and si.dtype in _FLOATS):
        return False
    n, k = (_static(d) for d in si.shape)
    if kn:
        n, k = k, n
    return n is not None and k is not None and n > 0 and n % ROW_TILE == 0


class _Retile(tir.StmtExprMutator):
    """Loads of the weight buffers ``W[n, k]`` (``W[k, n]`` for those in ``kn``) -> ``W_tiled[n // T, k,
    n % T]``; their read regions the whole tiled buffer."""

    def __init__(self, buffers: dict, kn: set = frozenset()) -> None:
        self.buffers, self.kn = buffers, kn

    def visit_buffer_load(self, e: tir.BufferLoad):
        new = self.buffers.get(e.buffer)
        idx = [self.visit_expr(i) for i in e.indices]
        if new is None:
            return e if all(x is y for x, y in zip(idx, e.indices)) else tir.BufferLoad(e.buffer, idx)
        n, k = idx[::-1] if e.buffer in self.kn else idx
        return tir.BufferLoad(new, [E.FloorDiv(n, E.IntImm(ROW_TILE, n.dtype), n.dtype), k,
                                    E.FloorMod(n, E.IntImm(ROW_TILE, n.dtype), n.dtype)])

    def visit_block(self, s: tir.Block):
        reads = [tir.BufferRegion.full(self.buffers[r.buffer]) if r.buffer in self.buffers else r
                 for r in s.reads]
        return tir.Block(s.name, s.iter_vars, reads, s.writes, self.visit_stmt(s.body),
                         None if s.init is None else self.visit_stmt(s.init), s.alloc_buffers, s.annotations)


def _tiled_kernel(func: tir.PrimFunc, spec: LinearKernelSpec, idxs: list[int]) -> tir.PrimFunc:
    """``func`` reading its parameters ``idxs`` (float weights (out, in), or (in, out) where the spec
    says ``kn``) in row tiles."""
    buffers, kn = {}, set()
    kn_idx = {w.w for w in spec.weights if isinstance(w, DenseWeight) and w.kn}
    for i in idxs:
        old = func.params[i]
        n, k = (old.shape[1], old.shape[0]) if i in kn_idx else (old.shape[0], old.shape[1])
        buffers[old] = tir.Buffer(old.name, (E.simplify(n // ROW_TILE), k, ROW_TILE), old.dtype)
        if i in kn_idx:
            kn.add(old)
    body = _Retile(buffers, kn).visit_stmt(func.body)
    # the same weights (every field carried), the dense ones now in row tiles of the (out, in) layout
    weights = tuple(replace(w, row_tile=ROW_TILE, kn=0) if isinstance(w, DenseWeight) else w for w in spec.weights)
    params = [buffers.get(p, p) for p in func.params]
    attrs = {**func.attrs, KERNEL_ATTR: LinearKernelSpec(spec.x, spec.out, weights, spec.acc)}
    return tir.PrimFunc(params, body, attrs, func.name)


def _tile_call(bb: BlockBuilder, w: rx.Expr, kn: bool, kernels: dict) -> rx.Call:
    """``R.call_tir(tile_rows, (w,), R.Tensor((out // 16, in, 16), dtype))`` for the static 2-D weight ``w``:
    one ``tile_rows`` PrimFunc per dtype and layout, its shape symbolic (``(rows, cols)``, bound from the
    weight at run time), so that every weight of a model shares one weight-transform kernel (the 2-layer
    Llama recipe's four shapes compiled four loops kernels, 60-90 ms of LLVM each)."""
    sinfo = w.struct_info
    key = ("tile_rows", sinfo.dtype, kn)
    if key not in kernels:
        rows, cols = E.Var("rows", "int64"), E.Var("cols", "int64")
        weight = placeholder((rows, cols), sinfo.dtype, name="w")
        func = create_prim_func([weight, tile_rows(weight, ROW_TILE, kn)])
        func.attrs[WEIGHT_TRANSFORM_ATTR] = True
        kernels[key] = bb.add_func(func, "tile_rows")
    n, k = (_static(d) for d in (sinfo.shape[::-1] if kn else sinfo.shape))   # static: _tileable checked it
    out = TensorStructInfo([n // ROW_TILE, k, ROW_TILE], sinfo.dtype)
    return rx.Call(rx.Op.get("call_tir"), [kernels[key], rx.Tuple([w])], sinfo_args=[out])


class TileWeights(Pass):
    """Pass: see the module docstring. ``TileWeights()(mod) -> mod`` (a new IRModule)."""

    name = "tile_weights"

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """A new module in which each graph-level function's linear kernels whose float weights are all tileable
        read them in row tiles of 16 (module docstring): each such kernel is called as its ``<name>_tiled``
        twin, a model-parameter weight through a ``tile_rows`` weight transform bound once per block, a constant
        weight tiled in numpy. Loop-level functions are kept; the input module is not modified."""
        out = rx.IRModule(dict(mod.functions), mod.attrs)
        bb = BlockBuilder(out)
        kernels: dict[tuple, rx.GlobalVar] = {}
        for name, func in mod.functions.items():
            if isinstance(func, rx.Function):
                out[name] = self._function(bb, out, func, kernels)
        return out

    def _function(self, bb: BlockBuilder, mod: rx.IRModule, func: rx.Function, kernels: dict) -> rx.Function:
        model = set(func.params[func.num_input:])
        consts: dict = {}           # variables bound to constants (imported models' weights)
        blocks, changed = [], False
        for block in func.body.blocks:
            tiled: dict = {}        # (weight, kn) -> its tiled var, per block (a dataflow var is local to it)
            bindings = []
            for b in block.bindings:
                if isinstance(b.value, rx.Constant):
                    consts[b.var] = b.value
                new = self._binding(bb, mod, b.value, model, consts, tiled, bindings, block.is_dataflow, kernels)
                changed |= new is not b.value
                bindings.append(rx.VarBinding(b.var, new))
            blocks.append(type(block)(bindings))
        if not changed:
            return func
        return rx.Function(func.params, rx.SeqExpr(blocks, func.body.body), func.ret_struct_info, func.attrs,
                           func.is_pure, name=func.name)

    @staticmethod
    def _binding(bb, mod, value, model: set, consts: dict, tiled: dict, bindings: list, dataflow: bool,
                 kernels: dict):
        if not (isinstance(value, rx.Call) and isinstance(value.op, rx.Op) and value.op.name == "relax.call_tir"):
            return value
        gvar, args = value.args
        func = mod.functions.get(gvar.name_hint)
        spec = func.attrs.get(KERNEL_ATTR) if isinstance(func, tir.PrimFunc) else None
        if not isinstance(spec, LinearKernelSpec) or not isinstance(args, rx.Tuple):
            return value
        dense = [w.w for w in spec.weights if isinstance(w, DenseWeight) and not w.row_tile and not w.batched]
        kn = {w.w for w in spec.weights if isinstance(w, DenseWeight) and w.kn}
        if not dense or len(dense) != len(spec.weights) or not all(
                0 <= i < len(args.fields) and _tileable(args.fields[i], model, consts, i in kn) for i in dense):
            return value
        key = (gvar.name_hint, tuple(dense))
        if key not in kernels:
            kernels[key] = bb.add_func(_tiled_kernel(func, spec, dense), f"{gvar.name_hint}_tiled")
        fields = list(args.fields)
        for i in dense:
            w = fields[i]
            c = w if isinstance(w, rx.Constant) else consts.get(w)
            if c is not None and (w, i in kn) not in tiled:
                # a constant is tiled now, in numpy: the kernel reads the tiled constant, no transform runs
                data = c.data.T if i in kn else c.data
                tiled[(w, i in kn)] = rx.Constant(np_tile_rows(np.ascontiguousarray(data), ROW_TILE), c.dtype)
            elif (w, i in kn) not in tiled:
                call = _tile_call(bb, w, i in kn, kernels)
                var = (rx.DataflowVar if dataflow else rx.Var)(f"{w.name_hint}_tiled", call.struct_info)
                bindings.append(rx.VarBinding(var, call))
                tiled[(w, i in kn)] = var
            fields[i] = tiled[(w, i in kn)]
        return rx.Call(value.op, [kernels[key], rx.Tuple(fields)], value.attrs, value.sinfo_args, value.struct_info)
