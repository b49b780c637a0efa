"""``TORCH_OPS``: the translations of torch semantics by name, which the fx and ATen maps point their
targets at (``torch.add``, ``Tensor.add`` and ``aten.add.Tensor`` all mean ``add``), with torch's other
names of the same functions.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from ...nn import op
from .creation import (arange, cast_to, copy_, full, full_like, new_full, new_ones, new_tensor, new_zeros, ones,
                       ones_like, to, type_as, zeros, zeros_like)
from .elementwise import (acosh, add, addcdiv, addcmul, asinh, atan2, atanh, bitwise_and, bitwise_not, bitwise_or,
                          bitwise_xor, celu, clamp, clamp_max, clamp_min, compare, cosh, div, dropout, elu, exp2,
                          expm1, float_unary, floordiv, fmod, gelu, glu, hardshrink, hardsigmoid, hardswish, hardtanh,
                          identity, isfinite, isinf, isnan, leaky_relu, lerp, log1p, log2, log_sigmoid, logical_and,
                          logical_not, logical_or, logical_xor, masked_fill, maximum, minimum, mish, mod, mul,
                          nan_to_num, neg, pow_, prelu, reciprocal, relu, relu6, round_, rrelu, rsub, selu, silu,
                          sinh, softplus, softshrink, softsign, square, sub, tanhshrink, threshold, unary, where)
from .indexing import (fill, gather, getitem, index, index_put, index_select, masked_select, scatter, select_scatter,
                       slice_scatter)
from .linear_algebra import (addmm, baddbmm, bilinear, cdist, cosine_similarity, einsum, linear, matmul, outer,
                             pairwise_distance, weight_norm)
from .manipulation import (broadcast_tensors, broadcast_to, cat, chunk, contiguous, diagonal, diff, dim_, expand,
                           expand_as, flatten, flip, meshgrid, narrow, numel, numpy_t, pad, permute,
                           repeat_interleave, reshape, roll, select, size, slice_, split, split_with_sizes, squeeze,
                           stack, t_, tile, transpose, tril, triu, unbind, unflatten, unfold_windows, unsqueeze, view)
from .nn import (adaptive_avg_pool, adaptive_max_pool, avg_pool, batch_norm, channel_shuffle, conv1d, conv2d,
                 conv_transpose1d, conv_transpose2d, embedding, group_norm, instance_norm, interpolate, layer_norm,
                 max_pool, one_hot, pixel_shuffle, pixel_unshuffle, recurrent, regression_loss, rms_norm, sdpa,
                 unfold)
from .operands import binary, Unavailable
from .reduction import (amax, amin, any_all, arg_reduce, argsort, argwhere, bucketize, count_nonzero, cumsum,
                        cumulative, kthvalue, log_softmax, logsumexp, max_min, median, nonzero, normalize, reduce,
                        softmax, softmin, sort, std, std_mean, topk, unique, var, var_mean, vector_norm)


# The torch-semantics translations by name; the fx and ATen maps point their targets at these.
TORCH_OPS: dict[str, Callable] = {
    "add": add, "sub": sub, "rsub": rsub, "mul": mul, "div": div, "floordiv": floordiv, "mod": mod,
    "pow": pow_, "neg": neg,
    "exp": unary("exp"), "log": unary("log"), "sqrt": unary("sqrt"), "rsqrt": unary("rsqrt"),
    "tanh": unary("tanh"), "sigmoid": unary("sigmoid"), "erf": unary("erf"), "sin": unary("sin"),
    "cos": unary("cos"), "abs": unary("abs", float_only=False), "tan": unary("tan"), "atan": unary("atan"),
    "asin": unary("asin"), "acos": unary("acos"), "asinh": asinh, "acosh": acosh, "atanh": atanh, "atan2": atan2,
    "relu": relu, "gelu": gelu, "silu": silu, "dropout": dropout, "identity": identity,
    "hardtanh": hardtanh, "relu6": relu6, "hardsigmoid": hardsigmoid, "hardswish": hardswish,
    "leaky_relu": leaky_relu, "elu": elu, "selu": selu, "celu": celu, "softplus": softplus, "softsign": softsign,
    "mish": mish, "prelu": prelu, "glu": glu,
    "softmax": softmax, "log_softmax": log_softmax,
    "mean": reduce("mean"), "sum": reduce("sum"), "prod": reduce("prod"), "amax": amax, "amin": amin,
    "max": max_min("max"), "min": max_min("min"), "argmax": arg_reduce("argmax"), "argmin": arg_reduce("argmin"),
    "floor": float_unary("floor"), "ceil": float_unary("ceil"), "trunc": float_unary("trunc"),
    "sign": float_unary("sign"), "round": round_, "floor_divide": floordiv, "remainder": mod,
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
    "cumsum": cumsum, "cumprod": cumulative("prod"),
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
    "any": any_all("any"), "all": any_all("all"), "std_mean": std_mean, "var_mean": var_mean,
    "cosine_similarity": cosine_similarity, "cdist": cdist, "log_sigmoid": log_sigmoid, "logsigmoid": log_sigmoid,
    "rrelu": rrelu, "one_hot": one_hot, "bucketize": bucketize, "hardshrink": hardshrink, "softshrink": softshrink,
    "threshold": threshold, "sgn": float_unary("sign"), "normalize": normalize, "softmin": softmin,
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
    "to": to, "type_as": type_as, "float": cast_to("float32"), "half": cast_to("float16"),
    "bfloat16": cast_to("bfloat16"), "double": cast_to("float64"), "int": cast_to("int32"), "long": cast_to("int64"),
    "bool": cast_to("bool"), "contiguous": contiguous, "clone": contiguous, "detach": contiguous,
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
        group_norm(t, x, group, w, b, eps), Unavailable("native_group_norm mean"),
        Unavailable("native_group_norm rstd")),
    "copy": lambda t, x, src, non_blocking=False: copy_(t, x, src),
}


# torch's other names of the same functions (torch.multiply is torch.mul, ...)
TORCH_OPS.update({alias: TORCH_OPS[name] for alias, name in (
    ("multiply", "mul"), ("subtract", "sub"), ("divide", "div"), ("true_divide", "div"), ("greater", "gt"),
    ("greater_equal", "ge"), ("less", "lt"), ("less_equal", "le"), ("not_equal", "ne"), ("absolute", "abs"),
    ("negative", "neg"), ("clip", "clamp"), ("fix", "trunc"), ("swapaxes", "transpose"), ("swapdims", "transpose"),
    ("concatenate", "cat"), ("arctan", "atan"), ("arcsin", "asin"), ("arccos", "acos"), ("arcsinh", "asinh"),
    ("arccosh", "acosh"), ("arctanh", "atanh"), ("arctan2", "atan2"))})
