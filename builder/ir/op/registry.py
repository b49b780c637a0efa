"""The operator registry: :func:`register_op` writes an op's one record (a :class:`builder.ir.relax.Op`),
:func:`registered_ops` lists them.

Every op of the graph-level IR is registered exactly once, in ``builder/ops/`` (the op library), with
everything the compiler knows about it: name, printed attributes, struct-info inference (the rules in
this package), pattern kind, legalization, fusion compute, scalar intrinsic and frontend name. The
printer, the parser, ``nn.op``, the recipe ``forward:`` language, LegalizeOps, FuseOps and the code
generator read these records; no other list of op names exists.
"""
from __future__ import annotations

import enum
from typing import Callable, Sequence

from ..relax import Op, load_op_library

__all__ = ["OpPattern", "register_op", "registered_ops"]


class OpPattern(enum.IntEnum):
    """How an op fuses with its neighbours (TVM's ``OpPatternKind``, same values).

    ``ELEMWISE``: each output element from the same element of each input (``exp``); ``BROADCAST``:
    elementwise after numpy broadcasting (``add``); ``INJECTIVE``: each output element from some input
    elements, by an index map (``permute_dims``, ``take``); ``COMM_REDUCE``: a commutative reduction
    (``sum``); ``OUT_ELEMWISE_FUSABLE``: an op whose output elementwise consumers can be fused into it
    (``matmul``, ``conv1d``); ``TUPLE``: builds a tuple; ``OPAQUE``: fuses with nothing.
    """

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


def register_op(name: str, infer: Callable, attrs: Sequence[str] = (), *, pattern: OpPattern = OpPattern.OPAQUE,
                pure: bool = True, legalize: Callable | None = None, compute: Callable | None = None,
                intrinsic: str | None = None, frontend: str | None = None, in_recipes: bool = False,
                int_args: Sequence[int] = (), doc: str = "") -> Op:
    """Register ``relax.<name>`` (``nn.silu`` -> ``relax.nn.silu``) with its record and return the op.

    ``infer(call) -> StructInfo`` raises ValueError / TypeError naming the op; ``attrs`` is the printed
    attribute order; ``legalize(bb, call) -> Expr`` lowers a call (None: the op has no loop-level code
    here; LegalizeOps says so); ``compute(*te_tensors)`` is the topi compute of an elementwise op, which
    fusion replays (also of ``permute_dims``, which kernel selection folds into a matmul's store);
    ``intrinsic`` names the scalar intrinsic of a math op (:mod:`builder.ir.tir.intrinsics`);
    ``frontend`` the name of its ``nn.op`` function; ``in_recipes`` whether a recipe's ``forward:`` may
    call that function (recipes are untrusted input: an op is offered there once its argument checks
    and bounds are known to hold for any arguments); ``int_args`` the positions of arguments that are
    printed as a plain int when they are a constant int64 ``R.prim_value`` and parsed back from one
    (TVM 0.27 prints ``R.triu(x, 1)``).
    Raises ValueError when ``name`` is registered already (one record per op).
    """
    full = "relax." + name
    if full in Op._registry:
        raise ValueError(f"operator {full} is registered already")
    op = Op(full)
    op.infer = infer
    op.attr_names = tuple(attrs)
    op.purity = pure
    op.pattern = OpPattern(pattern)
    op.legalize = legalize
    op.compute = compute
    op.intrinsic = intrinsic
    op.frontend = frontend
    if in_recipes and not frontend:
        raise ValueError(f"operator {full}: in_recipes needs a frontend name")
    op.in_recipes = in_recipes
    op.int_args = tuple(int_args)
    op.doc = doc
    Op._registry[full] = op
    return op


def registered_ops() -> list[Op]:
    """Every registered op, in registration order (the op library is loaded first:
    :func:`builder.ir.relax.load_op_library`)."""
    load_op_library()
    return list(Op._registry.values())
