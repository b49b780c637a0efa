"""Converters of the fused ops of onnxruntime's transformer optimizer (domain ``com.microsoft``): the
GELUs, (Skip)(Simplified)LayerNormalization, EmbedLayerNormalization, Attention.
"""
from __future__ import annotations

import numpy as np

from ...nn import op
from ...nn.core import Tensor
from .convert_linear import _linear
from .convert_normalization import _norm_param
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _simp
from .values import _Unavailable


def _add_bias(im, x: Tensor, b) -> Tensor:
    """``x + b`` with ``b`` (an optional input) as a constant or tensor; ``x`` itself when ``b`` is None."""
    return x if b is None else op.add(x, im.tensor(b.astype(x.dtype) if isinstance(b, np.ndarray) else b))


@_register("com.microsoft:Gelu", "com.microsoft:BiasGelu", "com.microsoft:FastGelu", "com.microsoft:QuickGelu")
def _ms_gelu(im, node, ins, at):
    """onnxruntime's GELUs: ``Gelu`` (exact), ``BiasGelu`` (exact, of ``A + B``), ``FastGelu`` (the tanh
    approximation, of ``X + bias``), ``QuickGelu`` (``x * sigmoid(alpha x)``, alpha 1.702 by default)."""
    _check_inputs(ins, node)
    x = _add_bias(im, im.tensor(ins[0]), ins[1] if len(ins) > 1 and ins[1] is not None else None)
    if node.op_type == "QuickGelu":
        return op.multiply(x, op.sigmoid(op.multiply(x, float(at.get("alpha", 1.702)))))
    return op.gelu(x, approximate="tanh" if node.op_type == "FastGelu" else None)


@_register("com.microsoft:SkipLayerNormalization", "com.microsoft:SkipSimplifiedLayerNormalization")
def _skip_layer_norm(im, node, ins, at):
    """onnxruntime's ``SkipLayerNormalization`` (``LayerNorm(input + skip + bias)`` over the last dim, gamma,
    optional beta) and ``SkipSimplifiedLayerNormalization`` (the RMS norm, gamma only); outputs the
    normalized value and, when asked (output 3), the sum ``input + skip + bias``. Raises ONNXImportError for
    the mean / inverse-deviation outputs."""
    _check_inputs(ins, node)
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    x = op.add(im.tensor(ins[0]), im.tensor(ins[1]))
    gamma, beta = ins[2], None if simplified else opt(3)
    x = _add_bias(im, x, opt(3) if simplified else opt(4))
    if any(node.output[1:3]):
        raise ONNXImportError("the mean / inverse standard deviation outputs are not supported")
    eps = float(at.get("epsilon", 1e-12 if not simplified else 1e-6))
    norm = [_simp(x.shape[-1])]
    if not isinstance(norm[0], int):
        raise ONNXImportError(f"the normalized dim {norm[0]} must be static")
    if simplified:
        y = op.rms_norm(x, _norm_param(im, gamma, norm, x.dtype, 1.0), [len(x.shape) - 1], eps)
    else:
        y = op.layer_norm(x, norm, _norm_param(im, gamma, norm, x.dtype, 1.0), _norm_param(im, beta, norm, x.dtype, None),
                          eps=eps)
    if len(node.output) > 3 and node.output[3]:
        return y, _Unavailable(node, "mean"), _Unavailable(node, "inv_std_var"), x
    return y


@_register("com.microsoft:EmbedLayerNormalization")
def _embed_layer_norm(im, node, ins, at):
    """onnxruntime's ``EmbedLayerNormalization`` (BERT's embeddings fused): ``LayerNorm(word[input_ids] +
    position[position_ids, default 0 .. S-1] + segment[segment_ids])`` with gamma / beta; output 1 the
    ``mask_index`` (int32, per row the count of mask ones, the right-padded lengths ``Attention`` reads; zeros
    without a mask), output 2 the sum before the norm."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    ids = im.tensor(ins[0])
    word, pos_table = im.tensor(ins[2]), im.tensor(ins[3])
    h = op.take(word, ids, axis=0)
    positions = opt(8)
    if positions is None:
        p = op.take(pos_table, op.arange(0, ids.shape[1], 1, dtype="int64"), axis=0)        # (S, H)
    else:
        p = op.take(pos_table, im.tensor(positions), axis=0)
    h = op.add(h, p)
    if opt(1) is not None and opt(4) is not None:
        h = op.add(h, op.take(im.tensor(ins[4]), im.tensor(ins[1]), axis=0))
    norm = [_simp(h.shape[-1])]
    y = op.layer_norm(h, norm, _norm_param(im, ins[5], norm, h.dtype, 1.0), _norm_param(im, ins[6], norm, h.dtype, None),
                      eps=float(at.get("epsilon", 1e-12)))
    mask = opt(7)
    if mask is not None:
        mask_index = op.astype(op.sum(op.astype(im.tensor(mask), "int32"), axis=[1]), "int32")
    else:
        mask_index = op.zeros([ids.shape[0]], dtype="int32")
    return y, mask_index, h


@_register("com.microsoft:Attention")
def _ms_attention(im, node, ins, at):
    """onnxruntime's fused ``Attention`` (BERT / GPT-2 self-attention): ``qkv = input @ weights + bias`` split
    by ``qkv_hidden_sizes`` (default three equal parts) into ``num_heads`` heads, scaled dot-product
    attention (``scale``, default ``1 / sqrt(head size)``; ``unidirectional``: causal) with a ``mask_index``
    of right-padded lengths (B,), a raw 0 / 1 mask (B, T) or (B, S, T), and an additive ``attention_bias``.
    Raises ONNXImportError for ``past`` / ``present``, the (2B,) start / end mask and rotary attributes."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    if opt(4) is not None or (len(node.output) > 1 and node.output[1]):
        raise ONNXImportError("past / present states are not supported")
    if int(at.get("do_rotary", 0)):
        raise ONNXImportError("do_rotary is not supported")
    x = im.tensor(ins[0])
    heads = int(at["num_heads"])
    w, b = ins[1], opt(2)
    if isinstance(w, np.ndarray) and w.ndim == 2 and w.dtype.kind == "f":
        qkv = _linear(im, x, w.T.astype(x.dtype))
    else:
        qkv = op.matmul(x, im.tensor(w))
    qkv = _add_bias(im, qkv, b)
    total = _simp(qkv.shape[-1])
    sizes = [int(v) for v in at.get("qkv_hidden_sizes", [])] or ([total // 3] * 3 if isinstance(total, int) else [])
    if len(sizes) != 3 or not isinstance(total, int) or sum(sizes) != total or sizes[0] != sizes[1] or \
            any(v % heads for v in sizes):
        raise ONNXImportError(f"qkv sizes {sizes} do not split {total} features into {heads} heads")
    bsz, seq = x.shape[0], x.shape[1]
    starts = [0, sizes[0], sizes[0] + sizes[1]]
    q, k, v = (op.reshape(op.strided_slice(qkv, [2], [a], [a + n]), [bsz, seq, heads, n // heads])
               for a, n in zip(starts, sizes))
    mask = None
    m = opt(3)
    if m is not None:
        mt = im.tensor(m)
        if len(mt.shape) == 1:
            if isinstance(_simp(mt.shape[0]), int) and isinstance(_simp(bsz), int) and _simp(mt.shape[0]) != _simp(bsz):
                raise ONNXImportError("a (2 * batch,) mask_index (end and start positions) is not supported")
            keys = op.arange(0, seq, 1, dtype="int64")
            mask = op.less(op.reshape(keys, [1, 1, 1, seq]), op.reshape(op.astype(mt, "int64"), [bsz, 1, 1, 1]))
        elif len(mt.shape) in (2, 3):
            raw = op.greater(mt, im.const(np.zeros((), mt.dtype)))
            mask = op.unsqueeze(op.unsqueeze(raw, 1), 1) if len(mt.shape) == 2 else op.unsqueeze(raw, 1)
        else:
            raise ONNXImportError(f"a {len(mt.shape)}-d mask_index is not supported")
    bias = opt(5)
    if bias is not None:
        additive = im.tensor(bias)
        mask = additive if mask is None else op.where(mask, additive, im.const(np.array(-np.inf, additive.dtype)))
    scale = at.get("scale")
    y = op.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=None if not scale else float(scale),
                                        is_causal=bool(int(at.get("unidirectional", 0))))
    return op.reshape(y, [bsz, seq, sizes[2]])
