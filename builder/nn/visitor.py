"""``Mutator``: rewrite a module tree node by node (``tvm.relax.frontend.nn.visitor.Mutator``).

As in TVM, :meth:`Mutator.visit` is the traversal: it walks the children of ``node`` (the
attributes of a Module, the items of a ModuleList / ModuleDict), calls the ``visit_*`` method
that matches each child's type, and stores back what that call returns. The ``visit_*``
methods default to ``self.visit(name, node)`` (recurse, keep the node), so a subclass replaces
a layer by overriding ``visit_module`` and returning a new one, and keeps recursing by calling
``super().visit_module`` (or ``self.visit``). Start a rewrite with ``mutator.visit("", model)``.

Names are dotted paths from the root without a leading dot: ``"layers.0.mlp.gate_proj"``,
``"blocks.attn.weight"`` (TVM writes ``".0"`` for items of a top-level ModuleList).
"""
from __future__ import annotations

from typing import Any

from .core import Effect, Module, ModuleDict, ModuleList, Parameter

__all__ = ["Mutator"]


def _child(name: str, key) -> str:
    return f"{name}.{key}" if name else str(key)


class Mutator:
    """Base class for module-tree rewrites (quantization, dtype casts)."""

    def visit_module(self, name: str, node: Module) -> Any:
        """Visit a Module child; returns its replacement (default: recurse, keep ``node``)."""
        return self.visit(name, node)

    def visit_param(self, name: str, node: Parameter) -> Any:
        """Visit a Parameter child; returns its replacement (default: ``node``)."""
        return self.visit(name, node)

    def visit_effect(self, name: str, node: Effect) -> Any:
        """Visit an Effect child; returns its replacement (default: ``node``)."""
        return self.visit(name, node)

    def visit_modulelist(self, name: str, node: ModuleList) -> Any:
        """Visit a ModuleList child; returns its replacement (default: recurse into items)."""
        return self.visit(name, node)

    def visit_moduledict(self, name: str, node: ModuleDict) -> Any:
        """Visit a ModuleDict child; returns its replacement (default: recurse into values)."""
        return self.visit(name, node)

    def _dispatch(self, name: str, value: Any) -> Any:
        if isinstance(value, ModuleList):
            return self.visit_modulelist(name, value)
        if isinstance(value, ModuleDict):
            return self.visit_moduledict(name, value)
        if isinstance(value, Module):
            return self.visit_module(name, value)
        if isinstance(value, Effect):
            return self.visit_effect(name, value)
        if isinstance(value, Parameter):
            return self.visit_param(name, value)
        return value

    def visit(self, name: str, node: Any) -> Any:
        """Visit the children of ``node`` (named ``name.child``) and store back the results;
        returns ``node``. Parameters, Effects and other leaves have no children."""
        if isinstance(node, ModuleList):
            for i in range(len(node)):
                node[i] = self._dispatch(_child(name, i), node[i])
        elif isinstance(node, ModuleDict):
            for key in list(node.keys()):
                node[key] = self._dispatch(_child(name, key), node[key])
        elif isinstance(node, Module):
            for key, value in list(node.__dict__.items()):
                if isinstance(value, (Module, Parameter, Effect)):
                    setattr(node, key, self._dispatch(_child(name, key), value))
        return node
