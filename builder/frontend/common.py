"""What the PyTorch importers share: errors with the node's source line, dtype mapping, weights bound
as named constants, symbolic dims, and the translations of torch semantics (``torch.add``,
``aten.add.Tensor``, ``Tensor.add`` all mean the same) to our high-level ops (``builder.nn.op`` on
``nn.Tensor`` wrappers, so matmuls keep the ``matmul(x, permute_dims(W))`` form that kernel selection
turns into the linear kernels, and elementwise chains fuse).

A translation is ``fn(t, *args, **kwargs)``: ``t`` the :class:`GraphTranslator` (BlockBuilder, the
current node, weights), the node's arguments already translated: graph values are ``nn.Tensor``,
sizes ``int`` or int64 ``PrimExpr`` (symbolic dims), lists / tuples element-wise, everything else
(numbers, dtypes, strings, None) as torch gave it. It returns an ``nn.Tensor``, a tuple of them, or a
size. torch is never imported here: dtypes are read by name (``torch.float32`` -> ``"float32"``).
"""
from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op import broadcast_shapes, exact_scaled_size
from ..ir.struct_info import DTYPES, TensorStructInfo, TupleStructInfo
from ..nn import op
from ..nn.core import Tensor

__all__ = [
    "TORCH_OPS",
    "FrontendError",
    "GraphTranslator",
    "UnsupportedNodeError",
    "node_location",
    "to_numpy",
    "torch_dtype",
]


class FrontendError(ValueError):
    """A node could not be translated (bad arguments, shapes the op rejects, an input missing)."""


class UnsupportedNodeError(FrontendError, NotImplementedError):
    """A node whose op / target / module has no translation (a NotImplementedError too)."""


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def node_location(node) -> str:
    """Where a torch.fx node comes from: the last frame outside torch of its stack trace
    (``node.stack_trace`` or ``node.meta["stack_trace"]``) as ``file:line in fn: code``, or "" when fx
    recorded none."""
    trace = getattr(node, "stack_trace", None) or getattr(node, "meta", {}).get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    own = [f for f in frames if not re.search(r"[/\\]torch[/\\]|<eval_with_key>", f[0])]
    frames = own or frames       # the model's frames, not torch's tracing machinery
    if not frames:
        return ""
    path, line, fn, code = frames[-1]
    return f"{path}:{line} in {fn}: {code.strip()}"


FX_TRACE_HINT = ("pass the nn.Module itself, or trace with torch.fx.Tracer(record_stack_traces=True)")


def describe_node(node, what: str | None = None, hint: str = "") -> str:
    """``node 'name' (call_function aten.add.Tensor) at file:line in fn: code``; without a recorded
    source line, ``(no source line recorded[: hint])``."""
    target = what if what is not None else _target_name(node.target)
    loc = node_location(node)
    return f"node '{node.name}' ({node.op} {target})" + (
        f" at {loc}" if loc else " (no source line recorded" + (f": {hint})" if hint else ")"))


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    mod = getattr(target, "__module__", None)
    if name and mod and not str(target).startswith("aten."):
        return f"{mod}.{name}"
    return str(target)


_TORCH_DTYPES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
                 "short": "int16", "uint8": "uint8", "bool": "bool", "bfloat16": "bfloat16"}


def torch_dtype(dtype) -> str:
    """Our dtype name for a ``torch.dtype`` (or a dtype string): ``torch.float32`` -> ``"float32"``.
    Raises FrontendError for a dtype we do not have (complex, float8, ...)."""
    name = str(dtype).removeprefix("torch.")
    name = _TORCH_DTYPES.get(name, name)
    if name not in DTYPES:
        raise FrontendError(f"dtype {dtype} has no equivalent here (supported: {', '.join(DTYPES)})")
    return name


def to_numpy(value) -> tuple[np.ndarray, str]:
    """A torch tensor's data as a numpy array and our dtype name (bfloat16 is given as float32
    values, which :class:`builder.ir.relax.Constant` rounds back to bfloat16 bits)."""
    value = value.detach().cpu()
    dtype = torch_dtype(value.dtype)
    if dtype == "bfloat16":
        return value.float().numpy(), dtype
    return value.contiguous().numpy(), dtype


def _identifier(name: str) -> str:
    out = re.sub(r"\W", "_", name)
    return out if out and not out[0].isdigit() else "w_" + out


def is_node(v) -> bool:
    """A torch.fx Node (checked by class name: torch is not imported here)."""
    return type(v).__name__ == "Node" and hasattr(v, "op") and hasattr(v, "target")


def inplace_base(name: str) -> str | None:
    """``"add"`` for the in-place ``"add_"`` (PyTorch's naming), None for other names (dunders too)."""
    if len(name) > 1 and name.endswith("_") and not name.endswith("__") and not name.startswith("_"):
        return name[:-1]
    return None


def gather(t, x, dim, index, *, sparse_grad=False):
    """``torch.gather`` (:func:`builder.nn.op.gather_elements`)."""
    return op.gather_elements(x, index, axis=norm_dim(dim, x.ndim))


_TORCH_SCATTER = {None: "update", "add": "add", "multiply": "mul", "sum": "add", "prod": "mul", "amax": "max",
                  "amin": "min"}


def scatter(t, x, dim, index, src=None, value=None, *, reduce=None, include_self=True):
    """``Tensor.scatter`` (a ``src`` tensor or a scalar ``value``; ``reduce`` "add" / "multiply"),
    ``scatter_add`` and ``scatter_reduce`` ("sum", "prod", "amax", "amin"; ``include_self=True``):
    :func:`builder.nn.op.scatter_elements` (duplicates apply in index order). A scalar becomes updates of
    the index's shape. Raises UnsupportedNodeError for "mean" or ``include_self=False``."""
    if not include_self:
        raise UnsupportedNodeError("scatter_reduce with include_self=False")
    if reduce not in _TORCH_SCATTER:
        raise UnsupportedNodeError(f"scatter reduce={reduce!r}")
    upd = src if src is not None else value
    if not is_tensor(upd):
        upd = op.broadcast_to(to_tensor(upd, x.dtype), list(index.shape))
    return op.scatter_elements(x, index, as_dtype(upd, x.dtype), axis=norm_dim(dim, x.ndim),
                               reduction=_TORCH_SCATTER[reduce])


def weight_norm(t, v, g, dim=0):
    """``torch._weight_norm`` (Salimans & Kingma 2016; ``nn.utils.weight_norm``): ``v * g / ||v||`` with the
    norm over every dim but ``dim`` (all of them for ``dim=-1``), ``g`` shaped to broadcast."""
    if dim is None or int(dim) == -1:
        axes = list(range(v.ndim))
    else:
        d = norm_dim(dim, v.ndim)
        axes = [a for a in range(v.ndim) if a != d]
    norm = op.sqrt(op.sum(op.multiply(v, v), axis=axes, keepdims=True))
    return op.multiply(v, op.divide(g, norm))


def einsum(t, equation, *operands):
    """``torch.einsum(equation, *operands)`` (or a list of operands): :func:`builder.nn.op.einsum`."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return op.einsum(equation, list(operands))


# -- compositions of the op records (torch semantics); no record of their own --------------------------
_LN2 = math.log(2.0)


def flip(t, x, dims):
    return op.flip(x, [norm_dim(d, x.ndim) for d in (dims if isinstance(dims, (list, tuple)) else [dims])])


def roll(t, x, shifts, dims=None):
    """``torch.roll``: elements shifted along ``dims`` (static shifts; the flattened tensor without dims)."""
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        flat = op.reshape(x, [-1])
        return op.reshape(roll(t, flat, shifts[0], 0), list(x.shape))
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    for s_, d in zip(shifts, dims):
        d = norm_dim(d, x.ndim)
        size, s_ = static(x.shape[d]), static(s_)
        if s_ is None:
            raise UnsupportedNodeError("roll by a symbolic shift")
        if size is not None:
            s_ %= size
            if s_ == 0:
                continue
            x = op.concat([slice_(t, x, d, size - s_, None), slice_(t, x, d, 0, size - s_)], dim=d)
        elif s_ != 0:       # a symbolic size: the last s (first -s) elements first, negative bounds from the end
            x = op.concat([slice_(t, x, d, -s_, None), slice_(t, x, d, 0, -s_)], dim=d)
    return x


def logsumexp(t, x, dim, keepdim=False):
    return op.logsumexp(x, _axes(x, dim), bool(keepdim))


def vector_norm(t, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """``torch.linalg.vector_norm`` (``ord`` 2, 1, inf, -inf, 0 or any other number)."""
    axes = _axes(x, dim)
    a = op.abs(x)
    o = float(ord)
    if o == 2:
        return op.sqrt(op.sum(op.multiply(x, x), axis=axes, keepdims=bool(keepdim)))
    if o == 1:
        return op.sum(a, axis=axes, keepdims=bool(keepdim))
    if math.isinf(o):
        return (op.max if o > 0 else op.min)(a, axis=axes, keepdims=bool(keepdim))
    if o == 0:
        return op.sum(as_dtype(op.not_equal(x, 0.0), x.dtype), axis=axes, keepdims=bool(keepdim))
    return op.power(op.sum(op.power(a, o), axis=axes, keepdims=bool(keepdim)), 1.0 / o)


def outer(t, a, b):
    return binary("multiply", op.unsqueeze(a, 1), op.unsqueeze(b, 0))


def addcmul(t, x, t1, t2, *, value=1):
    return binary("add", x, binary("multiply", binary("multiply", t1, t2), value))


def addcdiv(t, x, t1, t2, *, value=1):
    return binary("add", x, binary("multiply", binary("divide", t1, t2), value))


def lerp(t, start, end, weight):
    """``torch.lerp``: ``start + weight * (end - start)``."""
    return binary("add", start, binary("multiply", binary("subtract", end, start), weight))


def square(t, x):
    return binary("multiply", x, x)


def reciprocal(t, x):
    return binary("divide", 1.0, x if is_float(x.dtype) else as_dtype(x, "float32"))


def log1p(t, x):
    """``log(1 + x)`` (not a dedicated log1p: for |x| < 1e-7 the result is x's float32 rounding of 1 + x)."""
    return op.log(binary("add", x, 1.0))


def expm1(t, x):
    """``exp(x) - 1`` (not a dedicated expm1: absolute error about 1e-7 near 0)."""
    return binary("subtract", op.exp(x), 1.0)


def log2(t, x):
    return binary("divide", op.log(x), _LN2)


def exp2(t, x):
    return op.exp(binary("multiply", x, _LN2))


def sinh(t, x):
    return binary("multiply", binary("subtract", op.exp(x), op.exp(op.negative(x))), 0.5)


def cosh(t, x):
    return binary("multiply", binary("add", op.exp(x), op.exp(op.negative(x))), 0.5)


def asinh(t, x):
    """``asinh(x) = sign(x) * log(|x| + sqrt(x**2 + 1))`` (odd, so the log's argument stays >= 1)."""
    ax = op.abs(x)
    return op.multiply(op.sign(x), op.log(binary("add", ax, op.sqrt(binary("add", op.multiply(ax, ax), 1.0)))))


def acosh(t, x):
    """``acosh(x) = log(x + sqrt(x**2 - 1))``, NaN below 1."""
    return op.log(binary("add", x, op.sqrt(binary("subtract", op.multiply(x, x), 1.0))))


def atanh(t, x):
    """``atanh(x) = 0.5 * log((1 + x) / (1 - x))``, +-inf at +-1, NaN beyond."""
    return binary("multiply", op.log(binary("divide", binary("add", x, 1.0), binary("subtract", 1.0, x))), 0.5)


def atan2(t, y, x):
    """``torch.atan2`` / ``numpy.arctan2``: the angle of (x, y) in ``[-pi, pi]``: ``atan(y / x)``, plus or minus
    pi where ``x < 0`` (the sign of ``y``), ``+-pi/2`` on the ``y`` axis, 0 at the origin."""
    y, x = to_tensor(y), to_tensor(x)
    base = op.atan(binary("divide", y, x))
    half = binary("multiply", op.sign(y), math.pi / 2)
    pi = op.where(op.less(y, 0.0), to_tensor(-math.pi, base.dtype), to_tensor(math.pi, base.dtype))
    left = binary("add", base, pi)
    return op.where(op.greater(x, 0.0), base, op.where(op.less(x, 0.0), left, half))


def isnan(t, x):
    return op.not_equal(x, x)


def isinf(t, x):
    return op.equal(op.abs(x), float("inf")) if is_float(x.dtype) else op.not_equal(x, x)


def isfinite(t, x):
    return op.less(op.abs(x), float("inf")) if is_float(x.dtype) else op.equal(x, x)


def nan_to_num(t, x, nan=0.0, posinf=None, neginf=None):
    """``torch.nan_to_num``: NaN -> ``nan``, +-inf -> ``posinf`` / ``neginf`` (default: the dtype's
    largest / lowest finite values)."""
    if not is_float(x.dtype):
        return x
    info = np.finfo(np.float16 if x.dtype == "float16" else np.float64 if x.dtype == "float64" else np.float32)
    hi = float(info.max) if posinf is None else float(posinf)
    lo = float(info.min) if neginf is None else float(neginf)
    y = op.where(op.equal(x, float("inf")), hi, x)
    y = op.where(op.equal(x, float("-inf")), lo, y)
    return op.where(op.not_equal(x, x), float(nan), y)


def _any_all(kind: str):
    def run(t, x, dim=None, keepdim=False):
        v = as_dtype(x if x.dtype == "bool" else op.not_equal(x, 0), "int32")
        r = (op.max if kind == "any" else op.min)(v, axis=_axes(x, dim), keepdims=bool(keepdim))
        return op.not_equal(r, 0)
    run.__name__ = kind
    return run


def std_mean(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std(t, x, dim, unbiased, keepdim, correction=correction), _reduce("mean")(t, x, dim, keepdim)


def var_mean(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(t, x, dim, unbiased, keepdim, correction=correction), _reduce("mean")(t, x, dim, keepdim)


def cosine_similarity(t, x1, x2, dim=1, eps=1e-8):
    """``F.cosine_similarity``: ``sum(x1 * x2) / max(||x1|| * ||x2||, eps)`` along ``dim``."""
    d = norm_dim(dim, max(x1.ndim, x2.ndim))
    dot = op.sum(binary("multiply", x1, x2), axis=[d])
    n1 = op.sum(op.multiply(x1, x1), axis=[norm_dim(dim, x1.ndim)])
    n2 = op.sum(op.multiply(x2, x2), axis=[norm_dim(dim, x2.ndim)])
    return binary("divide", dot, op.maximum(op.sqrt(binary("multiply", n1, n2)), to_tensor(float(eps), dot.dtype)))


def cdist(t, x1, x2, p=2.0, compute_mode=None):
    """``torch.cdist`` (p = 2: Euclidean; 1; inf; other p) of (..., P, M) and (..., R, M) -> (..., P, R),
    by broadcasting the differences (P x R x M values)."""
    diff = op.abs(binary("subtract", op.unsqueeze(x1, x1.ndim - 1), op.unsqueeze(x2, x2.ndim - 2)))
    return vector_norm(t, diff, p, -1, False)


def log_sigmoid(t, x):
    """``F.logsigmoid``: ``min(x, 0) - log(1 + exp(-|x|))`` (no overflow)."""
    return binary("subtract", op.minimum(x, to_tensor(0.0, x.dtype)), op.log(binary("add", op.exp(op.negative(op.abs(x))), 1.0)))


def rrelu(t, x, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """``F.rrelu`` in eval mode: a leaky ReLU with the mean slope ``(lower + upper) / 2``."""
    if training:
        raise UnsupportedNodeError("rrelu in training mode (random slopes)")
    return op.leaky_relu(x, (float(lower) + float(upper)) / 2)


def one_hot(t, x, num_classes=-1):
    """``F.one_hot`` with a given ``num_classes`` (int64 result)."""
    if int(num_classes) < 1:
        raise UnsupportedNodeError("one_hot without num_classes (the size would depend on the data)")
    classes = op.arange(0, int(num_classes), 1, dtype=x.dtype)
    return as_dtype(op.equal(op.unsqueeze(x, x.ndim), classes), "int64")


def bucketize(t, x, boundaries, *, out_int32=False, right=False):
    """``torch.bucketize``: per value, how many boundaries are below it (``<=`` with ``right``)."""
    cmp = op.greater_equal if right else op.greater
    hits = as_dtype(cmp(op.unsqueeze(x, x.ndim), boundaries), "int32" if out_int32 else "int64")
    return op.sum(hits, axis=[x.ndim])


def normalize(t, x, p=2.0, dim=1, eps=1e-12, out=None):
    """``F.normalize`` (:func:`builder.nn.op.normalize`)."""
    return op.normalize(x, float(p), norm_dim(dim, x.ndim), float(eps))


def softmin(t, x, dim=None, _stacklevel=3, dtype=None):
    return softmax(t, op.negative(x), dim if dim is not None else -1, dtype)


def tanhshrink(t, x):
    return binary("subtract", x, op.tanh(x))


def new_tensor(t, x, data, *, dtype=None, **_):
    """``Tensor.new_tensor(data)``: a constant of ``data`` in ``x``'s dtype (or ``dtype``)."""
    return to_tensor(np.asarray(data), _dtype_or(dtype, x.dtype))


def hardshrink(t, x, lambd=0.5):
    return op.where(op.greater(op.abs(x), float(lambd)), x, to_tensor(0.0, x.dtype))


def softshrink(t, x, lambd=0.5):
    l_ = float(lambd)
    return op.where(op.greater(x, l_), binary("subtract", x, l_),
                    op.where(op.less(x, -l_), binary("add", x, l_), to_tensor(0.0, x.dtype)))


def threshold(t, x, threshold_, value, inplace=False):
    return op.where(op.greater(x, float(threshold_)), x, to_tensor(float(value), x.dtype))


def copy_(t, dst, src, non_blocking=False):
    """``Tensor.copy_`` / ``aten.copy_``: ``src`` broadcast to ``dst``'s shape, in ``dst``'s dtype."""
    src = to_tensor(src, dst.dtype)
    return op.broadcast_to(src, list(dst.shape)) if list(src.shape) != list(dst.shape) else src


class GraphTranslator:
    """Translation state of one graph: the BlockBuilder, the values of the nodes done so far
    (``env``), the weights bound as named constants, the symbolic dims by name and the permutations
    emitted (so that ``permute(permute(x))`` folds)."""

    def __init__(self) -> None:
        self.bb = BlockBuilder()
        self.env: dict = {}
        self.node = None
        self._weights: dict[str, Tensor] = {}
        self._weight_data: dict[str, Callable[[], Any]] = {}
        self._dims: dict[str, E.Var] = {}
        self._perm: dict = {}     # permute result Var -> (source Tensor, axes)
        self._bias: dict = {}     # (bool mask Var, dtype) -> its additive float form
        self._aliases: dict = {}  # node -> the set of nodes that are the same tensor (in-place ops)
        self._views: dict = {}    # node -> (the node it views, ("slice" | "select", ...))
        self.trace_hint = ""       # how to get source lines into error messages

    # -- symbolic dims and weights ----------------------------------------------------------------
    def dim(self, name: str) -> E.Var:
        """The int64 symbolic dim ``name`` (one variable per name in the graph)."""
        if name not in self._dims:
            if not name.isidentifier():
                raise FrontendError(f"a symbolic dim name must be an identifier, got {name!r}")
            self._dims[name] = E.Var(name, "int64")
        return self._dims[name]

    def add_weight(self, name: str, get: Callable[[], Any]) -> None:
        """Declare a weight (``get()`` returns its torch tensor); it is bound on first use."""
        self._weight_data[name] = get

    def weight(self, name: str, value=None) -> Tensor:
        """The weight ``name`` (a PyTorch dotted name) as a constant bound once in ``main`` under the
        name with ``.`` -> ``_``; ``value`` is its torch tensor (else the one declared with
        :meth:`add_weight`). Raises FrontendError for an unknown name."""
        if name not in self._weights:
            if value is None:
                if name not in self._weight_data:
                    raise FrontendError(f"unknown weight '{name}'")
                value = self._weight_data[name]()
            arr, dtype = to_numpy(value)
            var = self.bb.emit(rx.Constant(arr, dtype), _identifier(name))
            self._weights[name] = Tensor(_expr=var)
        return self._weights[name]

    # -- running nodes ----------------------------------------------------------------------------
    def value(self, a):
        """An fx argument translated: nodes by their values, containers element-wise."""
        if is_node(a):
            if a not in self.env:
                raise FrontendError(f"node '{a.name}' is used before it is defined")
            v = self.env[a]
            if isinstance(v, _Unavailable):   # (an unused one, a dead getitem of it, is no error)
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
        return UnsupportedNodeError(f"{describe_node(node, what, self.trace_hint)} has no translation" + (f" ({hint})" if hint else ""))

    def output_expr(self, out) -> rx.Expr:
        """The graph's result (a Tensor or a tuple of them) as one expression for ``emit_output``."""
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
        """``reshape(x, shape)`` (one ``-1``); ``x`` itself when the shape does not change."""
        from ..ir.op import resolve_reshape

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
        from ..ir.arith import divide_exact

        value = divide_exact(total, known)
        if value is None:
            return shape
    out = list(shape)
    out[at[0]] = value
    return out


def fmt(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


# -- helpers ------------------------------------------------------------------------------------

_BIG = 2 ** 62


def is_tensor(v) -> bool:
    return isinstance(v, Tensor)


def is_size(v) -> bool:
    return (isinstance(v, (int, np.integer, E.PrimExpr)) and not isinstance(v, bool)) or (
        isinstance(v, E.PrimExpr))


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def norm_dim(d: int, ndim: int) -> int:
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
        raise FrontendError(f"a dim must be an int, got {d!r}")
    d = int(d)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise FrontendError(f"dim {d} is out of range for a tensor of {ndim} dims")
    return d % max(ndim, 1)


def sizes(args) -> list:
    """``f(a, b)`` / ``f((a, b))`` / ``f([a, b])`` alike (torch's ``*size`` arguments)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


def static(d) -> int | None:
    if isinstance(d, (int, np.integer)):
        return int(d)
    if isinstance(d, E.IntImm):
        return d.value
    return None


def _promote(a: str, b: str) -> str:
    if a == b:
        return a
    if is_float(a) != is_float(b):
        return a if is_float(a) else b
    if a == "bool":
        return b
    if b == "bool":
        return a
    return E.promote_dtype(a, b)


def _scalar_dtype(v) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, float):
        return "float32"
    return "int64"


def as_dtype(x: Tensor, dtype: str) -> Tensor:
    return x if x.dtype == dtype else op.astype(x, dtype)


def binary(name: str, a, b):
    """A broadcast op with torch's type promotion: tensors of different dtypes meet at the wider
    (float over int over bool); a float number with an int / bool tensor makes it float32; two
    numbers / sizes are computed in Python (symbolic sizes stay PrimExprs)."""
    if not is_tensor(a) and not is_tensor(b):
        return _PY_BINARY[name](a, b)
    if is_tensor(a) and is_tensor(b):
        dt = _promote(a.dtype, b.dtype)
        a, b = as_dtype(a, dt), as_dtype(b, dt)
    else:
        t, s = (a, b) if is_tensor(a) else (b, a)
        if isinstance(s, E.PrimExpr) and not isinstance(s, (E.IntImm, E.FloatImm)):
            want = t.dtype if t.dtype != "bool" else "int64"
        else:
            sd = _scalar_dtype(s.value if isinstance(s, (E.IntImm, E.FloatImm)) else s)
            want = _promote(t.dtype, sd) if not (is_float(t.dtype) or t.dtype == sd) else t.dtype
            if t.dtype.startswith(("int", "uint")) and sd == "int64":
                want = t.dtype
        if want != t.dtype:
            t = op.astype(t, want)
        a, b = (t, b) if is_tensor(a) else (a, t)
    return getattr(op, name)(a, b)


_PY_BINARY = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
              "divide": operator.truediv, "power": operator.pow, "maximum": max, "minimum": min,
              "equal": operator.eq, "not_equal": operator.ne, "less": operator.lt,
              "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge}


def to_tensor(v, dtype: str | None = None) -> Tensor:
    """A tensor operand: a Tensor as it is, a number / size as a 0-d constant."""
    if is_tensor(v):
        return v if dtype is None else as_dtype(v, dtype)
    if isinstance(v, E.PrimExpr) and not isinstance(v, (E.IntImm, E.FloatImm)):
        from ..nn.core import wrap_nested
        from ..nn.op.common import symbolic_scalar

        return wrap_nested(symbolic_scalar(v, dtype or "int64"), "size")
    if isinstance(v, (E.IntImm, E.FloatImm)):
        v = v.value
    return Tensor(_expr=rx.Constant(np.asarray(v), dtype or _scalar_dtype(v)))


# -- translations of torch semantics --------------------------------------------------------------

def add(t, a, b, alpha=1):
    if alpha != 1:
        b = binary("multiply", b, alpha)
    return binary("add", a, b)


def sub(t, a, b, alpha=1):
    if alpha != 1:
        b = binary("multiply", b, alpha)
    return binary("subtract", a, b)


def rsub(t, a, b, alpha=1):
    return sub(t, b, a, alpha)


def mul(t, a, b):
    return binary("multiply", a, b)


def div(t, a, b, rounding_mode=None):
    if not is_tensor(a) and not is_tensor(b):
        if rounding_mode == "floor":
            return a // b
        if rounding_mode == "trunc":
            return int(a / b)
        return a / b
    if rounding_mode == "floor":
        return binary("floor_divide", a, b)
    if rounding_mode == "trunc":       # integer tensors: C-style division truncates already
        q = binary("divide", a, b)
        return op.trunc(q) if is_float(q.dtype) else q
    if rounding_mode is not None:
        raise UnsupportedNodeError(f"division with rounding_mode={rounding_mode!r}")
    for v in (a, b):
        if is_tensor(v) and not is_float(v.dtype):
            if is_tensor(a):
                a = as_dtype(a, "float32") if not is_float(a.dtype) else a
            if is_tensor(b):
                b = as_dtype(b, "float32") if not is_float(b.dtype) else b
    return binary("divide", a, b)


def floordiv(t, a, b):
    """``a // b`` / ``torch.floor_divide`` (floor division, torch's since 1.13): sizes in Python,
    tensors through ``floor_divide``."""
    if not is_tensor(a) and not is_tensor(b):
        return a // b
    return binary("floor_divide", a, b)


def mod(t, a, b):
    """``a % b`` / ``torch.remainder``: the sign of ``b`` (``floor_mod``); sizes in Python."""
    if not is_tensor(a) and not is_tensor(b):
        return a % b
    return binary("floor_mod", a, b)


def pow_(t, a, b):
    if is_tensor(a) and not is_tensor(b):
        if b == 1:
            return a
        if b == 2:
            return op.multiply(a, a)
        if b == 0.5:
            return op.sqrt(a)
        if b == -0.5:
            return op.rsqrt(a)
        if not is_float(a.dtype):
            a = as_dtype(a, "float32")
    if is_tensor(b) and not is_tensor(a):
        a = to_tensor(float(a), b.dtype)
    return binary("power", a, b)


def neg(t, x):
    return -x if not is_tensor(x) else op.negative(x)


def _unary(name: str, float_only: bool = True):
    def fn(t, x, *args, **kwargs):
        if float_only and not is_float(x.dtype):
            x = as_dtype(x, "float32")
        return getattr(op, name)(x)
    fn.__name__ = name
    return fn


def relu(t, x, inplace=False):
    return op.relu(x)


def gelu(t, x, approximate="none"):
    return op.gelu(x, approximate=None if approximate == "none" else approximate)


def silu(t, x, inplace=False):
    return op.silu(x)


def hardtanh(t, x, min_val=-1.0, max_val=1.0, inplace=False):
    return op.hardtanh(x, float(min_val), float(max_val))


def relu6(t, x, inplace=False):
    return op.hardtanh(x, 0.0, 6.0)


def hardsigmoid(t, x, inplace=False):
    return op.hardsigmoid(x)


def hardswish(t, x, inplace=False):
    return op.hardswish(x)


def leaky_relu(t, x, negative_slope=0.01, inplace=False):
    return op.leaky_relu(x, float(negative_slope))


def elu(t, x, alpha=1.0, inplace=False):
    return op.elu(x, float(alpha))


def selu(t, x, inplace=False):
    return op.elu(x, 1.6732632423543772, 1.0507009873554805)


def celu(t, x, alpha=1.0, inplace=False):
    return op.celu(x, float(alpha))


def softplus(t, x, beta=1.0, threshold=20.0):
    return op.softplus(x, float(beta), float(threshold))


def softsign(t, x):
    return op.softsign(x)


def mish(t, x, inplace=False):
    return op.mish(x)


def prelu(t, x, weight):
    """``F.prelu``: ``x`` where ``x >= 0``, else ``weight * x``; a (C,) weight applies along dim 1."""
    w = weight
    if w.ndim == 1 and x.ndim >= 2 and static(w.shape[0]) != 1:
        w = op.reshape(w, [1, w.shape[0]] + [1] * (x.ndim - 2))
    return op.where(op.greater_equal(x, 0.0), x, binary("multiply", x, w))


def glu(t, x, dim=-1):
    """``F.glu``: the first half of ``dim`` times the sigmoid of the second."""
    a, b = op.chunk(x, 2, dim=norm_dim(dim, x.ndim))
    return op.multiply(a, op.sigmoid(b))


def identity(t, x, *args, **kwargs):
    return x


def dropout(t, x, p=0.5, train=False, inplace=False, *, training=None):
    """Dropout of every kind at inference: the identity (``train`` / ``training`` are not followed)."""
    return x


def softmax(t, x, dim=None, dtype=None, _stacklevel=3, half_to_float=False):
    if dtype is not None:
        x = as_dtype(x, torch_dtype(dtype))
    return op.softmax(x, axis=-1 if dim is None else dim)


def aten_softmax(t, x, dim, half_to_float=False):
    return op.softmax(x, axis=dim)


def log_softmax(t, x, dim=None, dtype=None, _stacklevel=3):
    if dtype is not None:
        x = as_dtype(x, torch_dtype(dtype))
    return op.log_softmax(x, axis=-1 if dim is None else dim)


def _axes(x: Tensor, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    if isinstance(dim, (list, tuple)):
        return [norm_dim(d, x.ndim) for d in dim]
    return [norm_dim(dim, x.ndim)]


def _reduce(name: str):
    def fn(t, x, dim=None, keepdim=False, *, dtype=None, out=None):
        if dtype is not None:
            x = as_dtype(x, torch_dtype(dtype))
        if name == "mean" and not is_float(x.dtype):
            raise FrontendError(f"mean of a {x.dtype} tensor (torch requires a float dtype)")
        if name == "sum" and x.dtype in ("bool", "int32", "int16", "int8", "uint8"):
            x = as_dtype(x, "int64")
        return getattr(op, name)(x, axis=_axes(x, dim), keepdims=bool(keepdim))
    fn.__name__ = name
    return fn


def amax(t, x, dim=(), keepdim=False):
    return op.max(x, axis=_axes(x, dim), keepdims=bool(keepdim))


def amin(t, x, dim=(), keepdim=False):
    return op.min(x, axis=_axes(x, dim), keepdims=bool(keepdim))


class ValuesIndices(tuple):
    """``(values, indices)`` with torch's named-tuple fields (``torch.return_types.max`` & co.)."""

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]


def _max_min(kind: str) -> Callable:
    """``torch.max`` / ``torch.min`` (and the Tensor methods): of the whole tensor; along ``dim``,
    the named tuple ``(values, indices)`` (indices int64, the first extreme on ties); of two tensors,
    elementwise."""
    reduce_, arg, pair_ = (op.max, op.argmax, "maximum") if kind == "max" else (op.min, op.argmin, "minimum")

    def run(t, x, dim=None, keepdim=False):
        if is_tensor(dim):
            return binary(pair_, x, dim)
        if dim is None:
            return reduce_(x)
        axis = norm_dim(dim, x.ndim)
        return ValuesIndices((reduce_(x, axis=[axis], keepdims=bool(keepdim)),
                              arg(x, axis=axis, keepdims=bool(keepdim))))
    run.__name__ = kind
    return run


def sort(t, x, dim=-1, descending=False, *, stable=None):
    """``torch.sort`` (also the ``stable=`` overload): ``(values, indices)``, indices int64. Ours is always
    stable (equal values keep their order), which ``stable=False`` allows; NaN sorts as the largest, as
    in PyTorch."""
    axis = norm_dim(dim, x.ndim)
    order = op.argsort(x, axis=axis, descending=bool(descending), dtype="int64")
    return ValuesIndices((op.gather_elements(x, order, axis=axis), order))


def argsort(t, x, dim=-1, descending=False, *, stable=None):
    """``torch.argsort``: int64 positions, stable (see :func:`sort`)."""
    return op.argsort(x, axis=norm_dim(dim, x.ndim), descending=bool(descending), dtype="int64")


def topk(t, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    """``torch.topk``: ``(values, indices)``, indices int64, always sorted (``sorted=False`` allows any
    order); ties give the lower position first."""
    kk = static(k)
    if kk is None:
        raise UnsupportedNodeError("topk with a k computed at run time")
    return ValuesIndices(op.topk(x, kk, axis=norm_dim(dim, x.ndim), largest=bool(largest), dtype="int64"))


def kthvalue(t, x, k, dim=-1, keepdim=False):
    """``torch.kthvalue``: ``(values, indices)`` of the ``k``-th smallest element along ``dim`` (1-based; NaN
    counts as the largest), the last of the ``k`` smallest (:func:`builder.nn.op.topk`; with ties the index is
    one of the tied positions, which PyTorch leaves unspecified too). ``k`` static."""
    kk = static(k)
    if kk is None:
        raise UnsupportedNodeError("kthvalue with a k computed at run time")
    axis = norm_dim(dim, x.ndim) if x.ndim else 0
    x1 = op.reshape(x, [1]) if x.ndim == 0 else x
    vals, idx = op.topk(x1, kk, axis=axis, largest=False, dtype="int64")
    pick = lambda v: op.strided_slice(v, [axis], [kk - 1], [kk])
    vals, idx = pick(vals), pick(idx)
    if not keepdim or x.ndim == 0:
        vals, idx = op.squeeze(vals, [axis]), op.squeeze(idx, [axis])
    return ValuesIndices((vals, idx))


def median(t, x, dim=None, keepdim=False):
    """``torch.median``: the lower median (the ``(n + 1) // 2``-th smallest) along ``dim``, ``(values, indices)``,
    or of all elements (a 0-d value) without ``dim``; a slice holding a NaN gives NaN and the position of its
    first NaN, as PyTorch. The reduced size must be static (:func:`kthvalue`)."""
    if dim is None:
        return median(t, op.reshape(x, [-1]), 0)[0]
    if x.ndim == 0:      # (a 0-d input: its own median at index 0, 0-d)
        return median(t, op.reshape(x, [1]), 0)
    axis = norm_dim(dim, x.ndim)
    n = static(x.shape[axis])
    if n is None:
        raise UnsupportedNodeError(f"median over the symbolic size {x.shape[axis]}")
    vals, idx = kthvalue(t, x, (n + 1) // 2, dim, keepdim)
    if x.dtype not in ("float32", "float16", "bfloat16", "float64"):
        return ValuesIndices((vals, idx))
    nan = op.astype(op.not_equal(x, x), "int32")
    has = op.max(nan, axis=[axis], keepdims=bool(keepdim))         # (where casts it to bool)
    first = op.argmax(nan, axis=axis, keepdims=bool(keepdim))
    return ValuesIndices((op.where(has, float("nan"), vals), op.where(has, first, idx)))


def _arg(kind: str) -> Callable:
    """``torch.argmax`` / ``argmin``: along ``dim`` or of the flattened tensor."""
    fn = op.argmax if kind == "argmax" else op.argmin

    def run(t, x, dim=None, keepdim=False):
        if dim is None:
            out = fn(x)
            return op.reshape(out, [1] * x.ndim) if keepdim else out
        return fn(x, axis=norm_dim(dim, x.ndim), keepdims=bool(keepdim))
    run.__name__ = kind
    return run


def _round(t, x, decimals=0):
    """``torch.round``: halves to even; with ``decimals``, ``round(x * 10**d) / 10**d`` as torch."""
    if not decimals:
        return op.round(x)
    scale = 10.0 ** int(decimals)
    return binary("divide", op.round(binary("multiply", x, scale)), scale)


def _float_unary(name: str) -> Callable:
    """A rounding op that torch applies to floats (integers pass through unchanged)."""
    fn = getattr(op, name)

    def run(t, x):
        return fn(x)
    run.__name__ = name
    return run


def var(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    axes = _axes(x, dim)
    m = op.mean(x, axis=axes, keepdims=True)
    d = op.subtract(x, m)
    v = op.mean(op.multiply(d, d), axis=axes, keepdims=bool(keepdim))
    if correction:
        n = 1
        for a in (axes if axes is not None else range(x.ndim)):
            n = n * x.shape[a]
        if static(n) is None:
            raise FrontendError("var / std with a correction over symbolic dims is not supported")
        v = op.multiply(v, float(static(n)) / max(static(n) - correction, 1))
    return v


def std(t, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return op.sqrt(var(t, x, dim, unbiased, keepdim, correction=correction))


def compare(name: str):
    def fn(t, a, b):
        return binary(name, a, b)
    fn.__name__ = name
    return fn


def maximum(t, a, b):
    return binary("maximum", a, b)


def minimum(t, a, b):
    return binary("minimum", a, b)


def clamp(t, x, min=None, max=None):
    if min is not None:
        x = binary("maximum", x, min)
    if max is not None:
        x = binary("minimum", x, max)
    return x


def nonzero(t, x):
    """``torch.nonzero``: the (n, ndim) int64 indices of the nonzero elements, row-major, ``n`` a dim bound
    when the model runs (:func:`builder.nn.op.nonzero`); a 0-d x as one element."""
    return op.permute_dims(op.nonzero(_at_least_1d(t, x)), [1, 0])


def argwhere(t, x):
    """``torch.argwhere``: ``torch.nonzero``."""
    return nonzero(t, x)


def masked_select(t, x, mask):
    """``torch.masked_select``: the elements of ``x`` where the bool ``mask`` is true (both broadcast to
    one shape), row-major, as a 1-D tensor whose length is bound when the model runs."""
    shape = list(broadcast_shapes(tuple(x.shape), tuple(mask.shape), "masked_select"))
    xb = x if list(x.shape) == shape else op.broadcast_to(x, shape)
    mb = mask if list(mask.shape) == shape else op.broadcast_to(mask, shape)
    return op.take(t.reshape(xb, [-1]), _mask_positions(t, mb), axis=0)


def count_nonzero(t, x, dim=None):
    """``torch.count_nonzero``: int64 counts of the nonzero elements over ``dim`` (int, list or None:
    all)."""
    axis = None if dim is None else [norm_dim(d, x.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    return op.sum(op.astype(op.not_equal(x, to_tensor(0, x.dtype)) if x.dtype != "bool" else x, "int64"), axis=axis)


def unique(t, x, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """``torch.unique`` (no ``dim``): the distinct values flattened, ascending, with the inverse indices in
    x's shape and the counts when asked (:func:`builder.nn.op.unique`: the count is bound when the model
    runs)."""
    if dim is not None:
        raise UnsupportedNodeError("torch.unique with dim")
    values, _first, inverse, counts = op.unique(x, sorted=bool(sorted))
    out = [values]
    if return_inverse:
        out.append(t.reshape(inverse, list(x.shape)))
    if return_counts:
        out.append(counts)
    return out[0] if len(out) == 1 else tuple(out)


def aten_unique2(t, x, sorted=True, return_inverse=False, return_counts=False):  # noqa: A002
    """``aten._unique2``: always ``(values, inverse in x's shape, counts)``."""
    values, _first, inverse, counts = op.unique(x, sorted=bool(sorted))
    return values, t.reshape(inverse, list(x.shape)), counts


def _at_least_1d(t, x):
    return t.reshape(x, [1]) if x.ndim == 0 else x


def where(t, cond, a=None, b=None):
    if a is None:   # torch.where(cond) = cond.nonzero(as_tuple=True): one 1-D index tensor per dim
        idx = op.nonzero(_at_least_1d(t, cond))
        n = idx.shape[1]
        return tuple(t.reshape(op.take(idx, to_tensor(i, "int64"), axis=0), [n]) for i in range(idx.shape[0]))
    if is_tensor(a) and is_tensor(b):
        dt = _promote(a.dtype, b.dtype)
        a, b = as_dtype(a, dt), as_dtype(b, dt)
    elif not is_tensor(a) and not is_tensor(b):
        a = to_tensor(a, "float32" if isinstance(a, float) or isinstance(b, float) else None)
    return op.where(cond, a, b)


def masked_fill(t, x, mask, value):
    if is_tensor(value):
        value = as_dtype(value, x.dtype)
    elif not is_float(x.dtype) and isinstance(value, float):
        value = int(value)
    return op.where(mask, value, x)


def logical_and(t, a, b):
    if not is_tensor(a) and not is_tensor(b):
        return a and b
    a = to_tensor(a, "bool") if not is_tensor(a) else as_dtype(a, "bool")
    return op.where(a, to_tensor(b, "bool") if not is_tensor(b) else as_dtype(b, "bool"), False)


def logical_or(t, a, b):
    if not is_tensor(a) and not is_tensor(b):
        return a or b
    a = to_tensor(a, "bool") if not is_tensor(a) else as_dtype(a, "bool")
    return op.where(a, True, to_tensor(b, "bool") if not is_tensor(b) else as_dtype(b, "bool"))


def bitwise_and(t, a, b):
    if (is_tensor(a) and a.dtype != "bool") or (is_tensor(b) and b.dtype != "bool"):
        raise UnsupportedNodeError("bitwise and of integer tensors (only bool tensors)")
    return logical_and(t, a, b)


def bitwise_or(t, a, b):
    if (is_tensor(a) and a.dtype != "bool") or (is_tensor(b) and b.dtype != "bool"):
        raise UnsupportedNodeError("bitwise or of integer tensors (only bool tensors)")
    return logical_or(t, a, b)


def logical_not(t, x):
    return op.equal(as_dtype(x, "bool"), False)


def bitwise_not(t, x):
    if x.dtype != "bool":
        raise UnsupportedNodeError("bitwise not of an integer tensor (only bool tensors)")
    return logical_not(t, x)


# matmuls: the linear form matmul(x, permute_dims(W)) for weights, plain matmul otherwise

def linear(t, x, w, b=None):
    y = op.matmul(x, t.permute(w, [1, 0]))
    return y if b is None else op.add(y, b)


def matmul(t, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return op.sum(op.multiply(a, b))
    if a.ndim == 1:
        return op.squeeze(op.matmul(op.unsqueeze(a, 0), b), -2)
    if b.ndim == 1:
        return op.squeeze(op.matmul(a, op.unsqueeze(b, 1)), -1)
    return op.matmul(a, b)


def addmm(t, bias, a, b, beta=1, alpha=1):
    y = op.matmul(a, b)
    if alpha != 1:
        y = op.multiply(y, alpha)
    if beta == 0:
        return y
    return op.add(y, bias if beta == 1 else op.multiply(bias, beta))


def baddbmm(t, bias, a, b, beta=1, alpha=1):
    return addmm(t, bias, a, b, beta, alpha)


def embedding(t, ids, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """``F.embedding(ids, weight)``: a gather of rows (``padding_idx`` only matters for training)."""
    if max_norm is not None:
        raise UnsupportedNodeError("embedding with max_norm (renormalizes the weight in place)")
    ids = as_dtype(ids, "int64") if ids.dtype not in ("int32", "int64") else ids
    if ids.ndim == 1:
        return op.take(weight, ids, axis=0)
    flat = t.reshape(ids, [-1])
    return t.reshape(op.take(weight, flat, axis=0), [*ids.shape, weight.shape[1]])


def aten_embedding(t, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return embedding(t, ids, weight)


def layer_norm(t, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=None):
    return op.layer_norm(x, list(normalized_shape), weight, bias, eps=float(eps))


def native_layer_norm(t, x, normalized_shape, weight, bias, eps):
    """``aten.native_layer_norm``: (out, mean, rstd); only ``out`` may be used."""
    return (layer_norm(t, x, normalized_shape, weight, bias, eps), _Unavailable("native_layer_norm mean"),
            _Unavailable("native_layer_norm rstd"))


class _Unavailable:
    """A result a translation does not compute (layer norm's saved statistics); a node that uses it is an error
    (:meth:`GraphTranslator.value`), selecting it from its tuple is not."""

    def __init__(self, what: str) -> None:
        self.what = what


def rms_norm(t, x, normalized_shape, weight=None, eps=None):
    axes = list(range(-len(normalized_shape), 0))
    if eps is None:
        eps = float(np.finfo(np.float32).eps)
    if weight is None:
        weight = op.ones(list(normalized_shape), dtype=x.dtype)
    return op.rms_norm(x, weight, axes, epsilon=float(eps))


def group_norm(t, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=None):
    return op.group_norm(x, int(num_groups), weight, bias, eps=float(eps))


def _conv_padding(padding, weight, dilation, stride, n: int):
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * (2 * n)
        if padding == "same":
            out = []
            dil = dilation if isinstance(dilation, (list, tuple)) else [dilation] * n
            for i in range(n):
                total = int(dil[i]) * (static(weight.shape[2 + i]) - 1)
                out.append((total // 2, total - total // 2))
            return [p[0] for p in out] + [p[1] for p in out]
        raise FrontendError(f"unknown conv padding {padding!r}")
    pads = list(padding) if isinstance(padding, (list, tuple)) else [padding] * n
    if len(pads) == 1:
        pads = pads * n
    return pads + pads    # (begin..., end...)


def conv1d(t, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    pads = _conv_padding(padding, weight, dilation, stride, 1)
    return op.conv1d(x, weight, bias, stride=_first(stride), padding=pads, dilation=_first(dilation),
                     groups=int(groups))


def conv2d(t, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    pads = _conv_padding(padding, weight, dilation, stride, 2)
    return op.conv2d(x, weight, bias, stride=stride, padding=pads, dilation=dilation, groups=int(groups))


def _first(v):
    return int(v[0]) if isinstance(v, (list, tuple)) else int(v)


def conv_transpose1d(t, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose1d`` (:func:`builder.nn.op.conv1d_transpose`, IOW weight)."""
    return op.conv1d_transpose(x, weight, bias, stride=_first(stride), padding=_first(padding),
                               output_padding=_first(output_padding), dilation=_first(dilation), groups=int(groups))


def conv_transpose2d(t, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose2d`` (:func:`builder.nn.op.conv2d_transpose`, IOHW weight)."""
    return op.conv2d_transpose(x, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                               dilation=dilation, groups=int(groups))


def convolution(t, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        if x.ndim == 3:
            return conv_transpose1d(t, x, weight, bias, stride, padding, output_padding, groups, dilation)
        if x.ndim == 4:
            return conv_transpose2d(t, x, weight, bias, stride, padding, output_padding, groups, dilation)
        raise UnsupportedNodeError(f"transposed aten.convolution of a {x.ndim}-D input")
    if x.ndim == 3:
        return conv1d(t, x, weight, bias, stride, padding, dilation, groups)
    if x.ndim == 4:
        return conv2d(t, x, weight, bias, stride, padding, dilation, groups)
    raise UnsupportedNodeError(f"aten.convolution of a {x.ndim}-D input")


def _spatial(x: Tensor, nsp: int, fn: Callable, what: str) -> Tensor:
    """``fn`` on ``x`` (N, C, *spatial) with ``nsp`` spatial dims; torch's unbatched (C, *spatial)
    form goes through a batch of one."""
    if x.ndim == nsp + 1:
        return op.squeeze(fn(op.unsqueeze(x, 0)), [0])
    if x.ndim != nsp + 2:
        raise FrontendError(f"{what} needs a {nsp + 1}-D or {nsp + 2}-D input, got {x.ndim}-D")
    return fn(x)


def _stride(stride):
    return None if stride is None or (isinstance(stride, (list, tuple)) and not stride) else stride


def max_pool(nsp: int) -> Callable:
    """``F.max_pool{nsp}d`` / ``aten.max_pool{nsp}d`` (and ``_with_indices``, whose indices are not
    computed)."""
    fn = op.max_pool1d if nsp == 1 else op.max_pool2d

    def run(t, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        if return_indices:
            raise UnsupportedNodeError("max pooling with return_indices")
        return _spatial(x, nsp, lambda v: fn(v, kernel_size, _stride(stride), padding, dilation, bool(ceil_mode)),
                        f"max_pool{nsp}d")
    return run


def max_pool_with_indices(nsp: int) -> Callable:
    pool = max_pool(nsp)

    def run(t, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        return pool(t, x, kernel_size, stride, padding, dilation, ceil_mode), _Unavailable("max pooling indices")
    return run


def avg_pool(nsp: int) -> Callable:
    """``F.avg_pool{nsp}d`` / ``aten.avg_pool{nsp}d``."""
    fn = op.avg_pool1d if nsp == 1 else op.avg_pool2d

    def run(t, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
            divisor_override=None):
        if divisor_override is not None:
            raise UnsupportedNodeError("avg_pool with divisor_override")
        return _spatial(x, nsp, lambda v: fn(v, kernel_size, _stride(stride), padding, bool(ceil_mode),
                                              bool(count_include_pad)), f"avg_pool{nsp}d")
    return run


def adaptive_avg_pool(nsp: int) -> Callable:
    """``F.adaptive_avg_pool{nsp}d`` / ``aten.adaptive_avg_pool{nsp}d`` / ``aten._adaptive_avg_pool2d``."""
    fn = op.adaptive_avg_pool1d if nsp == 1 else op.adaptive_avg_pool2d

    def run(t, x, output_size):
        sizes = list(output_size) if isinstance(output_size, (list, tuple)) else [output_size] * nsp
        sizes = [None if s is None else static(s) for s in sizes]
        return _spatial(x, nsp, lambda v: fn(v, sizes), f"adaptive_avg_pool{nsp}d")
    return run


#: The most windows an adaptive max pooling of a size that the output size does not divide is written out with
#: (one slice and reduction per output position of that dim).
MAX_ADAPTIVE_WINDOWS = 256


def _adaptive_max_axis(x: Tensor, axis: int, out, what: str) -> Tensor:
    """Max pooling of ``axis`` of ``x`` to ``out`` positions over PyTorch's adaptive windows ``[floor(i * L /
    out), ceil((i + 1) * L / out))``: the identity for ``out == L``, a max over the axis for ``out == 1``, a
    reshape to ``(out, L / out)`` and a max over the inner dim where ``out`` divides ``L``, else one max per
    window (at most :data:`MAX_ADAPTIVE_WINDOWS`), concatenated."""
    length = static(x.shape[axis])
    if out is None or (length is not None and out == length):
        return x
    if out == 1:
        return op.max(x, axis=axis, keepdims=True)
    if length is None:
        raise UnsupportedNodeError(f"{what} of the symbolic size {x.shape[axis]} to {out} > 1 positions")
    if length % out == 0:
        shape = list(x.shape)
        y = op.reshape(x, shape[:axis] + [out, length // out] + shape[axis + 1:])
        return op.max(y, axis=axis + 1)
    if out > MAX_ADAPTIVE_WINDOWS:
        raise UnsupportedNodeError(f"{what} to {out} positions from {length} (which it does not divide; at most "
                                   f"{MAX_ADAPTIVE_WINDOWS})")
    parts = [op.max(op.strided_slice(x, [axis], [i * length // out], [-(-(i + 1) * length // out)]),
                    axis=axis, keepdims=True) for i in range(out)]
    return op.concat(parts, dim=axis)


def adaptive_max_pool(nsp: int) -> Callable:
    """``F.adaptive_max_pool{nsp}d`` / ``aten.adaptive_max_pool{nsp}d`` (values; the indices are not computed):
    the maximum over each of PyTorch's adaptive windows, one spatial dim at a time (a maximum over a
    rectangle is the maximum of the maxima of its rows), see :func:`_adaptive_max_axis`. ``output_size``
    static ints (``None`` keeps a dim)."""
    what = f"adaptive_max_pool{nsp}d"

    def pool(x, sizes):
        for k, o in enumerate(sizes):
            x = _adaptive_max_axis(x, 2 + k, o, what)
        return x

    def run(t, x, output_size, return_indices=False):
        if return_indices:
            raise UnsupportedNodeError(f"{what} with return_indices")
        sizes = list(output_size) if isinstance(output_size, (list, tuple)) else [output_size] * nsp
        sizes = [None if o is None else static(o) for o in sizes]
        if len(sizes) != nsp or any(o is not None and (not isinstance(o, int) or o < 1) for o in sizes):
            raise UnsupportedNodeError(f"{what} to output size {output_size!r}")
        return _spatial(x, nsp, lambda v: pool(v, sizes), what)
    return run


def aten_adaptive_max_pool(nsp: int) -> Callable:
    """``aten.adaptive_max_pool{nsp}d``: (values, indices); only the values may be used."""
    run = adaptive_max_pool(nsp)
    return lambda t, x, output_size: (run(t, x, output_size), _Unavailable("adaptive max pooling indices"))


def meshgrid(t, *tensors, indexing=None):
    """``torch.meshgrid``: N 1-D (or 0-D) tensors give N tensors of their sizes' grid; ``indexing="ij"``
    (PyTorch's default) puts input ``i`` along output dim ``i``, ``"xy"`` swaps the first two (numpy's
    default)."""
    ts = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    indexing = indexing or "ij"
    if indexing not in ("ij", "xy"):
        raise UnsupportedNodeError(f"meshgrid indexing {indexing!r} (ij or xy)")
    ts = [op.reshape(x, [1]) if x.ndim == 0 else x for x in ts]
    if not ts or any(x.ndim != 1 for x in ts):
        raise UnsupportedNodeError("meshgrid of tensors that are not 1-D")
    order = list(range(len(ts)))     # output dim d varies along input order[d]
    if indexing == "xy" and len(ts) > 1:
        order[0], order[1] = 1, 0
    shape = [ts[i].shape[0] for i in order]
    out = []
    for i, x in enumerate(ts):
        view = [1] * len(ts)
        view[order.index(i)] = x.shape[0]
        out.append(op.broadcast_to(op.reshape(x, view), shape))
    return out


def bilinear(t, x1, x2, weight, bias=None):
    """``F.bilinear`` / ``nn.Bilinear``: ``y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]``, as one
    matmul of ``x1`` with ``W`` laid out ``(i, o * j)``, a product with ``x2`` and a sum over ``j``."""
    if weight.ndim != 3 or x1.ndim < 1 or x2.ndim < 1:
        raise UnsupportedNodeError("bilinear needs a 3-D weight and inputs of at least 1 dim")
    o, i, j = weight.shape
    w = op.reshape(op.permute_dims(weight, [1, 0, 2]), [i, E.simplify(E.convert(o) * j)])
    y = op.reshape(op.matmul(x1, w), list(x1.shape[:-1]) + [o, j])
    y = op.sum(op.multiply(y, op.unsqueeze(x2, -2)), axis=-1)
    return y if bias is None else op.add(y, bias)


def batch_norm(t, x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """``F.batch_norm`` with running statistics (eval mode; :func:`builder.nn.op.batch_norm`)."""
    if training:
        raise UnsupportedNodeError("batch_norm in training mode (batch statistics); put the model in inference mode (Module.eval) first")
    if running_mean is None or running_var is None:
        raise UnsupportedNodeError("batch_norm without running statistics (track_running_stats=False)")
    return op.batch_norm(x, running_mean, running_var, weight, bias, axis=1 if x.ndim > 1 else 0, eps=float(eps))


def aten_batch_norm(t, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=None):
    """``aten.batch_norm`` (its own argument order)."""
    return batch_norm(t, x, running_mean, running_var, weight, bias, training, momentum, eps)


def aten_native_batch_norm(t, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """``aten.native_batch_norm``: (out, save_mean, save_invstd); only ``out`` may be used."""
    return (batch_norm(t, x, running_mean, running_var, weight, bias, training, momentum, eps),
            _Unavailable("batch_norm save_mean"), _Unavailable("batch_norm save_invstd"))


def aten_batch_norm_no_training(t, x, weight, bias, running_mean, running_var, momentum, eps):
    """``aten._native_batch_norm_legit_no_training`` (what torch.export writes for an eval-mode BatchNorm)."""
    return aten_native_batch_norm(t, x, weight, bias, running_mean, running_var, False, momentum, eps)


def interpolate(t, x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """``F.interpolate`` / ``nn.Upsample`` on NCHW data (:func:`builder.nn.op.interpolate`): nearest,
    nearest-exact, bilinear, bicubic. A ``scale_factor`` must give whole output sizes (PyTorch then maps
    coordinates by the factor, which equals the in / out ratio used here)."""
    if antialias:
        raise UnsupportedNodeError("interpolate with antialias=True")
    if x.ndim != 4:
        raise UnsupportedNodeError(f"interpolate of a {x.ndim}-D input (NCHW only)")
    if mode not in ("nearest", "nearest-exact", "bilinear", "bicubic"):
        raise UnsupportedNodeError(f"interpolate mode {mode!r}")
    if size is not None:
        size = [static(v) if static(v) is not None else v for v in (size if isinstance(size, (list, tuple)) else
                                                                  [size, size])]
        return op.interpolate(x, size=size, mode=mode, align_corners=align_corners)
    factors = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * 2
    try:
        out = [exact_scaled_size(d, f) for d, f in zip(x.shape[2:], factors)]
    except ValueError as e:
        raise UnsupportedNodeError(f"interpolate: {e}") from e
    return op.interpolate(x, size=out, mode=mode, align_corners=align_corners)


def upsample(mode: str, with_corners: bool) -> Callable:
    """``aten.upsample_nearest2d`` / ``upsample_bilinear2d`` / ``upsample_bicubic2d`` / ``_upsample_nearest_exact2d`` (and their
    ``.vec`` overloads: ``output_size`` or ``scale_factors``)."""
    def run(t, x, output_size, *rest):
        rest = list(rest)
        corners = rest.pop(0) if with_corners and rest else None
        if output_size is not None and (not isinstance(output_size, (list, tuple)) or len(output_size)):
            return interpolate(t, x, size=list(output_size), mode=mode, align_corners=corners)
        factors = rest[0] if rest else None
        if factors is None:
            raise FrontendError("upsample without output_size or scale_factors")
        return interpolate(t, x, scale_factor=list(factors), mode=mode, align_corners=corners)
    return run


def instance_norm(t, x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5, cudnn_enabled=None):
    """``F.instance_norm`` / ``nn.InstanceNorm1d / 2d``: each (sample, channel) over its spatial dims (group
    norm with one channel per group); with ``use_input_stats=False``, the running statistics (batch norm)."""
    if not use_input_stats:
        return batch_norm(t, x, running_mean, running_var, weight, bias, False, momentum, eps)
    c = static(x.shape[1]) if x.ndim >= 3 else None
    if c is None:
        raise UnsupportedNodeError("instance_norm needs an (N, C, ...) input with a static channel count")
    return op.group_norm(x, c, weight, bias, eps=float(eps))


def pixel_shuffle(t, x, upscale_factor):
    """``F.pixel_shuffle``: (N, C*r*r, H, W) -> (N, C, H*r, W*r) (ONNX DepthToSpace in CRD mode)."""
    r = int(upscale_factor)
    n, c, h, w = x.shape
    cr = E.simplify(E.convert(c) // (r * r))
    y = op.permute_dims(op.reshape(x, [n, cr, r, r, h, w]), [0, 1, 4, 2, 5, 3])
    return op.reshape(y, [n, cr, E.simplify(E.convert(h) * r), E.simplify(E.convert(w) * r)])


def channel_shuffle(t, x, groups):
    """``F.channel_shuffle`` / ``nn.ChannelShuffle`` (ShuffleNet, Zhang et al. 2018): (N, g * c, ...) viewed as
    (N, g, c, ...), the two channel dims swapped, flattened back."""
    g = int(groups)
    n, ch = x.shape[0], x.shape[1]
    per = E.simplify(E.convert(ch) // g)
    rest = list(x.shape[2:])
    y = op.reshape(x, [n, g, per] + rest)
    y = op.permute_dims(y, [0, 2, 1] + list(range(3, 3 + len(rest))))
    return op.reshape(y, [n, ch] + rest)


def pairwise_distance(t, x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``F.pairwise_distance``: the ``p``-norm of ``x1 - x2 + eps`` over the last dim."""
    d = binary("add", binary("subtract", x1, x2), float(eps))
    return vector_norm(t, d, p, [-1], keepdim)


def broadcast_tensors(t, *tensors):
    """``torch.broadcast_tensors``: every tensor broadcast to their common (numpy) shape."""
    tensors = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    shape = tuple(tensors[0].shape)
    for x in tensors[1:]:
        shape = broadcast_shapes(shape, tuple(x.shape), "broadcast_tensors")
    return [x if list(x.shape) == list(shape) else op.broadcast_to(x, list(shape)) for x in tensors]


#: ATen's loss reductions by number (``at::Reduction``).
ATEN_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def aten_regression_loss(kind: str) -> Callable:
    """The ATen form of :func:`regression_loss`: ``(self, target, reduction=1[, beta / delta])`` with the
    reduction as ATen's number."""
    run = regression_loss(kind)

    def aten(t, x, target, reduction=1, limit=1.0):
        extra = {"beta": limit} if kind == "smooth_l1_loss" else {"delta": limit} if kind == "huber_loss" else {}
        return run(t, x, target, reduction=ATEN_REDUCTIONS[int(reduction)], **extra)
    aten.__name__ = kind
    return aten


def _reduced(t, loss, reduction):
    if reduction == "mean":
        return op.mean(loss)
    if reduction == "sum":
        return op.sum(loss)
    if reduction == "none":
        return loss
    raise UnsupportedNodeError(f"loss reduction {reduction!r}")


def regression_loss(kind: str) -> Callable:
    """``F.mse_loss`` / ``l1_loss`` / ``smooth_l1_loss`` (``beta``) / ``huber_loss`` (``delta``) of ``input`` and
    ``target``, reduced by ``reduction`` (mean / sum / none), as PyTorch defines them."""
    def run(t, x, target, size_average=None, reduce=None, reduction="mean", beta=1.0, delta=1.0, weight=None):
        if size_average is not None or reduce is not None or weight is not None:
            raise UnsupportedNodeError(f"{kind} with the legacy size_average / reduce or a weight")
        d = binary("subtract", x, target)
        a = op.abs(d)
        if kind == "mse_loss":
            loss = op.multiply(d, d)
        elif kind == "l1_loss":
            loss = a
        else:
            lim = float(beta if kind == "smooth_l1_loss" else delta)
            quad = binary("multiply", op.multiply(d, d), 0.5 / lim if kind == "smooth_l1_loss" else 0.5)
            lin = binary("subtract", a, 0.5 * lim) if kind == "smooth_l1_loss" else \
                binary("multiply", binary("subtract", a, 0.5 * lim), lim)
            loss = op.where(op.less(a, lim), quad, lin)
        return _reduced(t, loss, reduction)
    run.__name__ = kind
    return run


def pixel_unshuffle(t, x, downscale_factor):
    """``F.pixel_unshuffle``: (N, C, H*r, W*r) -> (N, C*r*r, H, W)."""
    r = int(downscale_factor)
    n, c, h, w = x.shape
    hr, wr = E.simplify(E.convert(h) // r), E.simplify(E.convert(w) // r)
    y = op.permute_dims(op.reshape(x, [n, c, hr, r, wr, r]), [0, 1, 3, 5, 2, 4])
    return op.reshape(y, [n, E.simplify(E.convert(c) * (r * r)), hr, wr])


def sdpa(t, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` on (B, H, S, D) (or (N, S, D)): our attention op works in
    (B, S, H, D), so q / k / v are permuted (a permute that undoes the model's own transpose folds
    away) and the result permuted back."""
    if q.ndim == 3:
        q3, k3, v3 = (op.unsqueeze(a, 1) for a in (q, k, v))
        mask = attn_mask if attn_mask is None or attn_mask.ndim < 3 else op.unsqueeze(attn_mask, 1)
        return op.squeeze(sdpa(t, q3, k3, v3, mask, dropout_p, is_causal, scale, enable_gqa), 1)
    if q.ndim != 4:
        raise UnsupportedNodeError(f"scaled_dot_product_attention on {q.ndim}-D tensors")
    perm = [0, 2, 1, 3]
    qb, kb, vb = t.permute(q, perm), t.permute(k, perm), t.permute(v, perm)
    if attn_mask is not None and attn_mask.dtype == "bool":
        # the additive form once per mask, not once per layer (every layer reads the same mask)
        key = (attn_mask._expr, q.dtype)
        if key not in t._bias:
            t._bias[key] = op.where(attn_mask, to_tensor(0.0, q.dtype), float("-inf"))
        attn_mask = t._bias[key]
    elif attn_mask is not None and attn_mask.dtype != q.dtype:
        attn_mask = as_dtype(attn_mask, q.dtype)
    out = op.scaled_dot_product_attention(qb, kb, vb, attn_mask=attn_mask, is_causal=bool(is_causal),
                                          scale=None if scale is None else float(scale))
    return t.permute(out, perm)


def _cumulative(kind: str) -> Callable:
    """``torch.cumsum`` / ``torch.cumprod``: integers and bools accumulate in int64 unless a ``dtype`` is
    given, as PyTorch does."""
    fn = getattr(op, f"cum{kind}")

    def run(t, x, dim, dtype=None):
        if dtype is not None:
            x = as_dtype(x, torch_dtype(dtype))
        elif x.dtype in ("bool", "int32", "int16", "int8", "uint8"):
            x = as_dtype(x, "int64")
        return fn(x, axis=norm_dim(dim, x.ndim))
    run.__name__ = f"cum{kind}"
    return run


cumsum = _cumulative("sum")


# -- layout ---------------------------------------------------------------------------------------

def view(t, x, *shape):
    shape = sizes(shape)
    if len(shape) == 1 and isinstance(shape[0], str):
        raise UnsupportedNodeError("view(dtype)")
    return t.reshape(x, shape)


def reshape(t, x, *shape):
    return t.reshape(x, sizes(shape))


def permute(t, x, *dims):
    return t.permute(x, [norm_dim(d, x.ndim) for d in sizes(dims)])


def transpose(t, x, dim0, dim1):
    axes = list(range(x.ndim))
    a, b = norm_dim(dim0, x.ndim), norm_dim(dim1, x.ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return t.permute(x, axes)


def t_(t, x):
    return x if x.ndim < 2 else transpose(t, x, 0, 1)


def numpy_t(t, x):
    """``Tensor.T`` (``aten.numpy_T``): every dim reversed, as numpy's ``.T`` (for 2-d the same as
    ``t()``)."""
    return x if x.ndim < 2 else t.permute(x, list(range(x.ndim))[::-1])


def unsqueeze(t, x, dim):
    return op.unsqueeze(x, norm_dim(dim, x.ndim + 1))


def squeeze(t, x, dim=None):
    if dim is None:
        axes = [i for i, d in enumerate(x.shape) if static(d) == 1]
    else:
        axes = [norm_dim(d, x.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        axes = [a for a in axes if static(x.shape[a]) == 1]   # torch leaves a non-1 dim alone
    return x if not axes else op.squeeze(x, axes)


def flatten(t, x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return t.reshape(x, [1])
    s, e = norm_dim(start_dim, x.ndim), norm_dim(end_dim, x.ndim)
    if s == e:
        return x
    n = 1
    for d in x.shape[s:e + 1]:
        n = n * d
    return t.reshape(x, [*x.shape[:s], E.simplify(n) if isinstance(n, E.PrimExpr) else n, *x.shape[e + 1:]])


def unflatten(t, x, dim, sizes_):
    d = norm_dim(dim, x.ndim)
    return t.reshape(x, [*x.shape[:d], *sizes_, *x.shape[d + 1:]])


def expand(t, x, *shape, implicit=False):
    shape = sizes(shape)
    lead = len(shape) - x.ndim
    if lead < 0:
        raise FrontendError(f"expand: {len(shape)} sizes for a tensor of {x.ndim} dims")
    out = []
    for i, s in enumerate(shape):
        if static(s) == -1:
            if i < lead:
                raise FrontendError("expand: -1 is not allowed for a new leading dim")
            out.append(x.shape[i - lead])
        else:
            out.append(s)
    if len(out) == x.ndim and all(E.prove_equal(a, b) for a, b in zip(out, x.shape)):
        return x
    return op.broadcast_to(x, out)


def tile(t, x, *reps):
    """``Tensor.repeat(*sizes)`` / ``torch.tile`` (``numpy.tile``; :func:`builder.nn.op.tile`)."""
    reps = [static(r) for r in sizes(reps)]
    if any(r is None for r in reps):
        raise FrontendError(f"repeat: the repeats must be static ints, got {reps}")
    return op.tile(x, reps)


def repeat_interleave(t, x, repeats=None, dim=None, *, output_size=None):
    """``torch.repeat_interleave``: with an int ``repeats``, ``numpy.repeat``; with a tensor of repeats (one per
    element along ``dim``, or one for all), a gather at index ``i`` repeated ``repeats[i]`` times
    (:func:`builder.nn.op.repeat_interleave_indices`: the length is bound when the model runs); with only a
    tensor (``torch.repeat_interleave(repeats)``), those indices."""
    if is_tensor(x) and repeats is None:      # repeat_interleave(repeats): the indices themselves
        return op.repeat_interleave_indices(as_dtype(_at_least_1d(t, x), "int64"))
    if not is_tensor(repeats):
        r = static(repeats)
        if r is None:
            raise UnsupportedNodeError("repeat_interleave with symbolic repeats")
        return op.repeat(x, r, axis=None if dim is None else norm_dim(dim, x.ndim))
    if dim is None:
        x, d = t.reshape(x, [-1]), 0
    else:
        d = norm_dim(dim, x.ndim)
    r = as_dtype(_at_least_1d(t, repeats), "int64")
    if static(r.shape[0]) == 1 and static(x.shape[d]) != 1:   # one count for every element
        r = op.broadcast_to(r, [x.shape[d]])
    return op.take(x, op.repeat_interleave_indices(r), axis=d)


def clamp_min(t, x, min):
    return clamp(t, x, min, None)


def clamp_max(t, x, max):
    return clamp(t, x, None, max)


def expand_as(t, x, other):
    return expand(t, x, other.shape)


def broadcast_to(t, x, shape):
    return expand(t, x, shape)


def cat(t, tensors, dim=0):
    tensors = [v for v in tensors if not (is_tensor(v) and v.ndim == 1 and static(v.shape[0]) == 0)]
    if len(tensors) == 1:
        return tensors[0]
    dt = tensors[0].dtype
    for v in tensors[1:]:
        dt = _promote(dt, v.dtype)
    tensors = [as_dtype(v, dt) for v in tensors]
    return op.concat(tensors, dim=norm_dim(dim, tensors[0].ndim))


def stack(t, tensors, dim=0):
    d = norm_dim(dim, tensors[0].ndim + 1)
    return cat(t, [op.unsqueeze(v, d) for v in tensors], d)


def unfold(t, x, kernel_size, dilation=1, padding=0, stride=1):
    """``F.unfold`` / ``nn.Unfold`` / ``aten.im2col`` of an (N, C, H, W) input: (N, C * kH * kW, oH * oW),
    the sliding blocks as columns (channel slowest, then the kernel's rows and columns), from one strided
    slice of the zero-padded input per kernel position. Raises UnsupportedNodeError for a non-4-d input."""
    if x.ndim != 4:
        raise UnsupportedNodeError(f"unfold of a {x.ndim}-d input (N, C, H, W only)")
    two = lambda v: [int(v)] * 2 if isinstance(v, int) else [int(a) for a in v]  # noqa: E731
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (two(v) for v in (kernel_size, dilation, padding, stride))
    xp = op.pad(x, [0, 0, 0, 0, ph, ph, pw, pw]) if ph or pw else x
    h, w = xp.shape[2], xp.shape[3]
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    cols = []
    for i in range(kh):
        for j in range(kw):
            cols.append(op.unsqueeze(op.strided_slice(
                xp, [2, 3], [i * dh, j * dw], [i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1], [sh, sw]), 2))
    col = cols[0] if len(cols) == 1 else op.concat(cols, 2)          # (N, C, kH * kW, oH, oW)
    return op.reshape(col, [x.shape[0], x.shape[1] * kh * kw, oh * ow])


def unfold_windows(t, x, dimension, size, step):
    """``Tensor.unfold(dimension, size, step)`` (``aten.unfold``): the windows of ``size`` elements every
    ``step`` along ``dimension`` -- that dim becomes the window count ``(L - size) // step + 1`` and a last
    dim of ``size`` is added -- as one gather by the index grid ``arange(n) * step + arange(size)``."""
    d = norm_dim(dimension, x.ndim)
    size, step = int(size), int(step)
    if size < 0 or step <= 0:
        raise UnsupportedNodeError(f"Tensor.unfold with size {size}, step {step}")
    n = (x.shape[d] - size) // step + 1
    start = op.multiply(op.unsqueeze(op.arange(0, n, 1, dtype="int64"), 1), to_tensor(step, "int64"))
    grid = op.add(start, op.unsqueeze(op.arange(0, size, 1, dtype="int64"), 0))           # (n, size)
    win = op.take(x, grid, axis=d)                                       # (..., n, size, ...)
    axes = list(range(x.ndim + 1))
    axes.append(axes.pop(d + 1))
    return win if d == x.ndim - 1 else t.permute(win, axes)


def _split_indices(total, sections: list[int]) -> list[int]:
    idx, at = [], 0
    for s in sections[:-1]:
        at += int(s)
        idx.append(at)
    return idx


def split(t, x, split_size_or_sections, dim=0):
    """``torch.split``: an int is the size of each piece (the last one smaller), a list the sizes."""
    d = norm_dim(dim, x.ndim)
    n = static(x.shape[d])
    if isinstance(split_size_or_sections, (list, tuple)):
        secs = [int(s) for s in split_size_or_sections]
        if len(secs) == 1:
            return (x,)
        return tuple(op.split(x, _split_indices(n, secs), axis=d))
    size = int(split_size_or_sections)
    if n is None:
        raise FrontendError(f"split into pieces of {size} along a symbolic dim {x.shape[d]}")
    if size >= n:
        return (x,)
    return tuple(op.split(x, list(range(size, n, size)), axis=d))


def split_with_sizes(t, x, split_sizes, dim=0):
    return split(t, x, list(split_sizes), dim)


def chunk(t, x, chunks, dim=0):
    d = norm_dim(dim, x.ndim)
    n = static(x.shape[d])
    if n is None:
        return tuple(op.chunk(x, int(chunks), d))
    size = -(-n // int(chunks))
    return split(t, x, size, d)


def unbind(t, x, dim=0):
    d = norm_dim(dim, x.ndim)
    n = static(x.shape[d])
    if n is None:
        raise FrontendError(f"unbind along a symbolic dim {x.shape[d]}")
    return tuple(select(t, x, d, i) for i in range(n))


def _slice_bounds(x, dim, start, end):
    """``(dim, begin, end)`` of ``x[start:end]`` along ``dim`` with torch's rules: bounds clamp to the
    size, a huge ``end`` is the end, a negative bound counts from the end (symbolic sizes too)."""
    d = norm_dim(dim, x.ndim)
    size = x.shape[d]

    def bound(v, default):
        if v is None:
            return default
        s = static(v)
        if s is None:
            return v
        if s >= _BIG or (static(size) is not None and s >= static(size)):
            return size
        if s < 0:
            if static(size) is not None:
                return max(static(size) + s, 0)
            return E.simplify(E.convert(size) + s)
        return s

    return d, bound(start, 0), bound(end, size)


def slice_(t, x, dim=0, start=None, end=None, step=1):
    """``x[start:end:step]`` along ``dim`` (torch semantics: bounds clamp, huge ``end`` = the end)."""
    step = 1 if step is None else int(step)
    if step <= 0:
        raise FrontendError(f"slice step must be positive, got {step}")
    d, b, e = _slice_bounds(x, dim, start, end)
    if static(b) == 0 and E.prove_equal(e, x.shape[d]) and step == 1:
        return x
    return op.strided_slice(x, [d], [b], [e], [step])


def scatter_view(t, base, view: tuple, value) -> Tensor:
    """``base`` with the region of ``view`` replaced by ``value`` (broadcast to the region, in ``base``'s
    dtype): what an in-place op on a view (``x[:, 1:] = y``, ``x[:, 0].fill_(v)``) does to the tensor
    it views. ``view`` is ``("slice", dim, start, end, step)`` (step 1) or ``("select", dim, index)``.
    Emitted as a concatenation of ``base``'s parts before and after the region around ``value``.
    Raises UnsupportedNodeError for a strided slice."""
    kind, dim = view[0], view[1]
    if kind == "slice":
        step = 1 if view[4] is None else static(view[4])
        if step != 1:
            raise UnsupportedNodeError(f"assignment into a slice with step {view[4]}")
        d, b, e = _slice_bounds(base, dim, view[2], view[3])
        region = slice_(t, base, d, b, e)
    else:
        d = norm_dim(dim, base.ndim)
        i = static(view[2])
        if i is None:
            raise UnsupportedNodeError("assignment at a symbolic index")
        if i < 0:
            if static(base.shape[d]) is None:
                raise UnsupportedNodeError("assignment at a negative index of a symbolic dim")
            i += static(base.shape[d])
        b, e = i, i + 1
        region = op.strided_slice(base, [d], [b], [e], [1])
    value = to_tensor(value, base.dtype)
    if kind == "select":
        value = op.unsqueeze(value, d) if value.ndim >= region.ndim - 1 and value.ndim else value
    value = op.broadcast_to(value, list(region.shape)) if list(value.shape) != list(region.shape) else value
    parts = []
    if static(b) != 0:
        parts.append(slice_(t, base, d, 0, b))
    parts.append(value)
    if not E.prove_equal(e, base.shape[d]):
        parts.append(slice_(t, base, d, e, None))
    return parts[0] if len(parts) == 1 else op.concat(parts, dim=d)


def key_view(ndim: int, key) -> tuple | None:
    """The view (:func:`scatter_view`'s form) that ``x[key]`` is for an ``ndim``-d ``x``, when ``key`` is
    full slices and one int or slice of one dim (``...`` allowed); else None."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1 or any(k is None for k in key):
        return None
    if any(k is Ellipsis for k in key):
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1:]
    picked = [(d, k) for d, k in enumerate(key) if not (isinstance(k, slice) and k == slice(None))]
    if len(picked) != 1 or len(key) > ndim:
        return None
    d, k = picked[0]
    if isinstance(k, slice):
        return ("slice", d, k.start, k.stop, k.step)
    if isinstance(k, (int, E.PrimExpr)) and not isinstance(k, bool):
        return ("select", d, k)
    return None


def fill(t, x, value):
    """``Tensor.fill_`` / ``aten.fill``: ``value`` (a number or a 0-d tensor) everywhere in ``x``'s shape
    and dtype."""
    v = to_tensor(value, x.dtype)
    return op.broadcast_to(v, list(x.shape)) if list(v.shape) != list(x.shape) else v


def select(t, x, dim, index):
    d = norm_dim(dim, x.ndim)
    size = x.shape[d]
    i = static(index)
    if i is not None and i < 0:
        i = static(size) + i if static(size) is not None else E.simplify(E.convert(size) + i)
    elif i is None:
        i = index
    y = op.strided_slice(x, [d], [i], [i + 1 if isinstance(i, int) else E.simplify(i + 1)], [1])
    return op.squeeze(y, [d])


def diff(t, x, n=1, dim=-1, prepend=None, append=None):
    """``torch.diff``: ``x[1:] - x[:-1]`` along ``dim``, ``n`` times, after concatenating ``prepend`` /
    ``append``; bool tensors give ``!=`` as in PyTorch."""
    d = norm_dim(dim, x.ndim)
    parts = [v for v in (prepend, x, append) if v is not None]
    if len(parts) > 1:
        x = cat(t, parts, d)
    for _ in range(int(n)):
        hi = slice_(t, x, d, 1, None)
        lo = slice_(t, x, d, 0, -1)
        x = op.not_equal(hi, lo) if x.dtype == "bool" else op.subtract(hi, lo)
    return x


def narrow(t, x, dim, start, length):
    return slice_(t, x, dim, start, start + length)


def take_along(t, x, axis: int, idx: Tensor) -> Tensor:
    """``x`` indexed by the int tensor ``idx`` along ``axis`` (result dims: x's before, idx's, x's
    after); negative indices count from the end."""
    if idx.dtype == "bool":   # x[..., mask]: the dims the mask covers, flattened, at its nonzero elements
        return op.take(_mask_dims_flat(t, x, axis, idx), _mask_positions(t, idx), axis=axis)
    idx = as_dtype(idx, "int64")
    idx = op.where(op.less(idx, 0), op.add(idx, to_tensor(x.shape[axis], "int64")), idx)
    if idx.ndim == 1:
        return op.take(x, idx, axis=axis)
    flat = op.take(x, t.reshape(idx, [-1]), axis=axis)
    return t.reshape(flat, [*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]])


def _mask_dims_flat(t, x, axis: int, mask: Tensor) -> Tensor:
    """``x`` with the ``mask.ndim`` dims from ``axis`` (those a bool index covers; their sizes must match)
    merged into one."""
    covered = x.shape[axis:axis + mask.ndim]
    if len(covered) != mask.ndim or any(static(a) is not None and static(b) is not None and static(a) != static(b)
                                        for a, b in zip(covered, mask.shape)):
        raise ValueError(f"a bool index of shape {tuple(mask.shape)} does not fit dims {axis}.. of a tensor of "
                         f"shape {tuple(x.shape)}")
    merged = 1
    for d in covered:
        merged = merged * d
    merged = E.simplify(merged) if isinstance(merged, E.PrimExpr) else merged
    return t.reshape(x, [*x.shape[:axis], merged, *x.shape[axis + mask.ndim:]])


def _mask_positions(t, mask: Tensor) -> Tensor:
    """The flat positions of a bool mask's true elements (row-major), an (n,) int64 tensor with ``n`` bound
    when the model runs."""
    flat = op.nonzero(t.reshape(mask, [-1]))
    return t.reshape(flat, [flat.shape[1]])


def index_select(t, x, dim, index):
    return take_along(t, x, norm_dim(dim, x.ndim), index)


def index(t, x, indices):
    """``aten.index.Tensor``: ``x[i0, i1, ...]`` with index tensors (None skips a dim). Adjacent
    index tensors broadcast together and select one element of the merged dims."""
    pos = [i for i, v in enumerate(indices) if v is not None]
    if not pos:
        return x
    if pos != list(range(pos[0], pos[-1] + 1)):
        raise UnsupportedNodeError("index tensors separated by full slices")
    a = pos[0]
    tensors = [indices[i] for i in pos]
    if len(tensors) == 1:
        return take_along(t, x, a, tensors[0])
    linear = None
    merged = 1
    for i, idx in zip(pos, tensors):
        if not is_tensor(idx) or idx.dtype == "bool":
            raise UnsupportedNodeError("boolean mask indexing (a data-dependent shape)")
        idx = as_dtype(idx, "int64")
        idx = op.where(op.less(idx, 0), op.add(idx, to_tensor(x.shape[i], "int64")), idx)
        linear = idx if linear is None else op.add(op.multiply(linear, to_tensor(x.shape[i], "int64")), idx)
        merged = merged * x.shape[i]
    merged = E.simplify(merged) if isinstance(merged, E.PrimExpr) else merged
    flat = t.reshape(x, [*x.shape[:a], merged, *x.shape[pos[-1] + 1:]])
    return take_along(t, flat, a, linear)


def index_put(t, x, indices, values, accumulate=False):
    """``aten.index_put`` (``x[i0, i1, ...] = values``, ``+=`` with ``accumulate``): a bool mask (one, covering
    the leading dims it indexes) writes ``values`` where it is true (a broadcast value); int index tensors
    (None skips a dim) broadcast together and become one :func:`builder.nn.op.scatter_nd` over the dims they
    index, moved to the front. Raises UnsupportedNodeError for a mask with a tensor of values picked in mask
    order (a data-dependent count)."""
    pos = [i for i, v in enumerate(indices) if v is not None]
    if not pos:
        return copy_(t, x, values) if not accumulate else binary("add", x, values)
    tensors = [indices[i] for i in pos]
    if any(idx.dtype == "bool" for idx in tensors):
        if len(tensors) != 1:
            raise UnsupportedNodeError("index_put with a bool mask and other indices")
        mask, a = tensors[0], pos[0]
        v = to_tensor(values, x.dtype)
        if v.ndim > 1 or (v.ndim == 1 and static(v.shape[0]) != 1):
            # x[mask] = values, one row of values per true element in row-major order
            # (values broadcast to x[mask]'s shape: x's dims before the mask, the count, x's dims after it)
            flat = _mask_dims_flat(t, x, a, mask)
            where_ = _mask_positions(t, mask)
            n = where_.shape[0]
            indexed = [*flat.shape[:a], n, *flat.shape[a + 1:]]
            v = op.broadcast_to(v, indexed) if len(v.shape) != len(indexed) or any(
                static(p) != static(q) or static(p) is None for p, q in zip(v.shape, indexed)) else v
            to_front = [a] + [d for d in range(flat.ndim) if d != a]
            front = t.permute(flat, to_front) if a else flat
            v = t.permute(v, to_front) if a else v
            out = op.scatter_nd(front, t.reshape(where_, [n, 1]), v, reduction="add" if accumulate else "update")
            if a:
                out = t.permute(out, [d for d in range(1, a + 1)] + [0] + list(range(a + 1, flat.ndim)))
            return t.reshape(out, list(x.shape))
        m = t.reshape(mask, [1] * a + list(mask.shape) + [1] * (x.ndim - a - mask.ndim))
        v = t.reshape(v, [])
        return op.where(m, binary("add", x, v) if accumulate else op.broadcast_to(v, list(x.shape)), x)
    others = [d for d in range(x.ndim) if d not in pos]
    perm = pos + others
    front = t.permute(x, perm) if perm != list(range(x.ndim)) else x
    idx = [as_dtype(i, "int64") for i in tensors]
    shape = list(idx[0].shape)
    for i in idx[1:]:
        shape = list(broadcast_shapes(tuple(shape), tuple(i.shape), "index_put"))
    grid = op.concat([op.unsqueeze(op.broadcast_to(i, shape), len(shape)) for i in idx], len(shape))   # (*J, q)
    rest = [front.shape[d] for d in range(len(pos), x.ndim)]
    nj = len(shape)
    values = to_tensor(values, x.dtype)
    if pos == list(range(pos[0], pos[-1] + 1)) and pos[0] > 0:
        # ``values`` is laid out as ``x[..., idx, ...]`` is: the index dims where the indexed ones were
        a = pos[0]
        upd = op.broadcast_to(values, rest[:a] + shape + rest[a:])
        upd = t.permute(upd, list(range(a, a + nj)) + list(range(a)) + list(range(a + nj, nj + len(rest))))
    else:
        upd = op.broadcast_to(values, shape + rest)
    out = op.scatter_nd(front, grid, upd, reduction="add" if accumulate else "update")
    if perm == list(range(x.ndim)):
        return out
    return t.permute(out, [perm.index(d) for d in range(x.ndim)])


def slice_scatter(t, x, src, dim=0, start=None, end=None, step=1):
    """``torch.slice_scatter`` / ``aten.slice_scatter``: ``x`` with ``x[start:end:step]`` along ``dim``
    replaced by ``src``: pieces concatenated for ``step`` 1, else one :func:`builder.nn.op.scatter_elements`."""
    d = norm_dim(dim, x.ndim)
    n = x.shape[d]
    lo = 0 if start is None else start
    hi = n if end is None or (isinstance(end, int) and isinstance(n, int) and end > n) else end
    if isinstance(lo, int) and lo < 0:
        lo += n
    if isinstance(hi, int) and hi < 0:
        hi += n
    src = as_dtype(src, x.dtype)
    if int(step) == 1:
        parts = []
        if not (isinstance(lo, int) and lo == 0):
            parts.append(op.strided_slice(x, [d], [0], [lo]))
        parts.append(src)
        if not (isinstance(hi, int) and isinstance(n, int) and hi >= n):
            parts.append(op.strided_slice(x, [d], [hi], [n]))
        return parts[0] if len(parts) == 1 else op.concat(parts, d)
    pos = op.add(op.multiply(op.arange(0, src.shape[d], 1, dtype="int64"), to_tensor(int(step), "int64")),
                 to_tensor(lo, "int64"))
    pos = t.reshape(pos, [1] * d + [src.shape[d]] + [1] * (x.ndim - d - 1))
    return op.scatter_elements(x, op.broadcast_to(pos, list(src.shape)), src, axis=d)


def select_scatter(t, x, src, dim, index):
    """``torch.select_scatter``: ``x`` with ``x.select(dim, index)`` replaced by ``src``."""
    d = norm_dim(dim, x.ndim)
    i = index + x.shape[d] if isinstance(index, int) and index < 0 else index
    return slice_scatter(t, x, op.unsqueeze(to_tensor(src, x.dtype), d), d, i, i + 1, 1)


def diagonal(t, x, offset=0, dim1=0, dim2=1):
    """``torch.diagonal``: the (``offset``) diagonal of dims ``dim1`` / ``dim2`` as a last dim, the other dims
    kept in order; static sizes of those two dims. One gather from the flattened pair."""
    a, b = norm_dim(dim1, x.ndim), norm_dim(dim2, x.ndim)
    n1, n2 = static(x.shape[a]), static(x.shape[b])
    if n1 is None or n2 is None:
        raise UnsupportedNodeError("diagonal of symbolic dims")
    off = int(offset)
    length = max(0, min(n1, n2 - off) if off >= 0 else min(n1 + off, n2))
    rows = np.arange(length) + max(0, -off)
    flat_idx = rows * n2 + rows + off
    rest = [d for d in range(x.ndim) if d not in (a, b)]
    moved = t.permute(x, rest + [a, b])
    flat = t.reshape(moved, [x.shape[d] for d in rest] + [n1 * n2])
    return op.take(flat, to_tensor(flat_idx.astype(np.int64), "int64"), axis=len(rest))


def fmod(t, a, b):
    """``torch.fmod``: the C remainder, with the sign of the dividend (``floor_mod`` has the divisor's)."""
    if not is_tensor(a) and not is_tensor(b):
        return math.fmod(a, b)
    r = binary("floor_mod", a, b)
    a_t = to_tensor(a, r.dtype)
    b_t = to_tensor(b, r.dtype)
    zero = to_tensor(0, r.dtype)
    wrong = op.where(op.not_equal(r, zero), op.not_equal(op.less(r, zero), op.less(a_t, zero)), False)
    return op.where(wrong, binary("subtract", r, b_t), r)


def logical_xor(t, a, b):
    """``torch.logical_xor``: bool, true where exactly one operand is nonzero (numbers broadcast)."""
    a = to_tensor(a, "bool") if not is_tensor(a) else as_dtype(a, "bool")
    b = to_tensor(b, "bool") if not is_tensor(b) else as_dtype(b, "bool")
    return op.not_equal(a, b)


def bitwise_xor(t, a, b):
    """``torch.bitwise_xor`` / ``^`` of bool tensors (:func:`logical_xor`). Raises UnsupportedNodeError for
    integer tensors."""
    if (is_tensor(a) and a.dtype != "bool") or (is_tensor(b) and b.dtype != "bool"):
        raise UnsupportedNodeError("bitwise xor of integer tensors (only bool tensors)")
    return logical_xor(t, a, b)


#: torch's gate order -> ONNX's (rows of the weights, in blocks of H): LSTM i f g o -> i o f c; GRU r z n -> z r h
_TORCH_GATES = {"lstm": [0, 3, 1, 2], "gru": [1, 0, 2], "rnn": [0], "rnn_relu": [0]}


def _onnx_gates(w: Tensor, cell: str, hidden: int) -> Tensor:
    order = _TORCH_GATES[cell]
    if order == list(range(len(order))):
        return w
    return op.concat([op.strided_slice(w, [0], [g * hidden], [(g + 1) * hidden]) for g in order], 0)


def recurrent(cell: str) -> Callable:
    """``aten.lstm.input`` / ``aten.gru.input`` / ``aten.rnn_tanh.input`` / ``aten.rnn_relu.input`` (``nn.LSTM`` /
    ``GRU`` / ``RNN``):
    every layer and direction as :func:`builder.nn.op.recurrent_layer` with torch's gates reordered to ONNX's
    (a GRU's reset gate applied after its recurrent product: ``linear_before_reset``). Returns ``(output,
    h_n[, c_n])``. Raises UnsupportedNodeError for dropout while training, ``proj_size``."""
    def run(t, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        if train and float(dropout):
            raise UnsupportedNodeError(f"{cell} with dropout while training")
        dirs = 2 if bidirectional else 1
        per = 4 if has_biases else 2
        if len(params) != per * dirs * int(num_layers):
            raise UnsupportedNodeError(f"{cell} with {len(params)} weights (proj_size is not supported)")
        h0 = hx[0] if cell == "lstm" else hx
        c0 = hx[1] if cell == "lstm" else None
        seq = t.permute(x, [1, 0, 2]) if batch_first else x           # (S, B, I)
        hidden = static(h0.shape[2])
        h_n, c_n = [], []
        for layer in range(int(num_layers)):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                w_ih, w_hh, *bias = params[per * k: per * (k + 1)]
                state = lambda v: op.squeeze(op.strided_slice(v, [0], [k], [k + 1]), [0])  # noqa: E731
                res = op.recurrent_layer(
                    seq, _onnx_gates(w_ih, cell, hidden), _onnx_gates(w_hh, cell, hidden),
                    _onnx_gates(bias[0], cell, hidden) if bias else None,
                    _onnx_gates(bias[1], cell, hidden) if bias else None, state(h0),
                    state(c0) if c0 is not None else None, cell=cell, reverse=bool(d), linear_before_reset=True)
                outs.append(res[0])
                h_n.append(op.unsqueeze(res[1], 0))
                if cell == "lstm":
                    c_n.append(op.unsqueeze(res[2], 0))
            seq = outs[0] if dirs == 1 else op.concat(outs, 2)        # (S, B, dirs * H)
        out = t.permute(seq, [1, 0, 2]) if batch_first else seq
        h = h_n[0] if len(h_n) == 1 else op.concat(h_n, 0)
        if cell != "lstm":
            return out, h
        return out, h, c_n[0] if len(c_n) == 1 else op.concat(c_n, 0)
    run.__name__ = cell
    return run


def getitem(t, x, key):
    """``x[key]``: Python indexing of a tuple / list / size list, or tensor indexing with ints,
    slices, None, ``...`` and one int index tensor."""
    if not is_tensor(x):
        return x[key]    # (an _Unavailable element is an error where a node uses it: GraphTranslator.value)
    key = key if isinstance(key, tuple) else (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (x.ndim - n_real) + key[at + 1:]
    if n_real > x.ndim:
        raise FrontendError(f"{n_real} indices for a tensor of {x.ndim} dims")
    ax = 0
    tensors = 0
    for k in key:
        if k is None:
            x = op.unsqueeze(x, ax)
            ax += 1
        elif isinstance(k, slice):
            x = slice_(t, x, ax, k.start, k.stop, k.step)
            ax += 1
        elif is_tensor(k):
            tensors += 1
            if tensors > 1:
                raise UnsupportedNodeError("indexing with more than one index tensor")
            x = take_along(t, x, ax, k)
            ax += k.ndim
        elif is_size(k):
            x = select(t, x, ax, k)
        else:
            raise UnsupportedNodeError(f"index {k!r} of type {type(k).__name__}")
    return x


def size(t, x, dim=None):
    if dim is None:
        return list(x.shape)
    return x.shape[norm_dim(dim, x.ndim)]


def dim_(t, x):
    return x.ndim


def numel(t, x):
    n = 1
    for d in x.shape:
        n = n * d
    return E.simplify(n) if isinstance(n, E.PrimExpr) else n


# -- creation -------------------------------------------------------------------------------------

def _dtype_or(dtype, default: str) -> str:
    return default if dtype is None else torch_dtype(dtype)


def arange(t, start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None,
           requires_grad=False, out=None):
    if end is None:
        start, end = 0, start
    nums = [v for v in (start, end, step) if not isinstance(v, E.PrimExpr)]
    default = "float32" if any(isinstance(v, float) for v in nums) else "int64"
    return op.arange(start, end, step, dtype=_dtype_or(dtype, default))


def full(t, size_, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False,
         out=None):
    default = "bool" if isinstance(fill_value, bool) else ("float32" if isinstance(fill_value, float) else
                                                           "int64")
    if not isinstance(fill_value, bool) and isinstance(fill_value, int) and dtype is None:
        default = "int64"
    dt = _dtype_or(dtype, default)
    if is_tensor(fill_value):
        return op.broadcast_to(as_dtype(fill_value, dt), list(size_))
    return op.full(list(size_), fill_value, dtype=dt)


def ones(t, *size_, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    return op.ones(sizes(size_), dtype=_dtype_or(dtype, "float32"))


def zeros(t, *size_, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    return op.zeros(sizes(size_), dtype=_dtype_or(dtype, "float32"))


def full_like(t, x, fill_value, *, dtype=None, **_):
    return op.full(list(x.shape), fill_value, dtype=_dtype_or(dtype, x.dtype))


def ones_like(t, x, *, dtype=None, **_):
    return op.ones(list(x.shape), dtype=_dtype_or(dtype, x.dtype))


def zeros_like(t, x, *, dtype=None, **_):
    return op.zeros(list(x.shape), dtype=_dtype_or(dtype, x.dtype))


def new_full(t, x, size_, fill_value, *, dtype=None, **_):
    return op.full(list(size_), fill_value, dtype=_dtype_or(dtype, x.dtype))


def new_ones(t, x, *size_, dtype=None, **_):
    return op.ones(sizes(size_), dtype=_dtype_or(dtype, x.dtype))


def new_zeros(t, x, *size_, dtype=None, **_):
    return op.zeros(sizes(size_), dtype=_dtype_or(dtype, x.dtype))


def tril(t, x, diagonal=0):
    return op.tril(x, int(diagonal))


def triu(t, x, diagonal=0):
    return op.triu(x, int(diagonal))


# -- conversions ----------------------------------------------------------------------------------

def _is_dtype(v) -> bool:
    return type(v).__name__ == "dtype" and str(v).startswith("torch.")


def to(t, x, *args, dtype=None, **kwargs):
    """``x.to(dtype)`` / ``x.to(device)`` / ``x.to(other)`` / ``x.to(device, dtype)``: only the dtype
    matters here (one device)."""
    for a in args:
        if _is_dtype(a):
            dtype = a
        elif is_tensor(a):
            dtype = a.dtype
    if dtype is None:
        return x
    return as_dtype(x, dtype if isinstance(dtype, str) and dtype in DTYPES else torch_dtype(dtype))


def type_as(t, x, other):
    return as_dtype(x, other.dtype)


def _cast(dtype: str):
    def fn(t, x, *args, **kwargs):
        return as_dtype(x, dtype)
    fn.__name__ = dtype
    return fn


def pad(t, x, pad_, mode="constant", value=None):
    """``F.pad``: ``pad_`` is (last dim's before, after, the one before's, ...); modes ``constant``,
    ``replicate``, ``reflect`` and ``circular`` (numpy's ``wrap``)."""
    pairs = [(pad_[i], pad_[i + 1]) for i in range(0, len(pad_), 2)]
    width = [0] * (2 * x.ndim)
    for k, (b, a) in enumerate(pairs):
        ax = x.ndim - 1 - k
        width[2 * ax], width[2 * ax + 1] = int(b), int(a)
    modes = {"constant": "constant", "replicate": "edge", "reflect": "reflect", "circular": "wrap"}
    if mode not in modes:
        raise UnsupportedNodeError(f"pad mode {mode!r}")
    return op.pad(x, width, mode=modes[mode], value=0.0 if value is None else float(value))


def contiguous(t, x, *args, **kwargs):
    return x


# The torch-semantics translations by name; the fx and ATen maps point their targets at these.
TORCH_OPS: dict[str, Callable] = {
    "add": add, "sub": sub, "rsub": rsub, "mul": mul, "div": div, "floordiv": floordiv, "mod": mod,
    "pow": pow_, "neg": neg,
    "exp": _unary("exp"), "log": _unary("log"), "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"),
    "tanh": _unary("tanh"), "sigmoid": _unary("sigmoid"), "erf": _unary("erf"), "sin": _unary("sin"),
    "cos": _unary("cos"), "abs": _unary("abs", float_only=False), "tan": _unary("tan"), "atan": _unary("atan"),
    "asin": _unary("asin"), "acos": _unary("acos"), "asinh": asinh, "acosh": acosh, "atanh": atanh, "atan2": atan2,
    "relu": relu, "gelu": gelu, "silu": silu, "dropout": dropout, "identity": identity,
    "hardtanh": hardtanh, "relu6": relu6, "hardsigmoid": hardsigmoid, "hardswish": hardswish,
    "leaky_relu": leaky_relu, "elu": elu, "selu": selu, "celu": celu, "softplus": softplus, "softsign": softsign,
    "mish": mish, "prelu": prelu, "glu": glu,
    "softmax": softmax, "log_softmax": log_softmax,
    "mean": _reduce("mean"), "sum": _reduce("sum"), "prod": _reduce("prod"), "amax": amax, "amin": amin,
    "max": _max_min("max"), "min": _max_min("min"), "argmax": _arg("argmax"), "argmin": _arg("argmin"),
    "floor": _float_unary("floor"), "ceil": _float_unary("ceil"), "trunc": _float_unary("trunc"),
    "sign": _float_unary("sign"), "round": _round, "floor_divide": floordiv, "remainder": mod,
    "var": var, "std": std,
    "eq": compare("equal"), "ne": compare("not_equal"), "lt": compare("less"), "le": compare("less_equal"),
    "gt": compare("greater"), "ge": compare("greater_equal"),
    "maximum": maximum, "minimum": minimum, "clamp": clamp, "clamp_min": clamp_min, "clamp_max": clamp_max,
    "where": where, "nonzero": nonzero, "argwhere": argwhere, "masked_select": masked_select, "unique": unique,
    "count_nonzero": count_nonzero, "masked_fill": masked_fill,
    "logical_and": logical_and, "logical_or": logical_or, "logical_not": logical_not,
    "bitwise_and": bitwise_and, "bitwise_or": bitwise_or, "bitwise_not": bitwise_not,
    "linear": linear, "matmul": matmul, "mm": matmul, "bmm": matmul, "addmm": addmm, "baddbmm": baddbmm,
    "embedding": embedding, "layer_norm": layer_norm, "rms_norm": rms_norm, "group_norm": group_norm,
    "conv1d": conv1d, "conv2d": conv2d, "conv_transpose1d": conv_transpose1d, "conv_transpose2d": conv_transpose2d,
    "scaled_dot_product_attention": sdpa,
    "cumsum": cumsum, "cumprod": _cumulative("prod"),
    "max_pool1d": max_pool(1), "max_pool2d": max_pool(2), "avg_pool1d": avg_pool(1), "avg_pool2d": avg_pool(2),
    "adaptive_avg_pool1d": adaptive_avg_pool(1), "adaptive_avg_pool2d": adaptive_avg_pool(2),
    "adaptive_max_pool1d": adaptive_max_pool(1), "adaptive_max_pool2d": adaptive_max_pool(2),
    "meshgrid": meshgrid, "bilinear": bilinear, "kthvalue": kthvalue, "median": median,
    "frac": lambda t, x: op.subtract(x, op.trunc(x)),
    "batch_norm": batch_norm, "interpolate": interpolate, "instance_norm": instance_norm,
    "pixel_shuffle": pixel_shuffle, "pixel_unshuffle": pixel_unshuffle, "gather": gather,
    "scatter": scatter, "sort": sort, "argsort": argsort, "topk": topk,
    "msort": lambda t, x: sort(t, x, 0)[0],
    "scatter_add": lambda t, x, dim, index, src: scatter(t, x, dim, index, src, reduce="add"),
    "scatter_reduce": lambda t, x, dim, index, src, reduce, *, include_self=True: scatter(
        t, x, dim, index, src, reduce=reduce, include_self=include_self),
    "_weight_norm": weight_norm, "einsum": einsum, "flip": flip, "roll": roll, "logsumexp": logsumexp,
    "linalg_vector_norm": vector_norm, "outer": outer, "ger": outer, "addcmul": addcmul, "addcdiv": addcdiv, "lerp": lerp,
    "square": square, "reciprocal": reciprocal, "log1p": log1p, "expm1": expm1, "log2": log2, "exp2": exp2,
    "sinh": sinh, "cosh": cosh, "isnan": isnan, "isinf": isinf, "isfinite": isfinite, "nan_to_num": nan_to_num,
    "any": _any_all("any"), "all": _any_all("all"), "std_mean": std_mean, "var_mean": var_mean,
    "cosine_similarity": cosine_similarity, "cdist": cdist, "log_sigmoid": log_sigmoid, "logsigmoid": log_sigmoid,
    "rrelu": rrelu, "one_hot": one_hot, "bucketize": bucketize, "hardshrink": hardshrink, "softshrink": softshrink,
    "threshold": threshold, "sgn": _float_unary("sign"), "normalize": normalize, "softmin": softmin,
    "tanhshrink": tanhshrink, "new_tensor": new_tensor,
    "take_along_dim": lambda t, x, indices, dim=None: gather(t, x, dim, indices),
    "view": view, "reshape": reshape, "permute": permute, "transpose": transpose, "t": t_,
    "numpy_T": numpy_t,
    "unsqueeze": unsqueeze, "squeeze": squeeze, "flatten": flatten, "unflatten": unflatten,
    "expand": expand, "expand_as": expand_as, "broadcast_to": broadcast_to, "repeat": tile, "tile": tile,
    "repeat_interleave": repeat_interleave,
    "cat": cat, "concat": cat, "stack": stack, "split": split, "split_with_sizes": split_with_sizes,
    "chunk": chunk, "unbind": unbind, "narrow": narrow, "select": select, "index_select": index_select,
    "slice": slice_, "index": index, "diff": diff,
    "getitem": getitem, "size": size, "dim": dim_, "numel": numel,
    "arange": arange, "full": full, "ones": ones, "zeros": zeros, "full_like": full_like,
    "ones_like": ones_like, "zeros_like": zeros_like, "new_full": new_full, "new_ones": new_ones,
    "new_zeros": new_zeros, "tril": tril, "triu": triu, "fill": fill,
    "to": to, "type_as": type_as, "float": _cast("float32"), "half": _cast("float16"),
    "bfloat16": _cast("bfloat16"), "double": _cast("float64"), "int": _cast("int32"), "long": _cast("int64"),
    "bool": _cast("bool"), "contiguous": contiguous, "clone": contiguous, "detach": contiguous,
    "pad": pad,
    "view_as": lambda t, x, other: reshape(t, x, list(other.shape)),
    "reshape_as": lambda t, x, other: reshape(t, x, list(other.shape)),
    # uninitialized memory in PyTorch: zeros are one of its values
    "empty": lambda t, *size_, **kw: zeros(t, *size_, **{k: v for k, v in kw.items() if k != "memory_format"}),
    "empty_like": lambda t, x, **kw: zeros_like(t, x, **{k: v for k, v in kw.items() if k != "memory_format"}),
    "new_empty": lambda t, x, *size_, **kw: new_zeros(t, x, *size_, **kw),
    "zero": lambda t, x: zeros_like(t, x),
    "channel_shuffle": channel_shuffle, "native_channel_shuffle": channel_shuffle,
    "feature_dropout": dropout, "alpha_dropout": dropout, "feature_alpha_dropout": dropout,
    "pairwise_distance": pairwise_distance, "broadcast_tensors": broadcast_tensors,
    "mse_loss": regression_loss("mse_loss"), "l1_loss": regression_loss("l1_loss"),
    "smooth_l1_loss": regression_loss("smooth_l1_loss"), "huber_loss": regression_loss("huber_loss"),
    "im2col": unfold, "unfold": unfold_windows,   # (F.unfold is aten.im2col; aten.unfold is Tensor.unfold)
    "lstm": recurrent("lstm"), "gru": recurrent("gru"), "rnn_tanh": recurrent("rnn"), "rnn_relu": recurrent("rnn_relu"),
    "index_put": index_put, "slice_scatter": slice_scatter, "select_scatter": select_scatter, "diagonal": diagonal,
    "fmod": fmod, "logical_xor": logical_xor, "bitwise_xor": bitwise_xor, "__xor__": bitwise_xor,
    "log10": lambda t, x: binary("divide", op.log(x), math.log(10.0)),
    "constant_pad_nd": lambda t, x, pad_, value=0: pad(t, x, pad_, "constant", value),
    "reflection_pad1d": lambda t, x, p: pad(t, x, p, "reflect"), "reflection_pad2d": lambda t, x, p: pad(t, x, p, "reflect"),
    "reflection_pad3d": lambda t, x, p: pad(t, x, p, "reflect"),
    "replication_pad1d": lambda t, x, p: pad(t, x, p, "replicate"),
    "replication_pad2d": lambda t, x, p: pad(t, x, p, "replicate"),
    "replication_pad3d": lambda t, x, p: pad(t, x, p, "replicate"),
    "_pad_circular": lambda t, x, p: pad(t, x, p, "circular"),
    "native_group_norm": lambda t, x, w, b, n, c, hw, group, eps: (
        group_norm(t, x, group, w, b, eps), _Unavailable("native_group_norm mean"),
        _Unavailable("native_group_norm rstd")),
    "copy": lambda t, x, src, non_blocking=False: copy_(t, x, src),
}
# torch's other names of the same functions (torch.multiply is torch.mul, ...)
TORCH_OPS.update({alias: TORCH_OPS[name] for alias, name in (
    ("multiply", "mul"), ("subtract", "sub"), ("divide", "div"), ("true_divide", "div"), ("greater", "gt"),
    ("greater_equal", "ge"), ("less", "lt"), ("less_equal", "le"), ("not_equal", "ne"), ("absolute", "abs"),
    ("negative", "neg"), ("clip", "clamp"), ("fix", "trunc"), ("swapaxes", "transpose"), ("swapdims", "transpose"),
    ("concatenate", "cat"), ("arctan", "atan"), ("arcsin", "asin"), ("arccos", "acos"), ("arcsinh", "asinh"),
    ("arccosh", "acosh"), ("arctanh", "atanh"), ("arctan2", "atan2"))})


def scalar_math(name: str) -> Callable:
    """``math.sqrt`` & co. on a static size (a symbolic one has no value at import time)."""
    fn = getattr(math, name)

    def run(t, v):
        s = static(v) if not isinstance(v, float) else v
        if s is None:
            raise UnsupportedNodeError(f"math.{name} of the symbolic size {v}")
        return fn(s)
    return run


def check_result(value, node_desc: str):
    """The value a translation returned, checked: Tensors, sizes, numbers, or (nested) tuples /
    lists of them."""
    if isinstance(value, (Tensor, int, float, bool, E.PrimExpr, _Unavailable)) or value is None:
        return value
    from .complex import ComplexTensor   # (that module imports this one)

    if isinstance(value, ComplexTensor):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(check_result(v, node_desc) for v in value)
    if isinstance(value, rx.Expr):
        sinfo = value.struct_info
        if isinstance(sinfo, (TensorStructInfo, TupleStructInfo)):
            from ..nn.core import wrap_nested

            return wrap_nested(value, "lv") if not isinstance(value, rx.Var) or isinstance(
                sinfo, TupleStructInfo) else Tensor(_expr=value)
    raise FrontendError(f"{node_desc}: the translation returned {type(value).__name__}, not a tensor value")
