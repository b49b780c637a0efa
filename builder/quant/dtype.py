"""Plain dtype cast of every floating-point parameter (the recipe's top-level ``dtype:``)."""
from __future__ import annotations

from schemas import Recipe

from .. import nn
from ..ir.expr import is_float_dtype

__all__ = ["DTypeCast", "apply_transforms"]


class DTypeCast(nn.Mutator):
    """Cast every unbound floating-point Parameter to ``dtype`` (integer parameters are kept).

    Linear's bias keeps its dtype when the layer sets ``out_dtype`` (as ``nn.Linear.to`` does).
    """

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def visit_module(self, name: str, node: nn.Module) -> nn.Module:
        if isinstance(node, nn.Linear) and node.out_dtype is not None:
            node.weight = self.visit_param(f"{name}.weight" if name else "weight", node.weight)
            return node
        return super().visit_module(name, node)

    def visit_param(self, name: str, node: nn.Parameter) -> nn.Parameter:
        if is_float_dtype(node.dtype) and node.dtype != self.dtype:
            node.to(self.dtype)
        return node


def apply_transforms(module: nn.Module, recipe: Recipe) -> nn.Module:
    """Apply the transforms ``recipe`` declares (its ``dtype`` cast) and return the module."""
    if recipe.dtype is not None:
        module = DTypeCast(recipe.dtype).visit("", module)
    return module
