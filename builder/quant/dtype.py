"""Plain dtype cast of every floating-point parameter (the recipe's top-level ``dtype:``, or the
``model_dtype`` of its quantization), and :func:`apply_transforms`, which runs the transforms a
recipe declares."""
from __future__ import annotations

from schemas import Recipe

from .. import nn
from ..ir.expr import is_float_dtype
from .config import is_quantizing, resolve
from .mapping import QuantizeMapping

__all__ = ["DTypeCast", "apply_transforms", "model_dtype"]


class DTypeCast(nn.Mutator):
    """Cast every unbound floating-point Parameter to ``dtype`` (integer parameters are kept).

    Linear's bias keeps its dtype when the layer sets ``out_dtype`` (as ``nn.Linear.to`` does).
    With a ``mapping``, each cast parameter is recorded there (name -> itself, converted), so
    that a checkpoint in the original dtype is converted when it is loaded.
    """

    def __init__(self, dtype: str, mapping: QuantizeMapping | None = None) -> None:
        self.dtype = dtype
        self.mapping = mapping

    def visit_module(self, name: str, node: nn.Module) -> nn.Module:
        """Recurse; a Linear with ``out_dtype`` has only its weight cast."""
        if isinstance(node, nn.Linear) and node.out_dtype is not None:
            node.weight = self.visit_param(f"{name}.weight" if name else "weight", node.weight)
            return node
        return super().visit_module(name, node)

    def visit_param(self, name: str, node: nn.Parameter) -> nn.Parameter:
        """Cast a floating-point parameter (recording the cast in the mapping)."""
        if is_float_dtype(node.dtype) and node.dtype != self.dtype:
            if self.mapping is not None:
                self.mapping.add_cast(name, tuple(node.shape), node.dtype, self.dtype)
            node.to(self.dtype)
        return node


def model_dtype(recipe: Recipe) -> str | None:
    """The dtype that parameters are cast to: the quantization's ``model_dtype`` when it has one, else
    the recipe's ``dtype`` (None: no cast). Floating-point function inputs are cast to a quantization's
    ``model_dtype`` (:func:`builder.build_model.export_recipe`); with the recipe's ``dtype`` alone they keep the
    dtype their spec declares (a recipe declares them ``${dtype}`` to follow it, as the shipped ones do)."""
    spec = resolve(recipe.quantization)
    return spec.model_dtype if spec.model_dtype is not None else recipe.dtype


def apply_transforms(module: nn.Module, recipe: Recipe, mapping: QuantizeMapping | None = None) -> nn.Module:
    """Apply the transforms ``recipe`` declares and return the module: the dtype cast to
    :func:`model_dtype`, then, for a quantizing spec, the quantization Mutator of its kind.

    ``mapping`` (optional) receives the untransformed parameter list and every parameter
    mapping (see :class:`QuantizeMapping`). Raises ValueError naming a layer that cannot be
    quantized (symbolic in_features).
    """
    from .quantize import quantize_mutator

    spec = resolve(recipe.quantization)
    if mapping is not None:
        mapping.float_specs = [(name, tuple(p.shape), p.dtype) for name, p in module.named_parameters()]
    dtype = model_dtype(recipe)
    if dtype is not None:
        module = DTypeCast(dtype, mapping).visit("", module)
    if is_quantizing(spec):
        module = quantize_mutator(spec, mapping).visit("", module)
    return module
