"""``from_exported_program``: a ``torch.export.ExportedProgram`` -> an IRModule (TVM's
``relax.frontend.torch.from_exported_program``).

An exported program is an fx graph of ATen ops whose placeholders are, in order, the lifted
parameters / buffers / constants and the user inputs (``ep.graph_signature.input_specs`` says which).
Parameters and buffers (``ep.state_dict``) and lifted constants (``ep.constants``) are bound as
named constants (PyTorch's dotted names, ``.`` -> ``_``); the user inputs become ``main``'s inputs with
the shapes and dtypes of their ``meta["val"]``. A dim made dynamic with ``torch.export.Dim("batch")``
is a SymInt there; it becomes the symbolic dim ``batch`` (the Dim's name, or the SymInt's own name,
``s0``, when the program does not record it). ATen ops are translated by their packet name
(``aten.add.Tensor`` -> ``add``) with the torch-semantics translations of
:mod:`builder.frontend.torch_ops`; each result is cast to the dtype ``meta["val"]`` says, so type
promotion matches PyTorch's.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.struct_info import TensorStructInfo
from ..nn.core import Tensor
from . import torch_ops as C
from .dtypes import as_dtype, dtype_or, torch_dtype
from .errors import describe_node, FrontendError, target_name, UnsupportedNodeError
from .translator import GraphTranslator, inplace_base
from .complex import COMPLEX_OPS, ComplexTensor, is_complex_dtype

__all__ = ["ATEN_OPS", "from_exported_program"]


def _skip(t, *args, **kwargs):
    return None


def _sym_size(t, x, dim):
    return C.size(t, x, dim)


def _layer_norm(t, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=None):
    return C.layer_norm(t, x, normalized_shape, weight, bias, eps)


def _scalar_tensor(t, value, *, dtype=None, **_):
    return C.to_tensor(value, dtype_or(dtype, "float32"))


def _full(t, size, fill_value, *, dtype=None, **_):
    return C.full(t, size, fill_value, dtype=dtype)


def _native_dropout(t, x, p, train):
    return x, C.Unavailable("dropout mask")


# ATen packet name -> translation (arguments as ATen gives them: same order as the torch function for
# almost every op; the exceptions are written out above)
ATEN_OPS: dict[str, Callable] = {
    **{name: fn for name, fn in C.TORCH_OPS.items()},
    "embedding": C.aten_embedding, "_softmax": C.aten_softmax, "_log_softmax": lambda t, x, d, h=False:
        C.log_softmax(t, x, d), "native_layer_norm": C.native_layer_norm, "layer_norm": _layer_norm,
    "sym_size": _sym_size, "_unique2": C.aten_unique2, "_unsafe_view": C.view, "_to_copy": C.to, "alias": C.contiguous,
    "lift_fresh_copy": C.contiguous, "scalar_tensor": _scalar_tensor, "full": _full,
    "native_dropout": _native_dropout, "convolution": C.convolution, "__and__": C.bitwise_and,
    "__or__": C.bitwise_or, "index": C.index,
    "max_pool1d_with_indices": C.max_pool_with_indices(1), "max_pool2d_with_indices": C.max_pool_with_indices(2),
    "_adaptive_avg_pool2d": C.adaptive_avg_pool(2), "batch_norm": C.aten_batch_norm,
    "adaptive_max_pool1d": C.aten_adaptive_max_pool(1), "adaptive_max_pool2d": C.aten_adaptive_max_pool(2),
    "native_batch_norm": C.aten_native_batch_norm,
    "_native_batch_norm_legit_no_training": C.aten_batch_norm_no_training,
    "mT": lambda t, x: C.transpose(t, x, -2, -1), "copy_": C.copy_,
    "mH": lambda t, x: C.transpose(t, x, -2, -1),   # (real tensors: the conjugate transpose is the transpose)
    **{k: C.aten_regression_loss(k) for k in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")},
    "instance_norm": lambda t, x, w, b, rm, rv, use_input_stats, momentum, eps, cudnn=None: C.instance_norm(
        t, x, rm, rv, w, b, use_input_stats, momentum, eps),
    "upsample_nearest2d": C.upsample("nearest", False), "_upsample_nearest_exact2d": C.upsample("nearest-exact", False),
    "upsample_bilinear2d": C.upsample("bilinear", True), "upsample_bicubic2d": C.upsample("bicubic", True),
    "_assert_tensor_metadata": _skip, "_assert_scalar": _skip, "sym_constrain_range_for_size": _skip,
    "sym_constrain_range": _skip, "_assert_async": _skip,
}
ATEN_OPS = {k: v for k, v in ATEN_OPS.items() if v is not None}

def _sym_compare(py, prim):
    """A comparison of symbolic ints (torch.export's range checks on a data-dependent size, ``u0 >= 0``, read
    by ``_assert_scalar`` only): a bool of ints, else the symbolic comparison ``prim(a, b)``."""
    def compare(t, a, b):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return py(a, b)
        if isinstance(a, (int, E.PrimExpr)) and isinstance(b, (int, E.PrimExpr)):
            return prim(E.convert(a), E.convert(b))
        raise UnsupportedNodeError(f"a comparison of {type(a).__name__} and {type(b).__name__}")
    return compare


_PY_OPS: dict[Any, Callable] = {
    operator.add: C.add, operator.sub: C.sub, operator.mul: C.mul, operator.truediv: C.div,
    operator.floordiv: C.floordiv, operator.mod: C.mod, operator.neg: C.neg, operator.getitem: C.getitem,
    operator.pow: C.pow_,
    **{py: _sym_compare(py, prim) for py, prim in ((operator.ge, E.GE), (operator.le, E.LE), (operator.gt, E.GT),
                                                    (operator.lt, E.LT), (operator.eq, E.EQ), (operator.ne, E.NE))},
}


# ATen views an in-place op may write through: packet name -> the view's description from its arguments
_VIEWS = {
    "slice": lambda dim=0, start=None, end=None, step=1: ("slice", dim, start, end, step),
    "select": lambda dim, index: ("select", dim, index),
    "narrow": lambda dim, start, length: ("slice", dim, start, start + length, 1),
}


def _packet(target) -> str | None:
    name = getattr(target, "_overloadpacket", None)
    if name is not None:
        qual = str(name)            # "aten.add"
        ns, _, op = qual.partition(".")
        return op if ns == "aten" else None
    return None


def _dim_names(ep) -> dict:
    """Sympy symbol -> the ``torch.export.Dim`` name it was made from (when the shape env knows)."""
    names: dict = {}
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        shape = getattr(val, "shape", None)
        if shape is None:
            continue
        for d in shape:
            sym = getattr(d, "node", None)
            env = getattr(sym, "shape_env", None)
            if env is None:
                continue
            debug = getattr(env, "source_name_to_debug_name", {}) or {}
            for s, sources in getattr(env, "var_to_sources", {}).items():
                for src in sources:
                    n = src.name() if callable(getattr(src, "name", None)) else getattr(src, "name", None)
                    if n in debug and s not in names:
                        names[s] = debug[n]
            return names
    return names


def _sym_to_prim(t: GraphTranslator, expr, names: dict):
    """A SymInt's sympy expression as an int64 PrimExpr of our symbolic dims."""
    import sympy

    if isinstance(expr, sympy.Integer) or (hasattr(expr, "is_Integer") and expr.is_Integer):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return t.dim(names.get(expr, str(expr)))
    if isinstance(expr, sympy.Add):
        out = 0
        for a in expr.args:
            out = out + _sym_to_prim(t, a, names)
        return out
    if isinstance(expr, sympy.Mul):
        out = 1
        for a in expr.args:
            out = out * _sym_to_prim(t, a, names)
        return out
    raise FrontendError(f"the symbolic size {expr} is not supported (only sums and products of dims)")


def _dims(t: GraphTranslator, shape, names: dict) -> list:
    out = []
    for d in shape:
        node = getattr(d, "node", None)
        if node is not None and hasattr(node, "expr"):
            v = _sym_to_prim(t, node.expr, names)
            out.append(E.simplify(v) if isinstance(v, E.PrimExpr) and not isinstance(v, E.Var) else v)
        else:
            out.append(int(d))
    return out


def from_exported_program(exported_program, *, run_decompositions: bool = False) -> rx.IRModule:
    """Translate ``exported_program`` (from ``torch.export.export(model, args, dynamic_shapes=...)``)
    into an IRModule whose ``main`` takes the user inputs in order and returns the user outputs (one
    tensor, or a tuple of them), the weights bound inside as named constants.

    ``run_decompositions``: decompose to core ATen first (``ep.run_decompositions()``; the default
    keeps the higher-level ops export gives, ``aten.linear`` / ``aten.layer_norm`` /
    ``aten.scaled_dot_product_attention``, which map to our fused ops directly). Either way an ATen op
    without a translation of its own is decomposed by PyTorch's decomposition for it, and a submodule
    called through ``wrap_with_set_grad_enabled`` (a ``@torch.no_grad()`` forward) is inlined
    (:func:`_decompose_what_we_lack`).

    Raises :class:`~builder.frontend.UnsupportedNodeError` for an ATen op without a translation (nor a
    decomposition into ops that have one) and
    :class:`~builder.frontend.FrontendError` for a node whose translation fails (both name the node,
    its target and its Python source line), FrontendError for a non-tensor user input or an output
    that mutates a buffer, TypeError for something that is not an ExportedProgram.
    """
    import torch

    ep = exported_program
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TypeError(f"from_exported_program: expected a torch.export.ExportedProgram, got {type(ep).__name__}")
    original = ep
    ep = ep.run_decompositions() if run_decompositions else _decompose_what_we_lack(ep)
    refused: set = set()
    while True:
        try:
            return _translate_program(ep)
        except _Refused as r:    # a translation refused these arguments: PyTorch's decomposition, once per op
            if r.target in refused:
                raise r.error from None
            refused.add(r.target)
            ep = ep.run_decompositions({r.target: r.decomposition})
        except FrontendError:
            if ep is original or run_decompositions:
                raise
            # what decomposing the ops we lack gave cannot be translated either: the error about the program as
            # exported names what the user wrote (the op without a translation) rather than its decomposition
            try:
                _translate_program(original)
            except _Refused as r:
                raise r.error from None
            raise


class _Refused(Exception):
    """A translation refused a node (UnsupportedNodeError) whose ATen op PyTorch can decompose."""

    def __init__(self, target, decomposition, error: UnsupportedNodeError) -> None:
        super().__init__(str(target))
        self.target = target
        self.decomposition = decomposition
        self.error = error


def _translate_program(ep) -> rx.IRModule:
    """The body of :func:`from_exported_program` on a prepared program. Raises :class:`_Refused` when a
    translation raises UnsupportedNodeError for an op with a PyTorch decomposition not yet applied."""
    import torch

    sig = ep.graph_signature
    kinds = {spec.arg.name: spec for spec in sig.input_specs}
    bad_out = [s for s in sig.output_specs if s.kind.name not in ("USER_OUTPUT",)]
    if bad_out:
        raise FrontendError(f"from_exported_program: outputs {[s.arg.name for s in bad_out]} mutate buffers or "
                            "inputs (export the model in eval mode without in-place updates)")
    state = ep.state_dict
    constants = getattr(ep, "constants", {}) or {}
    names = _dim_names(ep)

    t = GraphTranslator()
    params: list[rx.Var] = []
    out = None
    with t.bb.function("main"):
        with t.bb.dataflow():
            for node in ep.graph.nodes:
                if node.op == "placeholder":
                    spec = kinds.get(node.name)
                    kind = spec.kind.name if spec is not None else "USER_INPUT"
                    if kind == "USER_INPUT":
                        val = node.meta.get("val")
                        if val is None or isinstance(val, (bool, int, float, str)):
                            t.env[node] = val      # specialized by export (use_cache=False): a constant
                            continue
                        if not hasattr(val, "shape"):
                            raise FrontendError(f"{describe_node(node)}: user input {val!r} is not a tensor "
                                                "(only tensor inputs are supported)")
                        if is_complex_dtype(val.dtype):
                            raise UnsupportedNodeError(f"{describe_node(node)}: complex inputs are not supported "
                                                       "(pass torch.view_as_real(z) and view it as complex inside)")
                        shape = _dims(t, val.shape, names)
                        var = rx.Var(node.name, TensorStructInfo(shape, torch_dtype(val.dtype)))
                        params.append(var)
                        t.env[node] = Tensor(_expr=var)
                        continue
                    target = spec.target
                    value = state.get(target) if target in state else constants.get(target)
                    if value is None:
                        raise FrontendError(f"{describe_node(node)}: no data for the {kind.lower()} '{target}'")
                    if not hasattr(value, "detach"):
                        t.env[node] = value
                        continue
                    t.env[node] = _Lazy(target, value)
                elif node.op == "call_function":
                    fn, what = _translation(node)
                    if fn is None:
                        raise t.unsupported(node, what)
                    _resolve_lazy(t, node)
                    try:
                        value = _match_dtype(t.apply(node, fn, what), node)
                    except UnsupportedNodeError as err:
                        if isinstance(node.target, torch._ops.OpOverload):
                            table = torch.export.default_decompositions()
                            if node.target in table:
                                raise _Refused(node.target, table[node.target], err) from None
                        raise
                    t.env[node] = value
                    name = _packet(node.target)
                    if name in _VIEWS:
                        t.record_view(node, _VIEWS[name](*node.args[1:]))
                    elif name is not None and (name == "copy_" or inplace_base(name)):
                        t.rebind_inplace(node, value)
                elif node.op == "output":
                    outs = t.value(node.args[0])
                    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                    if any(isinstance(o, ComplexTensor) for o in outs):
                        raise UnsupportedNodeError("complex program outputs are not supported (return "
                                                   "torch.view_as_real(z) instead)")
                    out = outs[0] if len(outs) == 1 else tuple(outs)
                elif node.op == "get_attr":
                    raise t.unsupported(node, hint="submodules (control flow) are not supported")
                else:
                    raise t.unsupported(node)
            gv = t.bb.emit_output(t.output_expr(out))
        t.bb.emit_func_output(gv, params=params)
    return t.bb.get()


#: Rounds of :func:`_decompose_what_we_lack` (a decomposition may give ops that need one in turn).
MAX_DECOMPOSITION_ROUNDS = 4


def _decompose_what_we_lack(ep):
    """``ep`` with the ATen ops that have no translation here replaced by PyTorch's decompositions of them
    (``torch.export.default_decompositions()``, only those ops: ``ep.run_decompositions(table)`` keeps every
    other op as export gave it), repeated while the decompositions bring new such ops (at most
    :data:`MAX_DECOMPOSITION_ROUNDS`); a graph with submodules (``get_attr``: ``wrap_with_set_grad_enabled``
    around a ``@torch.no_grad()`` forward) goes through ``run_decompositions`` too, which inlines them.
    Ops PyTorch cannot decompose stay, and translating them raises as before."""
    import torch

    tried: set = set()
    for _ in range(MAX_DECOMPOSITION_ROUNDS):
        nodes = list(ep.graph.nodes)
        lacking = {n.target for n in nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                   and _translation(n)[0] is None} - tried
        submodules = any(n.op == "get_attr" and isinstance(getattr(ep.graph_module, str(n.target), None),
                                                            torch.fx.GraphModule) for n in nodes)
        if not lacking and not submodules:
            return ep
        table = torch.export.default_decompositions()
        chosen = {op: table[op] for op in lacking if op in table}
        if not chosen and not submodules:
            return ep
        tried |= lacking
        before = [(n.op, n.target) for n in nodes]
        ep = ep.run_decompositions(chosen)
        if [(n.op, n.target) for n in ep.graph.nodes] == before:
            return ep
    return ep


class _Lazy:
    """A weight placeholder bound (as a named constant) when a node first reads it."""

    def __init__(self, name: str, value) -> None:
        self.name = name
        self.value = value


def _resolve_lazy(t: GraphTranslator, node) -> None:
    import torch

    for a in node.all_input_nodes:
        v = t.env.get(a)
        if isinstance(v, _Lazy):
            if v.value.is_complex():    # bound as its real view (builder.frontend.complex)
                t.env[a] = ComplexTensor(t.weight(v.name, torch.view_as_real(v.value.detach()).contiguous()))
            else:
                t.env[a] = t.weight(v.name, v.value)


def _complex_node(node) -> bool:
    """Whether ``node`` makes or reads a complex tensor (its ``meta["val"]`` or an input's is complex)."""
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    return any(is_complex_dtype(getattr(v, "dtype", None)) for v in vals)


def _translation(node) -> tuple[Callable | None, str]:
    target = node.target
    if target in _PY_OPS:
        return _PY_OPS[target], f"operator.{target.__name__}"
    name = _packet(target)
    if name is None:
        return None, target_name(target)
    if _complex_node(node):      # complex values, carried as their real pairs (builder.frontend.complex)
        base = name if name in COMPLEX_OPS else inplace_base(name)
        return COMPLEX_OPS.get(base or name), f"{target} (complex)"
    fn = ATEN_OPS.get(name)
    if fn is None and inplace_base(name):
        fn = ATEN_OPS.get(inplace_base(name))     # add_ -> add; the caller rebinds the argument
    return fn, str(target)


def _match_dtype(value, node):
    """Cast a tensor result to the dtype of the node's ``meta["val"]`` (PyTorch's type promotion)."""
    val = node.meta.get("val")
    if isinstance(value, ComplexTensor):
        if not is_complex_dtype(getattr(val, "dtype", None)) or value.ndim != len(val.shape):
            raise FrontendError(f"{describe_node(node)}: translated to a complex value of {value.ndim} dims, "
                                f"PyTorch has {getattr(val, 'dtype', None)} {list(getattr(val, 'shape', []))}")
        return value
    if isinstance(value, Tensor) and hasattr(val, "dtype") and hasattr(val, "shape"):
        try:
            want = torch_dtype(val.dtype)
        except FrontendError:
            return value
        if value.ndim != len(val.shape):
            raise FrontendError(f"{describe_node(node)}: translated to {value.ndim} dims, PyTorch has "
                                f"{len(val.shape)}")
        return as_dtype(value, want)
    return value
