"""Passes over IRModules, as named objects run by a :class:`Sequential` with instruments
(:mod:`.pass_infra`); the default pipeline is declared in :mod:`.pipeline`.

``EliminateCommonSubexpr`` (repeated pure op calls bound once), ``RewriteAttention`` (attention written out
as matmuls and a softmax -> one attention op), ``ConvToGemm`` (1-D / 2-D convolutions -> im2col + matmul), ``SelectKernels`` (matmuls and quantized gathers -> fast kernels), ``TileWeights`` (float weights read in row
tiles), ``FuseOps`` (elementwise chains ->
one kernel), ``LegalizeOps`` (ops -> call_tir of PrimFuncs), ``DeadCodeElimination`` and
``LiftTransformParams`` (weight preprocessing -> ``transform_params``).
"""
from .conv_gemm import ConvToGemm
from .cse import EliminateCommonSubexpr, eliminate_common_subexpr
from .dce import DeadCodeElimination, dead_code_elimination
from .fuse_ops import FuseOps
from .legalize import LegalizeOps
from .lift_transform_params import LiftTransformParams
from .pass_infra import (FunctionPass, Pass, PassContext, PassInstrument, PassTiming, PrintAfter, Sequential,
    VerifyAfter)
from .default_passes import PASS_NAMES, default_pipeline
from .rewrite_attention import RewriteAttention
from .select_kernels import SelectKernels
from .tile_weights import TileWeights

__all__ = ["EliminateCommonSubexpr", "eliminate_common_subexpr", "RewriteAttention", "ConvToGemm", "SelectKernels", "TileWeights", "FuseOps", "LegalizeOps", "DeadCodeElimination", "LiftTransformParams",
           "dead_code_elimination", "Pass", "FunctionPass", "Sequential", "PassContext", "PassInstrument",
           "VerifyAfter", "PassTiming", "PrintAfter", "default_pipeline", "PASS_NAMES"]
