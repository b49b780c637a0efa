"""The frontend, shaped like ``tvm.relax.frontend.nn``: ``Tensor``, ``Parameter``, ``Module``,
``ModuleList``, ``ModuleDict``, layers and effects, ``op`` (functional ops), ``spec`` (export
specs) and ``Mutator``.

    from builder import nn
    irmod, params = nn.ReLU().export_tvm(spec={"forward": {"x": nn.spec.Tensor((3, 3), "float32")}})

``Attention`` (``attention.py``: multi-head / grouped-query attention with rotary embeddings,
padding masks and the runtime KV cache) is the layer of Llama / BERT models; ``KVCacheLayer``
(``kv_cache.py``, recipe type ``KVCache``) is one slot of that cache for attention written out by hand.

``print_`` and ``debug_func`` live with the IO effect in ``modules`` and are also reachable as
``nn.op.print_`` / ``nn.op.debug_func``, where TVM puts them.
"""
from . import op, spec
from .attention import Attention
from .core import (
    Effect, Module, ModuleDict, ModuleList, Object, Parameter, Tensor, get_default_dtype,
    set_default_dtype, wrap_nested,
)
from .modules import (
    GELU, Conv1D, ConvTranspose1D, Embedding, GroupNorm, IOEffect, KVCache, LayerNorm, Linear, ReLU,
    RMSNorm, SiLU, debug_func, print_,
)
from .modules import Conv2D, ParameterLayer
from .kv_cache import CACHE_LAYERS, KVCacheLayer
from .op import *  # noqa: F401,F403  (TVM exposes the functional ops as nn.relu, nn.silu, ...)
from .visitor import Mutator
from . import modules, tensor_parallel

for _fn in (print_, debug_func):
    if not hasattr(op, _fn.__name__):
        setattr(op, _fn.__name__, _fn)

__all__ = [
    "op", "spec", "modules", "tensor_parallel", "Attention", "Effect", "Module", "ModuleDict", "ModuleList", "Object", "Parameter",
    "Tensor", "get_default_dtype", "set_default_dtype", "wrap_nested", "GELU", "Conv1D",
    "ConvTranspose1D", "Embedding", "GroupNorm", "IOEffect", "KVCache", "LayerNorm", "Linear", "ReLU", "RMSNorm",
    "SiLU", "Mutator", "print_", "debug_func", "Conv2D", "ParameterLayer", "KVCacheLayer", "CACHE_LAYERS",
] + [n for n in op.__all__ if n not in ("print_", "debug_func")]
