"""The translations of torch semantics (``torch.add``, ``aten.add.Tensor``, ``Tensor.add`` all mean the
same) to our high-level ops (``builder.nn.op`` on ``nn.Tensor`` wrappers, so matmuls keep the
``matmul(x, permute_dims(W))`` form that kernel selection turns into the linear kernels, and elementwise
chains fuse), one module per op family, and :data:`TORCH_OPS`, the table of them by name that the fx and
ATen maps point their targets at (:mod:`.table`).

A translation is ``fn(t, *args, **kwargs)``: ``t`` the :class:`~builder.frontend.translator.GraphTranslator`
(BlockBuilder, the current node, weights), the node's arguments already translated: graph values are
``nn.Tensor``, sizes ``int`` or int64 ``PrimExpr`` (symbolic dims), lists / tuples element-wise, everything
else (numbers, dtypes, strings, None) as torch gave it. It returns an ``nn.Tensor``, a tuple of them, or a
size; it raises :class:`~builder.frontend.errors.UnsupportedNodeError` for arguments it has no translation
for and :class:`~builder.frontend.errors.FrontendError` for invalid ones (the translator adds the node's
name and source line). torch is never imported here: dtypes are read by name (``torch.float32`` ->
``"float32"``, :mod:`builder.frontend.dtypes`).

- :mod:`.operands`: the arguments (tensors, sizes, numbers) checked and converted, torch's binary promotion;
- :mod:`.elementwise`, :mod:`.reduction`, :mod:`.linear_algebra`, :mod:`.nn`, :mod:`.manipulation`,
  :mod:`.indexing`, :mod:`.creation`: the translations by family;
- :mod:`.table`: :data:`TORCH_OPS`.

The names below are the families' translations, for the importers' maps (``from . import torch_ops as C``).
"""
from __future__ import annotations

from .operands import (at_least_1d, binary, first_of, fmt, is_size, is_tensor, norm_dim, reduce_axes, sizes, static,
                       to_tensor, Unavailable, ValuesIndices)
from .elementwise import (acosh, add, addcdiv, addcmul, asinh, atan2, atanh, bitwise_and, bitwise_not, bitwise_or,
                          bitwise_xor, celu, clamp, clamp_max, clamp_min, compare, cosh, div, dropout, elu, exp2,
                          expm1, float_unary, floordiv, fmod, gelu, glu, hardshrink, hardsigmoid, hardswish,
                          hardtanh, identity, isfinite, isinf, isnan, leaky_relu, lerp, log1p, log2, log_sigmoid,
                          logical_and, logical_not, logical_or, logical_xor, masked_fill, maximum, minimum, mish,
                          mod, mul, nan_to_num, neg, pow_, prelu, reciprocal, relu, relu6, round_, rrelu, rsub,
                          scalar_math, selu, silu, sinh, softplus, softshrink, softsign, square, sub, tanhshrink,
                          threshold, unary, where)
from .reduction import (amax, amin, any_all, arg_reduce, argsort, argwhere, aten_softmax, aten_unique2, bucketize,
                        count_nonzero, cumsum, cumulative, kthvalue, log_softmax, logsumexp, max_min, median,
                        nonzero, normalize, reduce, softmax, softmin, sort, std, std_mean, topk, unique, var,
                        var_mean, vector_norm)
from .linear_algebra import (addmm, baddbmm, bilinear, cdist, cosine_similarity, einsum, linear, matmul, outer,
                     pairwise_distance, weight_norm)
from .nn import (adaptive_avg_pool, adaptive_max_pool, aten_adaptive_max_pool, aten_batch_norm,
                 aten_batch_norm_no_training, aten_embedding, aten_native_batch_norm, ATEN_REDUCTIONS,
                 aten_regression_loss, avg_pool, batch_norm, channel_shuffle, conv1d, conv2d, conv_transpose1d,
                 conv_transpose2d, convolution, embedding, group_norm, instance_norm, interpolate, layer_norm,
                 MAX_ADAPTIVE_WINDOWS, max_pool, max_pool_with_indices, native_layer_norm, one_hot, pixel_shuffle,
                 pixel_unshuffle, recurrent, regression_loss, rms_norm, sdpa, unfold, upsample)
from .manipulation import (broadcast_tensors, broadcast_to, cat, chunk, contiguous, diagonal, diff, dim_, expand,
                           expand_as, flatten, flip, meshgrid, narrow, numel, numpy_t, pad, permute,
                           repeat_interleave, reshape, roll, select, size, slice_, slice_bounds, split,
                           split_with_sizes, squeeze, stack, t_, tile, transpose, tril, triu, unbind, unflatten,
                           unfold_windows, unsqueeze, view)
from .indexing import (fill, gather, getitem, index, index_put, index_select, key_view, masked_select, scatter,
                       scatter_view, select_scatter, slice_scatter, take_along)
from .creation import (arange, cast_to, copy_, full, full_like, new_full, new_ones, new_tensor, new_zeros, ones,
                       ones_like, to, type_as, zeros, zeros_like)
from .table import TORCH_OPS
