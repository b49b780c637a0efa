"""``Mutator``: rewrite a module tree node by node (``tvm.relax.frontend.nn.visitor.Mutator``).

``visit(name, node)`` dispatches on the node's type to ``visit_module`` / ``visit_param`` /
``visit_effect`` / ``visit_modulelist`` / ``visit_moduledict``; the defaults recurse into
children and assign back what the visit returns, so a subclass replaces a layer by returning a
new one. ``name`` is the dotted path of the node (``"layers.0.mlp"``, no leading dot).
"""
from __future__ import annotations

from typing import Any

from .core import Effect, Module, ModuleDict, ModuleList, Parameter

__all__ = ["Mutator"]


def _child(name: str, key) -> str:
    return f"{name}.{key}" if name else str(key)


class Mutator:
    """Base class for module-tree rewrites (quantization, dtype casts)."""

    def visit(self, name: str, node: Any) -> Any:
        """Dispatch on ``node``'s type; returns the (possibly replaced) node."""
        if isinstance(node, ModuleList):
            return self.visit_modulelist(name, node)
        if isinstance(node, ModuleDict):
            return self.visit_moduledict(name, node)
        if isinstance(node, Module):
            return self.visit_module(name, node)
        if isinstance(node, Parameter):
            return self.visit_param(name, node)
        if isinstance(node, Effect):
            return self.visit_effect(name, node)
        return node

    def visit_module(self, name: str, node: Module) -> Module:
        """Visit every attribute of ``node`` and store back the results."""
        for key, value in list(node.__dict__.items()):
            if isinstance(value, (Module, Parameter, Effect)):
                setattr(node, key, self.visit(_child(name, key), value))
        return node

    def visit_modulelist(self, name: str, node: ModuleList) -> ModuleList:
        """Visit each element (named ``name.0``, ``name.1``, ...)."""
        for i, module in enumerate(node):
            node[i] = self.visit(_child(name, i), module)
        return node

    def visit_moduledict(self, name: str, node: ModuleDict) -> ModuleDict:
        """Visit each value (named ``name.key``)."""
        for key, module in list(node.items()):
            node[key] = self.visit(_child(name, key), module)
        return node

    def visit_param(self, name: str, node: Parameter) -> Parameter:
        """Parameters are kept by default."""
        return node

    def visit_effect(self, name: str, node: Effect) -> Effect:
        """Effects are kept by default."""
        return node
