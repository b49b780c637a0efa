"""The op library: one record per graph-level op (:func:`builder.ir.op.register_op`), by family.

A record holds the op's name, printed attributes, struct-info inference (``builder/ir/op/``), pattern
kind, legalization (a topi compute through ``call_te``), fusion compute, scalar intrinsic and frontend
name. Importing this package registers every op; ``builder`` imports it first. Adding an op is adding a
record here (see ``docs/ARCHITECTURE.md``).
"""
from . import elementwise, manipulation, nn, quantize, reduction, runtime, sorting  # noqa: F401 - registers the ops
from ..ir.relax import Op

__all__ = ["frontend_ops", "recipe_ops"]


def frontend_ops() -> dict[str, Op]:
    """``nn.op`` function name -> op, for every op with a frontend (what recipes may call)."""
    return {op.frontend: op for op in Op._registry.values() if op.frontend}


def recipe_ops() -> dict[str, Op]:
    """``nn.op`` function name -> op, for the ops a recipe's ``forward:`` may call (``in_recipes``)."""
    return {op.frontend: op for op in Op._registry.values() if op.in_recipes}
