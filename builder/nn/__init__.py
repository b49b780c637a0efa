"""The frontend, shaped like ``tvm.relax.frontend.nn``: ``Tensor``, ``Parameter``, ``Module``,
``ModuleList``, layers, ``op`` (functional ops), ``spec`` (export specs) and ``Mutator``.

    from builder import nn
    irmod, params = nn.ReLU().export_tvm(spec={"forward": {"x": nn.spec.Tensor((3, 3), "float32")}})
"""
from . import op, spec
from .core import (
    Effect, Module, ModuleDict, ModuleList, Object, Parameter, Tensor, get_default_dtype,
    set_default_dtype, wrap_nested,
)
from .modules import GELU, Conv1D, Embedding, IOEffect, LayerNorm, Linear, ReLU, RMSNorm, SiLU
from .op import *  # noqa: F401,F403  (TVM exposes the functional ops as nn.relu, nn.silu, ...)
from .visitor import Mutator
from . import modules

__all__ = [
    "op", "spec", "modules", "Effect", "Module", "ModuleDict", "ModuleList", "Object", "Parameter",
    "Tensor", "get_default_dtype", "set_default_dtype", "wrap_nested", "GELU", "Conv1D", "Embedding",
    "IOEffect", "LayerNorm", "Linear", "ReLU", "RMSNorm", "SiLU", "Mutator",
] + list(op.__all__)
