"""The default compilation pipeline, declared in one place and read top to bottom.

Graph level, on the exported IRModule (``builder.compile`` runs it, then generates code for the
PrimFuncs it produced):

0. ``eliminate_common_subexpr`` (:class:`EliminateCommonSubexpr`): a pure op call repeated on the
   same arguments is bound once (the rotary tables every layer of a Llama recomputes);
1. ``rewrite_attention`` (:class:`RewriteAttention`): attention written out (``softmax(q @ k.T * c + mask) @ v``:
   imported models, ONNX exports) becomes one attention op, whose kernel never stores the scores; a transpose of
   a transpose is composed into one;
2. ``conv_to_gemm`` (:class:`ConvToGemm`): Conv1D / Conv2D / ConvTranspose1D with groups 1 become an im2col
   copy (col2im overlap-add) around a matmul, which the next pass gives to the GEMM kernels;
3. ``select_kernels`` (:class:`SelectKernels`): every matmul with its elementwise epilogue, and every
   quantized gather, becomes its fast kernel (GEMV / GEMM, fused dequantization);
4. ``tile_weights`` (:class:`TileWeights`): the matmul kernels read a model's float weights in row
   tiles, made once by a weight transform the VM keeps (constant weights of imported models: at build
   time) (:mod:`builder.transform.tile_weights`);
5. ``fuse_ops`` (:class:`FuseOps`): remaining elementwise chains become one kernel each;
6. ``legalize_ops`` (:class:`LegalizeOps`): every other op becomes the loop-level code of its record;
7. ``dead_code_elimination``: unused bindings and PrimFuncs go.

``LiftTransformParams`` is not in it: weights are transformed when they are loaded (the recipe's
quantization mapping), and the row tiles of ``tile_weights`` by the VM on first use (kept while the
same read-only arrays are passed), so the compiled functions take the model's parameters. There is no memory planning pass:
the VM takes each large output from its buffer pool and frees the buffer for reuse once no register
or array views it (``runtime.memory.BufferPool``; the plan drops registers after their last use).
"""
from __future__ import annotations

from .conv_gemm import ConvToGemm
from .cse import EliminateCommonSubexpr
from .dce import DeadCodeElimination
from .fuse_ops import FuseOps
from .legalize import LegalizeOps
from .pass_infra import Sequential
from .rewrite_attention import RewriteAttention
from .select_kernels import SelectKernels
from .tile_weights import TileWeights

__all__ = ["default_pipeline", "PASS_NAMES"]


def default_pipeline() -> Sequential:
    """The passes ``builder.compile`` runs, in order (see the module docstring)."""
    return Sequential([EliminateCommonSubexpr(), RewriteAttention(), ConvToGemm(), SelectKernels(), TileWeights(), FuseOps(), LegalizeOps(), DeadCodeElimination()], name="default_pipeline")


PASS_NAMES = tuple(default_pipeline().names)
"""The names of the default pipeline's passes (what ``build --print-after`` accepts)."""
