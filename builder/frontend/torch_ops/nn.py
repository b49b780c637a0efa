"""Translations of ``torch.nn.functional`` and its ATen ops: embeddings, normalizations, convolutions,
pools, interpolation, pixel shuffles, attention, losses, recurrent layers.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir import expr as E
from ...ir.op import exact_scaled_size
from ...nn import op
from ...nn.core import Tensor
from ..dtypes import as_dtype
from ..errors import FrontendError, UnsupportedNodeError
from .operands import binary, first_of, static, to_tensor, Unavailable


#: The most windows an adaptive max pooling of a size that the output size does not divide is written out with
#: (one slice and reduction per output position of that dim).
MAX_ADAPTIVE_WINDOWS = 256


def one_hot(t, x, num_classes=-1):
    """``F.one_hot(x, num_classes)``: ``x``'s shape plus a last dim of ``num_classes``, 1 at each index, int64
    (PyTorch's dtype). Raises UnsupportedNodeError without ``num_classes`` (the size would depend on the data)."""
    if int(num_classes) < 1:
        raise UnsupportedNodeError("one_hot without num_classes (the size would depend on the data)")
    classes = op.arange(0, int(num_classes), 1, dtype=x.dtype)
    return as_dtype(op.equal(op.unsqueeze(x, x.ndim), classes), "int64")


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
    """``aten.embedding(weight, ids, padding_idx, ...)`` (ATen's argument order): :func:`embedding` of ``ids`` into
    ``weight``; the result is ``ids.shape + (D,)`` in the weight's dtype."""
    return embedding(t, ids, weight)


def layer_norm(t, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=None):
    """``F.layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5)``: normalized over the trailing dims
    ``normalized_shape`` (:func:`builder.nn.op.layer_norm`); same shape and dtype."""
    return op.layer_norm(x, list(normalized_shape), weight, bias, eps=float(eps))


def native_layer_norm(t, x, normalized_shape, weight, bias, eps):
    """``aten.native_layer_norm``: (out, mean, rstd); only ``out`` may be used."""
    return (layer_norm(t, x, normalized_shape, weight, bias, eps), Unavailable("native_layer_norm mean"),
            Unavailable("native_layer_norm rstd"))


def rms_norm(t, x, normalized_shape, weight=None, eps=None):
    """``F.rms_norm(x, normalized_shape, weight=None, eps=None)`` (PyTorch 2.4): ``x / sqrt(mean(x^2) + eps) * weight``
    over the trailing dims ``normalized_shape``; ``eps`` None is float32's machine epsilon and a missing weight
    ones, as in PyTorch. Same shape and dtype."""
    axes = list(range(-len(normalized_shape), 0))
    if eps is None:
        eps = float(np.finfo(np.float32).eps)
    if weight is None:
        weight = op.ones(list(normalized_shape), dtype=x.dtype)
    return op.rms_norm(x, weight, axes, epsilon=float(eps))


def group_norm(t, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=None):
    """``F.group_norm(x, num_groups, weight=None, bias=None, eps=1e-5)``: ``x`` (N, C, *) normalized over each group of
    ``C / num_groups`` channels and the spatial dims; same shape and dtype."""
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
    """``F.conv1d(x, weight, bias, stride, padding, dilation, groups)``: ``x`` (N, C_in, L) with ``weight`` (C_out,
    C_in / groups, K) -> (N, C_out, L_out); ``padding`` an int, a one-element list, ``'valid'`` or ``'same'``.
    Raises FrontendError for another padding string."""
    pads = _conv_padding(padding, weight, dilation, stride, 1)
    return op.conv1d(x, weight, bias, stride=first_of(stride), padding=pads, dilation=first_of(dilation),
                     groups=int(groups))


def conv2d(t, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``F.conv2d(x, weight, bias, stride, padding, dilation, groups)``: ``x`` (N, C_in, H, W) with ``weight`` (C_out,
    C_in / groups, KH, KW) -> (N, C_out, H_out, W_out); ``padding`` ints, ``'valid'`` or ``'same'``. Raises FrontendError for another padding string."""
    pads = _conv_padding(padding, weight, dilation, stride, 2)
    return op.conv2d(x, weight, bias, stride=stride, padding=pads, dilation=dilation, groups=int(groups))


def conv_transpose1d(t, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose1d(x, weight, bias, stride, padding, output_padding, groups, dilation)``: ``x`` (N, C_in, L)
    with the IOW ``weight`` (C_in, C_out / groups, K) -> (N, C_out, L_out) (:func:`builder.nn.op.conv1d_transpose`)."""
    return op.conv1d_transpose(x, weight, bias, stride=first_of(stride), padding=first_of(padding),
                               output_padding=first_of(output_padding), dilation=first_of(dilation), groups=int(groups))


def conv_transpose2d(t, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation)``: ``x`` (N, C_in, H,
    W) with the IOHW ``weight`` (C_in, C_out / groups, KH, KW) -> (N, C_out, H_out, W_out)
    (:func:`builder.nn.op.conv2d_transpose`)."""
    return op.conv2d_transpose(x, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                               dilation=dilation, groups=int(groups))


def convolution(t, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """``aten.convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)``:
    :func:`conv1d` / :func:`conv2d` or their transposes by the rank of ``x`` (3 or 4). Raises UnsupportedNodeError
    for another rank."""
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
    """The translation of ``aten.max_pool{nsp}d_with_indices``: ``(pooled, indices)`` where the pooled tensor is
    :func:`max_pool`'s and the indices are not computed (an error only if a node uses them)."""
    pool = max_pool(nsp)

    def run(t, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        return pool(t, x, kernel_size, stride, padding, dilation, ceil_mode), Unavailable("max pooling indices")
    return run


def avg_pool(nsp: int) -> Callable:
    """The translation of ``F.avg_pool{nsp}d`` / ``aten.avg_pool{nsp}d`` (``nsp`` 1 or 2 spatial dims):
    ``kernel_size``, ``stride`` (the kernel when None), ``padding``, ``ceil_mode``, ``count_include_pad`` on (N, C,
    *spatial) or unbatched (C, *spatial) input. Raises UnsupportedNodeError for ``divisor_override``, FrontendError
    for another rank."""
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
    return lambda t, x, output_size: (run(t, x, output_size), Unavailable("adaptive max pooling indices"))


def batch_norm(t, x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """``F.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=1e-5)`` in eval mode: ``(x -
    mean) / sqrt(var + eps) * weight + bias`` along dim 1 of (N, C, *) (dim 0 of a 1-D x),
    :func:`builder.nn.op.batch_norm`; same shape and dtype. Raises UnsupportedNodeError in training mode or without
    running statistics."""
    if training:
        raise UnsupportedNodeError("batch_norm in training mode (batch statistics); put the model in inference mode (Module.eval) first")
    if running_mean is None or running_var is None:
        raise UnsupportedNodeError("batch_norm without running statistics (track_running_stats=False)")
    return op.batch_norm(x, running_mean, running_var, weight, bias, axis=1 if x.ndim > 1 else 0, eps=float(eps))


def aten_batch_norm(t, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=None):
    """``aten.batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)`` (ATen's
    argument order): :func:`batch_norm`."""
    return batch_norm(t, x, running_mean, running_var, weight, bias, training, momentum, eps)


def aten_native_batch_norm(t, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """``aten.native_batch_norm``: (out, save_mean, save_invstd); only ``out`` may be used."""
    return (batch_norm(t, x, running_mean, running_var, weight, bias, training, momentum, eps),
            Unavailable("batch_norm save_mean"), Unavailable("batch_norm save_invstd"))


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
