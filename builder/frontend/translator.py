"""The translation state of one torch graph (:class:`GraphTranslator`) and the checks of what a translation returns.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import expr as E
from ..ir.arith import divide_exact
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import resolve_reshape
from ..ir.struct_info import TensorStructInfo, TupleStructInfo
from ..nn import op
from ..nn.core import Tensor, wrap_nested
from .complex import ComplexTensor
from .errors import describe_node, FrontendError, UnsupportedNodeError
from .torch_ops.indexing import scatter_view
from .torch_ops.operands import fmt, is_tensor, static, Unavailable
from .weights import WeightTable


def is_node(v) -> bool:
    """A torch.fx Node (checked by class name: torch is not imported here)."""
    return type(v).__name__ == "Node" and hasattr(v, "op") and hasattr(v, "target")


def inplace_base(name: str) -> str | None:
    """``"add"`` for the in-place ``"add_"`` (PyTorch's naming), None for other names (dunders too)."""
    if len(name) > 1 and name.endswith("_") and not name.endswith("__") and not name.startswith("_"):
        return name[:-1]
    return None


class GraphTranslator:
    """Translation state of one graph: the BlockBuilder, the values of the nodes done so far
    (``env``), the weights bound as named constants, the symbolic dims by name and the permutations
    emitted (so that ``permute(permute(x))`` folds)."""

    def __init__(self) -> None:
        self.bb = BlockBuilder()
        self.env: dict = {}
        self.node = None
        self.weights = WeightTable(self.bb)   # bound as named constants on first use
        self._dims: dict[str, E.Var] = {}
        self._perm: dict = {}     # permute result Var -> (source Tensor, axes)
        self._bias: dict = {}     # (bool mask Var, dtype) -> its additive float form
        self._aliases: dict = {}  # node -> the set of nodes that are the same tensor (in-place ops)
        self._views: dict = {}    # node -> (the node it views, ("slice" | "select", ...))
        self.trace_hint = ""       # how to get source lines into error messages

    # -- symbolic dims and weights ----------------------------------------------------------------
    def dim(self, name: str) -> E.Var:
        """The int64 symbolic dim ``name`` (one variable per name in the graph). Raises FrontendError for a name that
        is not an identifier."""
        if name not in self._dims:
            if not name.isidentifier():
                raise FrontendError(f"a symbolic dim name must be an identifier, got {name!r}")
            self._dims[name] = E.Var(name, "int64")
        return self._dims[name]

    def add_weight(self, name: str, get: Callable[[], Any]) -> None:
        """Declare a weight (``get()`` returns its torch tensor); it is bound on first use
        (:meth:`WeightTable.declare`)."""
        self.weights.declare(name, get)

    def weight(self, name: str, value=None) -> Tensor:
        """The weight ``name`` (a PyTorch dotted name) as a constant bound once in ``main`` under the
        name with ``.`` -> ``_``; ``value`` is its torch tensor (else the one declared with
        :meth:`add_weight`). Raises FrontendError for an unknown name (:meth:`WeightTable.bind`)."""
        return self.weights.bind(name, value)

    # -- running nodes ----------------------------------------------------------------------------
    def value(self, a):
        """An fx argument translated: nodes by their values, lists / tuples / dicts / slices element-wise, anything
        else as it is. Raises FrontendError for a node not yet translated, UnsupportedNodeError for an output its
        producer does not compute."""
        if is_node(a):
            if a not in self.env:
                raise FrontendError(f"node '{a.name}' is used before it is defined")
            v = self.env[a]
            if isinstance(v, Unavailable):   # (an unused one, a dead getitem of it, is no error)
                raise UnsupportedNodeError(f"the {v.what} output is not computed")
            return v
        if isinstance(a, (list, tuple)):
            vals = [self.value(v) for v in a]
            return tuple(vals) if isinstance(a, tuple) and type(a) is tuple else vals
        if isinstance(a, dict):
            return {k: self.value(v) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(self.value(a.start), self.value(a.stop), self.value(a.step))
        return a

    def apply(self, node, fn: Callable, what: str | None = None, extra: tuple = ()):
        """Run the translation ``fn(self, *extra, *args, **kwargs)`` of ``node``; every failure becomes a
        FrontendError (UnsupportedNodeError when something has no translation) naming the node, its
        op / target and its source line."""
        self.node = node
        desc = describe_node(node, what, self.trace_hint)
        try:
            args = self.value(node.args)
            kwargs = self.value(dict(node.kwargs))
            return check_result(fn(self, *extra, *args, **kwargs), desc)
        except UnsupportedNodeError as e:
            raise UnsupportedNodeError(f"{desc}: {e}") from e
        except FrontendError as e:
            raise FrontendError(f"{desc}: {e}") from e
        except Exception as e:
            raise FrontendError(f"{desc}: {type(e).__name__}: {e}") from e

    def record_view(self, node, view: tuple) -> None:
        """``node`` is a view of its first argument (``("slice", dim, start, end, step)`` or
        ``("select", dim, index)``): an in-place op on it writes through to that tensor."""
        base = node.args[0] if node.args else None
        if is_node(base):
            self._views[node] = (base, view)

    def rebind_inplace(self, node, value) -> None:
        """After an in-place op (``add_``, ``x += y`` as ``aten.add_``, ``x[:, 0] = v``), later uses of
        its first argument see the result: every node that is that tensor (the argument, earlier
        in-place results on it: ``z.mul_(x).add_(1)`` mutates ``z`` twice) is bound to ``value``, the
        op's own node joins them, and when the argument is a view (:meth:`record_view`) the tensor it
        views is rebound to itself with the region replaced (:func:`scatter_view`), up the chain."""
        first = node.args[0] if node.args else None
        if is_node(first) and isinstance(value, Tensor):
            self._assign(first, value, node)

    def _assign(self, target, value, extra=None) -> None:
        group = self._aliases.setdefault(target, {target})
        if extra is not None:
            group.add(extra)
            self._aliases[extra] = group
        for n in group:
            self.env[n] = value
        for n in list(group):
            if n in self._views:
                base, view = self._views[n]
                self._assign(base, scatter_view(self, self.env[base], view, value))
                break

    def unsupported(self, node, what: str | None = None, hint: str = "") -> UnsupportedNodeError:
        """The UnsupportedNodeError for ``node`` (described as :func:`~builder.frontend.errors.describe_node` does,
        ``what`` naming its target), with ``hint`` in parentheses; returned, for the caller to raise."""
        return UnsupportedNodeError(f"{describe_node(node, what, self.trace_hint)} has no translation" + (f" ({hint})" if hint else ""))

    def output_expr(self, out) -> rx.Expr:
        """The graph's result (a Tensor or a nested tuple / list of them) as one expression for ``emit_output``. Raises
        FrontendError for anything else (a size, a number)."""
        if is_tensor(out):
            return out._expr
        if isinstance(out, (tuple, list)):
            return rx.Tuple([self.output_expr(f) for f in out])
        raise FrontendError(f"the graph returns {type(out).__name__} {out!r}; only tensors (and tuples of "
                            "them) can be returned")

    # -- graph values -----------------------------------------------------------------------------
    def permute(self, x: Tensor, axes: Sequence[int]) -> Tensor:
        """``permute_dims(x, axes)``, composed with a permutation that produced ``x`` (identity: the
        source itself), so that the (B, S, H, D) <-> (B, H, S, D) round trips of attention vanish."""
        axes = [int(a) % x.ndim for a in axes] if x.ndim else []
        if axes == list(range(x.ndim)):
            return x
        src = self._perm.get(x._expr)
        if src is not None:
            base, first = src
            composed = [first[a] for a in axes]
            if composed == list(range(base.ndim)):
                return base
            x, axes = base, composed
        out = op.permute_dims(x, list(axes))
        self._perm[out._expr] = (x, list(axes))
        return out

    def reshape(self, x: Tensor, shape: Sequence) -> Tensor:
        """``reshape(x, shape)`` with one ``-1`` inferred (also where symbolic dims cancel, ``(b, s, 384) -> (b, s, -1,
        32)``); ``x`` itself when the shape does not change. Raises FrontendError when the element counts differ."""
        shape = [int(d) if isinstance(d, (np.integer,)) else d for d in shape]
        shape = _infer_minus_one(list(x.shape), shape)
        try:
            dims = resolve_reshape(tuple(x.shape), list(shape))
        except (ValueError, TypeError) as e:
            raise FrontendError(f"reshape {fmt(x.shape)} -> {fmt(shape)}: {e}") from None
        if len(dims) == x.ndim and all(E.prove_equal(a, b) for a, b in zip(dims, x.shape)):
            return x
        return op.reshape(x, dims)


def _infer_minus_one(src: list, shape: list) -> list:
    """``shape`` with its ``-1`` computed when symbolic dims cancel (``(b, s, 384) -> (b, s, -1, 32)``:
    12); unchanged when it cannot be (the reshape rule then says why)."""
    at = [i for i, d in enumerate(shape) if static(d) == -1]
    if len(at) != 1:
        return shape
    rest = list(src)
    known = 1
    for i, d in enumerate(shape):
        if i == at[0]:
            continue
        if static(d) is not None:
            known *= static(d)
            continue
        for j, r in enumerate(rest):
            if E.prove_equal(r, d):
                del rest[j]
                break
        else:
            return shape
    total: Any = 1
    for r in rest:
        total = total * r
    if static(total) is not None:
        if known == 0 or static(total) % known:
            return shape
        value = static(total) // known
    else:
        value = divide_exact(total, known)
        if value is None:
            return shape
    out = list(shape)
    out[at[0]] = value
    return out


def check_result(value, node_desc: str):
    """The value a translation returned, checked: Tensors, sizes, numbers, or (nested) tuples /
    lists of them."""
    if isinstance(value, (Tensor, int, float, bool, E.PrimExpr, Unavailable)) or value is None:
        return value
    if isinstance(value, ComplexTensor):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(check_result(v, node_desc) for v in value)
    if isinstance(value, rx.Expr):
        sinfo = value.struct_info
        if isinstance(sinfo, (TensorStructInfo, TupleStructInfo)):
            return wrap_nested(value, "lv") if not isinstance(value, rx.Var) or isinstance(
                sinfo, TupleStructInfo) else Tensor(_expr=value)
    raise FrontendError(f"{node_desc}: the translation returned {type(value).__name__}, not a tensor value")
