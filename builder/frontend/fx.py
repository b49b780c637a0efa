"""``from_fx``: a ``torch.fx.GraphModule`` -> an IRModule (the MLC course's "Integration with Machine
Learning Frameworks", TVM's ``relax.frontend.torch.from_fx``).

The graph's nodes are translated in order: ``placeholder`` -> an input of ``main`` (shape from
``input_shapes``, a string dim is a symbolic dim of that name, one variable per name), ``get_attr``
-> the attribute's tensor bound as a named constant (``self.weight`` -> ``weight``), ``call_function``
/ ``call_method`` / ``call_module`` -> the translation of the target (the user's maps first, then
the defaults of this module), ``output`` -> ``main``'s result. Module parameters are bound as named
constants too (``linear0.weight`` -> ``linear0_weight``), so ``main`` takes the traced inputs only.

User maps have the course's signatures: ``call_function_map[target](bb, node_map, node)`` and
``call_module_map[module_type](bb, node_map, node, module)``; ``node_map[n]`` is the graph-level value
(an ``rx.Expr``) of node ``n``; the function returns the graph-level value of ``node`` (from
``bb.emit_te`` / ``bb.emit`` or an ``rx.Expr`` to bind). A ``call_method`` node is looked up in
``call_function_map`` by its method name (``"view"``).
"""
from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..ir import relax as rx
from ..ir.struct_info import TensorStructInfo
from ..nn import op
from ..nn.core import Tensor
from . import torch_ops as C
from .dtypes import as_dtype, torch_dtype
from .errors import FrontendError, FX_TRACE_HINT, UnsupportedNodeError
from .translator import GraphTranslator, inplace_base

__all__ = ["default_call_function_map", "default_call_method_map", "default_call_module_map", "from_fx"]


class _NodeMap(Mapping):
    """``node -> rx.Expr`` view of the translated values for user maps (the course's ``node_map``)."""

    def __init__(self, env: dict) -> None:
        self._env = env

    def __getitem__(self, node):
        v = self._env[node]
        if isinstance(v, Tensor):
            return v._expr
        if isinstance(v, tuple) and all(isinstance(f, Tensor) for f in v):
            return tuple(f._expr for f in v)
        return v

    def __iter__(self):
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)


def _user_function(fn: Callable) -> Callable:
    def run(t: GraphTranslator, *_args, **_kwargs):
        return fn(t.bb, _NodeMap(t.env), t.node)
    return run


def _user_module(fn: Callable, module) -> Callable:
    def run(t: GraphTranslator, *_args, **_kwargs):
        return fn(t.bb, _NodeMap(t.env), t.node, module)
    return run


def _shape_dtype_pair(entry):
    """``(shape, dtype)`` when ``entry`` is TVM's input-info pair (a sequence of dims and a dtype name
    or ``torch.dtype``), else None."""
    if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[0], (list, tuple)):
        return None
    dtype = entry[1]
    if isinstance(dtype, str) or type(dtype).__name__ == "dtype":
        return list(entry[0]), dtype
    return None


def from_fx(fx_module, input_shapes: Sequence[Sequence[int | str]], call_function_map: dict | None = None,
            call_module_map: dict | None = None, input_dtypes: Sequence | None = None) -> rx.IRModule:
    """Translate ``fx_module`` into an IRModule with one function ``main``.

    ``fx_module``: a ``torch.fx.GraphModule`` (``torch.fx.symbolic_trace(model)``); a plain
    ``torch.nn.Module`` is traced here (a ``torch.nn`` module itself, such as a
    ``TransformerEncoderLayer``, is traced as the only child of a wrapper, so it is translated by its
    module map entry), recording stack traces so that errors name the model's source lines (a graph
    from plain ``torch.fx.symbolic_trace`` has none). Put the model in eval mode first: dropout is the identity here.
    ``input_shapes``: one shape per placeholder, in order; ints or strings (symbolic dims: the same
    name is the same dim). ``input_dtypes``: one dtype per placeholder (``"float32"`` or
    ``torch.float32``), float32 by default. TVM's form, one ``(shape, dtype)`` pair per placeholder
    (``from_fx(gm, [((1, 3, 224, 224), "float32")])``), is accepted too (without ``input_dtypes``).
    ``call_function_map`` / ``call_module_map``: user
    translations (the course's signatures, see the module docstring); they take precedence over the
    default maps (:func:`default_call_function_map`, :func:`default_call_method_map`,
    :func:`default_call_module_map`).

    Returns an IRModule whose ``main(*inputs)`` returns the graph's output (a tensor or a tuple of
    tensors), with the weights bound inside as named constants.

    Raises :class:`~builder.frontend.UnsupportedNodeError` for a node without a translation and
    :class:`~builder.frontend.FrontendError` for one whose translation fails (both name the node,
    its op / target and its Python source line), FrontendError when the number of input shapes /
    dtypes does not match the placeholders.
    """
    import torch
    from torch import fx

    input_shapes = list(input_shapes)
    pairs = [_shape_dtype_pair(s) for s in input_shapes]
    if input_shapes and all(p is not None for p in pairs):
        if input_dtypes is not None:
            raise FrontendError("from_fx: give either (shape, dtype) pairs or input_shapes with input_dtypes")
        input_shapes, input_dtypes = [p[0] for p in pairs], [p[1] for p in pairs]
    if not isinstance(fx_module, fx.GraphModule):
        if not isinstance(fx_module, torch.nn.Module):
            raise TypeError(f"from_fx: expected a torch.fx.GraphModule or torch.nn.Module, got "
                            f"{type(fx_module).__name__}")
        fx_module = _trace(fx_module, len(input_shapes))
    placeholders = [n for n in fx_module.graph.nodes if n.op == "placeholder"]
    if len(input_shapes) != len(placeholders):
        raise FrontendError(f"from_fx: {len(input_shapes)} input shapes for {len(placeholders)} placeholders "
                            f"({', '.join(n.name for n in placeholders)})")
    if input_dtypes is None:
        input_dtypes = ["float32"] * len(placeholders)
    input_dtypes = [torch_dtype(d) for d in input_dtypes]
    if len(input_dtypes) != len(placeholders):
        raise FrontendError(f"from_fx: {len(input_dtypes)} input dtypes for {len(placeholders)} placeholders")

    user_functions = dict(call_function_map or {})
    user_modules = dict(call_module_map or {})
    functions = default_call_function_map()
    methods = default_call_method_map()
    modules = default_call_module_map()
    named_modules = dict(fx_module.named_modules())

    t = GraphTranslator()
    t.trace_hint = FX_TRACE_HINT
    for name, p in fx_module.named_parameters():
        t.add_weight(name, lambda p=p: p)
    for name, b in fx_module.named_buffers():
        t.add_weight(name, lambda b=b: b)
    params: list[rx.Var] = []
    out = None
    with t.bb.function("main"):
        with t.bb.dataflow():
            for node in fx_module.graph.nodes:
                if node.op == "placeholder":
                    i = len(params)
                    shape = [t.dim(d) if isinstance(d, str) else int(d) for d in input_shapes[i]]
                    var = rx.Var(node.target, TensorStructInfo(shape, input_dtypes[i]))
                    params.append(var)
                    t.env[node] = Tensor(_expr=var)
                elif node.op == "get_attr":
                    t.env[node] = t.apply(node, lambda tt, target=node.target: _get_attr(tt, fx_module, target),
                                         "get_attr")
                elif node.op == "call_function":
                    if node.target in user_functions:
                        t.env[node] = t.apply(node, _user_function(user_functions[node.target]), None)
                        continue
                    fn = functions.get(node.target)
                    if fn is None:
                        raise t.unsupported(node, hint="add it to call_function_map")
                    t.env[node] = t.apply(node, fn)
                    if node.target is operator.getitem and isinstance(t.env[node], Tensor):
                        base = t.env.get(node.args[0])
                        view = C.key_view(base.ndim, t.value(node.args[1])) if isinstance(base, Tensor) else None
                        if view is not None:
                            t.record_view(node, view)       # x[:, 0].fill_(v) writes through to x
                    if node.target in _INPLACE_OPERATORS:
                        t.rebind_inplace(node, t.env[node])      # x += y mutates x for its other users
                elif node.op == "call_method":
                    if node.target in user_functions:
                        t.env[node] = t.apply(node, _user_function(user_functions[node.target]), None)
                        continue
                    fn = methods.get(node.target)
                    base = inplace_base(node.target)
                    if fn is None and base is not None:
                        fn = methods.get(base)      # x.mul_(y) as x.mul(y), then x is the result
                    if fn is None:
                        raise t.unsupported(node, f"Tensor.{node.target}",
                                            hint="add the method name to call_function_map")
                    t.env[node] = t.apply(node, fn, f"Tensor.{node.target}")
                    if base is not None:
                        t.rebind_inplace(node, t.env[node])
                elif node.op == "call_module":
                    module = named_modules[node.target]
                    what = f"{type(module).__module__}.{type(module).__name__}"
                    user = _lookup_type(user_modules, type(module))
                    if user is not None:
                        t.env[node] = t.apply(node, _user_module(user, module), what)
                        continue
                    fn = _lookup_type(modules, type(module))
                    if fn is None:
                        raise t.unsupported(node, what, hint="add its type to call_module_map")
                    t.env[node] = t.apply(node, fn, what, extra=(module, node.target))
                elif node.op == "output":
                    out = t.value(node.args[0])
                else:
                    raise t.unsupported(node)
            gv = t.bb.emit_output(t.output_expr(out))
        t.bb.emit_func_output(gv, params=params)
    return t.bb.get()


def _lookup_type(table: dict, cls: type):
    for base in cls.__mro__:
        if base in table:
            return table[base]
    return None


#: A wrapper's ``forward`` per number of inputs: torch.fx makes one placeholder per named parameter (a
#: ``*args`` would be one placeholder holding a tuple, which the inner call cannot unpack).
_WRAPPER_FORWARDS = (
    lambda self, a: self.inner(a),
    lambda self, a, b: self.inner(a, b),
    lambda self, a, b, c: self.inner(a, b, c),
    lambda self, a, b, c, d: self.inner(a, b, c, d),
    lambda self, a, b, c, d, e: self.inner(a, b, c, d, e),
    lambda self, a, b, c, d, e, f: self.inner(a, b, c, d, e, f),
)


def _trace(module, num_inputs: int):
    """``module`` traced by torch.fx into a GraphModule; a ``torch.nn`` module itself (a leaf for fx) is
    wrapped first, its ``num_inputs`` inputs passed positionally. Raises FrontendError for a leaf with more
    inputs than :data:`_WRAPPER_FORWARDS` covers."""
    import torch
    from torch import fx

    tracer = fx.Tracer()
    if tracer.is_leaf_module(module, ""):
        if not 1 <= num_inputs <= len(_WRAPPER_FORWARDS):
            raise FrontendError(f"from_fx: a bare {type(module).__name__} with {num_inputs} inputs: wrap it in a "
                                "module of your own (1 to 6 inputs are wrapped here)")
        wrapper = type("_Wrap", (torch.nn.Module,), {"forward": _WRAPPER_FORWARDS[num_inputs - 1]})()
        wrapper.inner = module
        module = wrapper
    tracer = fx.Tracer()
    tracer.record_stack_traces = True     # errors then name the model's source line
    graph = tracer.trace(module)
    return fx.GraphModule(tracer.root, graph, type(module).__name__)


def _get_attr(t: GraphTranslator, gm, target: str):
    obj = gm
    for i, atom in enumerate(target.split(".")):
        if not hasattr(obj, atom):
            raise FrontendError(f"the module has no attribute '{'.'.join(target.split('.')[:i + 1])}'")
        obj = getattr(obj, atom)
    if type(obj).__name__ in ("Tensor", "Parameter") or hasattr(obj, "detach"):
        return t.weight(target, obj)
    return obj


# -- default maps -----------------------------------------------------------------------------------

def _getattr(t, obj, name):
    if isinstance(obj, Tensor):
        if name == "shape":
            return list(obj.shape)
        if name == "dtype":
            return obj.dtype
        if name == "ndim":
            return obj.ndim
        if name == "T":
            return C.numpy_t(t, obj)
        if name in ("mT", "mH"):   # (real tensors: the conjugate transpose is the transpose)
            return C.transpose(t, obj, -2, -1)
        if name == "device":
            return "cpu"
        raise UnsupportedNodeError(f"Tensor attribute '{name}'")
    return getattr(obj, name)


_INPLACE_OPERATORS = (operator.iadd, operator.imul, operator.isub, operator.itruediv)


def default_call_function_map() -> dict:
    """The default translations of ``call_function`` targets (torch functions, ``torch.nn.functional``,
    Python operators, ``math``), each ``fn(t, *args, **kwargs)`` (see :mod:`builder.frontend.torch_ops`)."""
    import torch
    import torch.nn.functional as F

    o = C.TORCH_OPS
    m: dict[Any, Callable] = {
        operator.add: o["add"], operator.sub: o["sub"], operator.mul: o["mul"], operator.truediv: o["div"],
        operator.floordiv: o["floordiv"], operator.mod: o["mod"], operator.pow: o["pow"], operator.neg: o["neg"],
        operator.matmul: o["matmul"], operator.getitem: o["getitem"], operator.eq: o["eq"], operator.ne: o["ne"],
        operator.lt: o["lt"], operator.le: o["le"], operator.gt: o["gt"], operator.ge: o["ge"],
        operator.and_: o["bitwise_and"], operator.or_: o["bitwise_or"], operator.invert: o["bitwise_not"],
        operator.iadd: o["add"], operator.imul: o["mul"], operator.isub: o["sub"], operator.itruediv: o["div"],
        builtins.getattr: _getattr,
        math.sqrt: C.scalar_math("sqrt"), math.log: C.scalar_math("log"), math.exp: C.scalar_math("exp"),
        F.linear: o["linear"], F.embedding: o["embedding"], F.layer_norm: o["layer_norm"],
        F.group_norm: o["group_norm"], F.conv1d: o["conv1d"], F.conv2d: o["conv2d"],
        F.conv_transpose1d: o["conv_transpose1d"], F.conv_transpose2d: o["conv_transpose2d"],
        F.max_pool1d: o["max_pool1d"], F.max_pool2d: o["max_pool2d"], F.avg_pool1d: o["avg_pool1d"],
        F.avg_pool2d: o["avg_pool2d"], F.adaptive_avg_pool1d: o["adaptive_avg_pool1d"],
        F.adaptive_avg_pool2d: o["adaptive_avg_pool2d"], F.batch_norm: o["batch_norm"],
        F.adaptive_max_pool1d: o["adaptive_max_pool1d"], F.adaptive_max_pool2d: o["adaptive_max_pool2d"],
        F.bilinear: o["bilinear"], torch.meshgrid: o["meshgrid"], torch.frac: o["frac"],
        torch.kthvalue: o["kthvalue"], torch.median: o["median"],
        F.hardtanh: o["hardtanh"], F.relu6: o["relu6"], F.hardsigmoid: o["hardsigmoid"],
        F.hardswish: o["hardswish"], F.leaky_relu: o["leaky_relu"], F.interpolate: o["interpolate"],
        F.elu: o["elu"], F.selu: o["selu"], F.celu: o["celu"], F.softplus: o["softplus"], F.softsign: o["softsign"],
        F.mish: o["mish"], F.prelu: o["prelu"], F.glu: o["glu"], F.instance_norm: o["instance_norm"],
        F.pixel_shuffle: o["pixel_shuffle"], F.pixel_unshuffle: o["pixel_unshuffle"],
        F.cosine_similarity: o["cosine_similarity"], F.logsigmoid: o["log_sigmoid"], F.one_hot: o["one_hot"],
        F.hardshrink: o["hardshrink"], F.softshrink: o["softshrink"], F.threshold: o["threshold"], F.rrelu: o["rrelu"],
        torch.linalg.vector_norm: o["linalg_vector_norm"], F.normalize: o["normalize"], F.softmin: o["softmin"],
        F.tanhshrink: o["tanhshrink"],
        F.relu: o["relu"], F.gelu: o["gelu"], F.silu: o["silu"], F.dropout: o["dropout"],
        F.softmax: o["softmax"], F.log_softmax: o["log_softmax"], F.pad: o["pad"], F.unfold: o["im2col"],
        F.scaled_dot_product_attention: o["scaled_dot_product_attention"],
        F.sigmoid: o["sigmoid"], F.tanh: o["tanh"],
        # eval-mode dropouts are the identity; the in-place activations compute what the others do
        F.dropout1d: o["dropout"], F.dropout2d: o["dropout"], F.dropout3d: o["dropout"], F.alpha_dropout: o["dropout"],
        F.feature_alpha_dropout: o["dropout"], F.relu_: o["relu"], F.elu_: o["elu"], F.leaky_relu_: o["leaky_relu"],
        F.hardtanh_: o["hardtanh"], F.selu_: o["selu"], F.celu_: o["celu"], F.threshold_: o["threshold"],
        F.rrelu_: o["rrelu"],
        # the deprecated upsample functions: interpolate (upsample_bilinear with align_corners=True, as PyTorch)
        F.upsample: o["interpolate"], F.upsample_nearest: lambda t, x, size=None, scale_factor=None: o["interpolate"](
            t, x, size, scale_factor, "nearest"),
        F.upsample_bilinear: lambda t, x, size=None, scale_factor=None: o["interpolate"](
            t, x, size, scale_factor, "bilinear", True),
        F.channel_shuffle: o["channel_shuffle"], F.native_channel_shuffle: o["channel_shuffle"],
        F.pairwise_distance: o["pairwise_distance"], F.mse_loss: o["mse_loss"], F.l1_loss: o["l1_loss"],
        F.smooth_l1_loss: o["smooth_l1_loss"], F.huber_loss: o["huber_loss"],
        torch.sigmoid: o["sigmoid"], torch.tanh: o["tanh"], torch.relu: o["relu"],
    }
    if hasattr(F, "rms_norm"):
        m[F.rms_norm] = o["rms_norm"]
    for name in ("add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "rsqrt", "erf", "sin", "cos",
                 "abs", "softmax", "log_softmax", "mean", "sum", "prod", "amax", "amin", "var", "std", "eq", "ne",
                 "lt", "le", "gt", "ge", "maximum", "minimum", "clamp", "where", "masked_fill", "logical_and",
                 "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_not", "matmul", "mm", "bmm",
                 "addmm", "baddbmm", "embedding", "layer_norm", "group_norm", "conv1d", "conv2d", "conv_transpose1d",
                 "conv_transpose2d", "cumsum", "cumprod",
                 "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "flatten", "unflatten",
                 "broadcast_to", "cat", "concat", "stack", "split", "chunk", "unbind", "narrow", "select",
                 "index_select", "numel", "arange", "full", "ones", "zeros", "full_like", "ones_like",
                 "zeros_like", "tril", "triu", "dropout", "rsub", "max", "min", "argmax", "argmin", "floor", "ceil",
                 "round", "trunc", "sign", "floor_divide", "remainder", "tile", "repeat_interleave", "clamp_min",
                 "clamp_max", "gather", "take_along_dim", "einsum", "flip", "roll", "logsumexp", "outer", "ger",
                 "addcmul", "addcdiv", "lerp", "square", "reciprocal", "log1p", "expm1", "log2", "exp2", "sinh",
                 "cosh", "isnan", "isinf", "isfinite", "nan_to_num", "any", "all", "std_mean", "var_mean",
                 "cosine_similarity", "cdist", "bucketize", "sgn", "scatter", "scatter_add", "scatter_reduce", "sort",
                 "argsort", "topk", "msort", "multiply", "subtract", "divide", "greater", "greater_equal", "less",
                 "less_equal", "not_equal", "absolute", "negative", "fix", "swapaxes", "swapdims", "concatenate",
                 "empty", "empty_like", "tan", "atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2", "arctan",
                 "arcsin", "arccos", "arcsinh", "arccosh", "arctanh", "arctan2"):
        fn = getattr(torch, name, None)
        if fn is not None:
            m[fn] = o[name]
    m[torch.true_divide] = o["div"]
    m[torch.clip] = o["clamp"]
    m[torch.nn.functional.silu] = o["silu"]
    return m


def default_call_method_map() -> dict:
    """The default translations of ``call_method`` targets (``Tensor`` method names)."""
    o = C.TORCH_OPS
    m = {name: o[name] for name in (
        "add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
        "sin", "cos", "abs", "relu", "softmax", "log_softmax", "mean", "sum", "prod", "amax", "amin", "var",
        "std", "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "clamp", "masked_fill",
        "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_not",
        "matmul", "mm", "bmm", "view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze",
        "flatten", "unflatten", "expand", "expand_as", "split", "chunk", "unbind", "narrow", "select",
        "index_select", "size", "dim", "numel", "new_full", "new_ones", "new_zeros", "tril", "triu",
        "to", "type_as", "float", "half", "bfloat16", "double", "int", "long", "bool", "contiguous",
        "clone", "detach", "cumsum", "cumprod", "max", "min", "argmax", "argmin", "floor", "ceil", "round", "trunc", "sign",
        "floor_divide", "remainder", "repeat", "tile", "repeat_interleave", "clamp_min", "clamp_max", "gather", "fill",
        "take_along_dim", "flip", "roll", "logsumexp", "outer", "addcmul", "addcdiv", "lerp", "square", "reciprocal",
        "log1p", "expm1", "log2", "exp2", "sinh", "cosh", "isnan", "isinf", "isfinite", "nan_to_num", "any", "all",
        "sgn", "new_tensor", "scatter", "scatter_add", "scatter_reduce", "sort", "argsort", "topk", "msort",
        "view_as", "reshape_as", "new_empty", "zero", "unfold", "multiply", "subtract", "divide", "true_divide", "greater",
        "greater_equal", "less", "less_equal", "not_equal", "absolute", "negative", "clip", "fix", "swapaxes",
        "swapdims", "tan", "atan", "asin", "acos", "asinh", "acosh", "atanh", "atan2", "arctan", "arcsin", "arccos",
        "arcsinh", "arccosh", "arctanh", "arctan2", "frac", "kthvalue", "median")}
    m.update({"__getitem__": o["getitem"], "type": _method_type, "copy_": C.copy_,
              "where": lambda t, x, cond, other: C.where(t, cond, x, other)})
    return m


def _method_type(t, x, dtype=None, *args, **kwargs):
    if dtype is None:
        raise UnsupportedNodeError("Tensor.type() without a dtype (returns a string)")
    return as_dtype(x, torch_dtype(dtype))


# module translations: fn(t, module, path, *args, **kwargs)

def _w(t, module, path: str, name: str):
    value = getattr(module, name, None)
    if value is None:
        return None
    return t.weight(f"{path}.{name}" if path else name, value)


def _linear_module(t, m, path, x):
    return C.linear(t, x, _w(t, m, path, "weight"), _w(t, m, path, "bias"))


def _recurrent_module(cell: str):
    """``nn.LSTM`` / ``GRU`` / ``RNN`` (tanh or relu) called as a module: :func:`builder.frontend.torch_ops.nn.recurrent` with
    the module's flat weights and a zero initial state unless one is passed; ``(output, h_n)`` or, for the
    LSTM, ``(output, (h_n, c_n))`` as PyTorch returns them."""
    def translate(t, m, path, x, hx=None):
        if getattr(m, "proj_size", 0):
            raise UnsupportedNodeError(f"{type(m).__name__} with proj_size")
        run = C.recurrent("rnn_relu") if getattr(m, "nonlinearity", "tanh") == "relu" else C.recurrent(cell)
        dirs = 2 if m.bidirectional else 1
        batch = x.shape[0] if m.batch_first else x.shape[1]
        if x.ndim != 3:
            raise UnsupportedNodeError(f"{type(m).__name__} of an unbatched ({x.ndim}-d) input")
        if hx is None:
            zero = op.zeros([m.num_layers * dirs, batch, m.hidden_size], dtype=x.dtype)
            hx = (zero, zero) if cell == "lstm" else zero
        params = [_w(t, m, path, name) for name in m._flat_weights_names]
        out = run(t, x, list(hx) if cell == "lstm" else hx, params, m.bias, m.num_layers, m.dropout, m.training,
                  m.bidirectional, m.batch_first)
        return (out[0], (out[1], out[2])) if cell == "lstm" else out
    return translate


def _embedding_module(t, m, path, ids):
    if m.max_norm is not None:
        raise UnsupportedNodeError("Embedding with max_norm")
    return C.embedding(t, ids, _w(t, m, path, "weight"))


def _layer_norm_module(t, m, path, x):
    return C.layer_norm(t, x, list(m.normalized_shape), _w(t, m, path, "weight"), _w(t, m, path, "bias"), m.eps)


def _rms_norm_module(t, m, path, x):
    return C.rms_norm(t, x, list(m.normalized_shape), _w(t, m, path, "weight"), m.eps)


def _group_norm_module(t, m, path, x):
    return C.group_norm(t, x, m.num_groups, _w(t, m, path, "weight"), _w(t, m, path, "bias"), m.eps)


def _conv_module(fn):
    def run(t, m, path, x):
        if m.padding_mode != "zeros":
            raise UnsupportedNodeError(f"padding_mode={m.padding_mode!r}")
        return fn(t, x, _w(t, m, path, "weight"), _w(t, m, path, "bias"), m.stride, m.padding, m.dilation, m.groups)
    return run


def _max_pool_module(nsp: int):
    fn = C.max_pool(nsp)

    def run(t, m, path, x):
        return fn(t, x, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, m.return_indices)
    return run


def _avg_pool_module(nsp: int):
    fn = C.avg_pool(nsp)

    def run(t, m, path, x):
        return fn(t, x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad,
                  getattr(m, "divisor_override", None))
    return run


def _adaptive_avg_pool_module(nsp: int):
    fn = C.adaptive_avg_pool(nsp)

    def run(t, m, path, x):
        return fn(t, x, m.output_size)
    return run


def _batch_norm_module(t, m, path, x):
    """``torch.nn.BatchNorm1d / 2d`` in eval mode (running statistics)."""
    if m.training:
        raise UnsupportedNodeError(f"{type(m).__name__} in training mode (batch statistics); put the model in "
                                   "inference mode (Module.eval) first")
    return C.batch_norm(t, x, _w(t, m, path, "running_mean"), _w(t, m, path, "running_var"), _w(t, m, path, "weight"),
                        _w(t, m, path, "bias"), False, m.momentum, m.eps)


def _instance_norm_module(t, m, path, x):
    """``nn.InstanceNorm1d / 2d`` (instance statistics unless it tracks running ones and is in eval mode)."""
    use_running = m.track_running_stats and not m.training
    return C.instance_norm(t, x, _w(t, m, path, "running_mean"), _w(t, m, path, "running_var"),
                           _w(t, m, path, "weight"), _w(t, m, path, "bias"), not use_running, m.momentum, m.eps)


def _conv_transpose_module(fn):
    def run(t, m, path, x, output_size=None):
        if m.padding_mode != "zeros" or output_size is not None:
            raise UnsupportedNodeError(f"{type(m).__name__} with padding_mode other than zeros or an output_size")
        return fn(t, x, _w(t, m, path, "weight"), _w(t, m, path, "bias"), m.stride, m.padding, m.output_padding,
                  m.groups, m.dilation)
    return run


def _simple(fn: Callable, **attrs: Callable):
    def run(t, m, path, x, *args):
        return fn(t, x, **{k: get(m) for k, get in attrs.items()})
    return run


def _flatten_module(t, m, path, x):
    return C.flatten(t, x, m.start_dim, m.end_dim)


def _additive_mask(mask: Tensor | None, dtype: str) -> Tensor | None:
    """An attention mask of ``torch.nn.MultiheadAttention`` (bool: True = masked out; float: added)
    as a float mask to add to the scores."""
    if mask is None:
        return None
    if mask.dtype == "bool":
        return op.where(mask, float("-inf"), C.to_tensor(0.0, dtype))
    return as_dtype(mask, dtype)


def multi_head_attention(t, m, path, query, key, value, key_padding_mask=None, need_weights=True,
                         attn_mask=None, average_attn_weights=True, is_causal=False):
    """``torch.nn.MultiheadAttention.forward`` (eval): in-projections (the packed ``in_proj_weight``
    split into q / k / v constants), heads, attention with ``attn_mask`` ((L, S) or (N*H, L, S); bool
    True = masked out, or float added) and ``key_padding_mask`` ((N, S)), the out-projection. With
    ``need_weights`` the attention is written out (matmul, softmax) to return the weights (averaged
    over heads with ``average_attn_weights``); else one attention op. Returns ``(out, weights or None)``.
    Raises UnsupportedNodeError for ``bias_k`` / ``bias_v`` / ``add_zero_attn``."""
    if m.bias_k is not None or m.bias_v is not None or m.add_zero_attn:
        raise UnsupportedNodeError("MultiheadAttention with bias_k / bias_v / add_zero_attn")
    if not m.batch_first:
        query, key, value = (C.transpose(t, v, 0, 1) for v in (query, key, value))
    e, h = m.embed_dim, m.num_heads
    d = e // h
    p = f"{path}." if path else ""
    if m._qkv_same_embed_dim:
        w = m.in_proj_weight
        ws = [t.weight(f"{p}in_proj_weight.{c}", w[i * e:(i + 1) * e]) for i, c in enumerate("qkv")]
    else:
        ws = [_w(t, m, path, f"{c}_proj_weight") for c in "qkv"]
    if m.in_proj_bias is not None:
        bs = [t.weight(f"{p}in_proj_bias.{c}", m.in_proj_bias[i * e:(i + 1) * e]) for i, c in enumerate("qkv")]
    else:
        bs = [None] * 3
    n, lq, lk = query.shape[0], query.shape[1], key.shape[1]
    q = t.reshape(C.linear(t, query, ws[0], bs[0]), [n, lq, h, d])
    k = t.reshape(C.linear(t, key, ws[1], bs[1]), [n, lk, h, d])
    v = t.reshape(C.linear(t, value, ws[2], bs[2]), [n, lk, h, d])
    mask = _additive_mask(attn_mask, query.dtype)
    if mask is not None:
        mask = t.reshape(mask, [n, h, lq, lk]) if mask.ndim == 3 else mask
    kpm = _additive_mask(key_padding_mask, query.dtype)
    if kpm is not None:
        kpm = t.reshape(kpm, [n, 1, 1, lk])
        mask = kpm if mask is None else op.add(mask, kpm)
    if is_causal and mask is None:
        raise FrontendError("MultiheadAttention: is_causal needs attn_mask (as in PyTorch)")
    weights = None
    if need_weights:
        qh, kh, vh = t.permute(q, [0, 2, 1, 3]), t.permute(k, [0, 2, 3, 1]), t.permute(v, [0, 2, 1, 3])
        scores = op.multiply(op.matmul(qh, kh), 1.0 / (d ** 0.5))
        if mask is not None:
            scores = op.add(scores, mask)
        probs = op.softmax(scores, axis=-1)
        o = t.permute(op.matmul(probs, vh), [0, 2, 1, 3])
        weights = op.mean(probs, axis=[1]) if average_attn_weights else probs
    else:
        o = op.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = C.linear(t, t.reshape(o, [n, lq, e]), _w(t, m.out_proj, f"{p}out_proj", "weight"),
                   _w(t, m.out_proj, f"{p}out_proj", "bias"))
    if not m.batch_first:
        out = C.transpose(t, out, 0, 1)
    return out, weights


def _activation(t, act, path: str, x):
    import torch.nn.functional as F

    if isinstance(act, str):
        act = {"relu": F.relu, "gelu": F.gelu}[act]
    if act is F.relu:
        return op.relu(x)
    if act is F.gelu:
        return op.gelu(x)
    fn = _lookup_type(default_call_module_map(), type(act))
    if fn is None:
        raise UnsupportedNodeError(f"activation {act!r}")
    return fn(t, act, path, x)


def transformer_encoder_layer(t, m, path, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
    """``torch.nn.TransformerEncoderLayer.forward`` (eval; ``norm_first`` either way) from its pieces:
    :func:`multi_head_attention`, the two Linear layers with the activation, the two LayerNorms."""
    p = f"{path}." if path else ""

    def sa(x):
        return multi_head_attention(t, m.self_attn, f"{p}self_attn", x, x, x, key_padding_mask=src_key_padding_mask,
                                    need_weights=False, attn_mask=src_mask)[0]

    def ff(x):
        h = _activation(t, m.activation, f"{p}activation", _linear_module(t, m.linear1, f"{p}linear1", x))
        return _linear_module(t, m.linear2, f"{p}linear2", h)

    x = src
    if m.norm_first:
        x = op.add(x, sa(_layer_norm_module(t, m.norm1, f"{p}norm1", x)))
        x = op.add(x, ff(_layer_norm_module(t, m.norm2, f"{p}norm2", x)))
    else:
        x = _layer_norm_module(t, m.norm1, f"{p}norm1", op.add(x, sa(x)))
        x = _layer_norm_module(t, m.norm2, f"{p}norm2", op.add(x, ff(x)))
    return x


def transformer_encoder(t, m, path, src, mask=None, src_key_padding_mask=None, is_causal=None):
    """``torch.nn.TransformerEncoder.forward`` (eval): its layers, then ``norm`` if any."""
    p = f"{path}." if path else ""
    x = src
    for i, layer in enumerate(m.layers):
        x = transformer_encoder_layer(t, layer, f"{p}layers.{i}", x, mask, src_key_padding_mask)
    if m.norm is not None:
        x = _layer_norm_module(t, m.norm, f"{p}norm", x)
    return x


def default_call_module_map() -> dict:
    """The default translations of ``torch.nn`` modules, by type (subclasses match too)."""
    import torch.nn as tnn

    o = C.TORCH_OPS
    m = {
        tnn.Linear: _linear_module, tnn.Embedding: _embedding_module, tnn.LayerNorm: _layer_norm_module,
        tnn.LSTM: _recurrent_module("lstm"), tnn.GRU: _recurrent_module("gru"), tnn.RNN: _recurrent_module("rnn"),
        tnn.GroupNorm: _group_norm_module, tnn.Conv1d: _conv_module(C.conv1d), tnn.Conv2d: _conv_module(C.conv2d),
        tnn.ConvTranspose1d: _conv_transpose_module(C.conv_transpose1d),
        tnn.ConvTranspose2d: _conv_transpose_module(C.conv_transpose2d),
        tnn.ReLU: _simple(o["relu"]), tnn.SiLU: _simple(o["silu"]), tnn.Tanh: _simple(o["tanh"]),
        tnn.Sigmoid: _simple(o["sigmoid"]), tnn.GELU: _simple(o["gelu"], approximate=lambda mod: mod.approximate),
        tnn.Softmax: _simple(o["softmax"], dim=lambda mod: mod.dim),
        tnn.LogSoftmax: _simple(o["log_softmax"], dim=lambda mod: mod.dim),
        tnn.Dropout: _simple(o["identity"]), tnn.Identity: _simple(o["identity"]),
        tnn.Flatten: _flatten_module, tnn.MultiheadAttention: multi_head_attention,
        tnn.MaxPool1d: _max_pool_module(1), tnn.MaxPool2d: _max_pool_module(2), tnn.AvgPool1d: _avg_pool_module(1),
        tnn.AvgPool2d: _avg_pool_module(2), tnn.AdaptiveAvgPool1d: _adaptive_avg_pool_module(1),
        tnn.AdaptiveAvgPool2d: _adaptive_avg_pool_module(2), tnn.BatchNorm1d: _batch_norm_module,
        tnn.AdaptiveMaxPool1d: lambda t, m, path, x: C.adaptive_max_pool(1)(t, x, m.output_size, m.return_indices),
        tnn.AdaptiveMaxPool2d: lambda t, m, path, x: C.adaptive_max_pool(2)(t, x, m.output_size, m.return_indices),
        tnn.Bilinear: lambda t, m, path, x1, x2: C.bilinear(t, x1, x2, _w(t, m, path, "weight"), _w(t, m, path, "bias")),
        tnn.BatchNorm2d: _batch_norm_module,
        tnn.Upsample: lambda t, m, path, x: C.interpolate(t, x, m.size, m.scale_factor, m.mode, m.align_corners),
        tnn.Unfold: lambda t, m, path, x: C.unfold(t, x, m.kernel_size, m.dilation, m.padding, m.stride),
        tnn.ReLU6: _simple(o["relu6"]),
        tnn.Hardtanh: _simple(o["hardtanh"], min_val=lambda m: m.min_val, max_val=lambda m: m.max_val),
        tnn.Hardsigmoid: _simple(o["hardsigmoid"]), tnn.Hardswish: _simple(o["hardswish"]),
        tnn.LeakyReLU: _simple(o["leaky_relu"], negative_slope=lambda m: m.negative_slope),
        tnn.ELU: _simple(o["elu"], alpha=lambda m: m.alpha), tnn.SELU: _simple(o["selu"]),
        tnn.CELU: _simple(o["celu"], alpha=lambda m: m.alpha), tnn.Mish: _simple(o["mish"]),
        tnn.Softplus: _simple(o["softplus"], beta=lambda m: m.beta, threshold=lambda m: m.threshold),
        tnn.Softsign: _simple(o["softsign"]), tnn.GLU: _simple(o["glu"], dim=lambda m: m.dim),
        tnn.PReLU: lambda t, m, path, x: C.prelu(t, x, _w(t, m, path, "weight")),
        tnn.InstanceNorm1d: _instance_norm_module, tnn.InstanceNorm2d: _instance_norm_module,
        tnn.PixelShuffle: lambda t, m, path, x: C.pixel_shuffle(t, x, m.upscale_factor),
        tnn.ChannelShuffle: lambda t, m, path, x: C.channel_shuffle(t, x, m.groups),
        tnn.Dropout1d: _simple(o["identity"]), tnn.Dropout2d: _simple(o["identity"]),
        tnn.Dropout3d: _simple(o["identity"]), tnn.AlphaDropout: _simple(o["identity"]),
        tnn.PixelUnshuffle: lambda t, m, path, x: C.pixel_unshuffle(t, x, m.downscale_factor),
        tnn.TransformerEncoderLayer: transformer_encoder_layer, tnn.TransformerEncoder: transformer_encoder,
    }
    if hasattr(tnn, "RMSNorm"):
        m[tnn.RMSNorm] = _rms_norm_module
    return m
