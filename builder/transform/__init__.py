"""Passes over IRModules: ``LegalizeOps`` (ops -> call_tir of PrimFuncs), dead-code
elimination and ``LiftTransformParams`` (weight preprocessing -> ``transform_params``)."""
from .fuse_ops import FuseOps
from .legalize import LegalizeOps, call_te, dead_code_elimination
from .lift_transform_params import LiftTransformParams

__all__ = ["FuseOps", "LegalizeOps", "LiftTransformParams", "call_te", "dead_code_elimination"]
