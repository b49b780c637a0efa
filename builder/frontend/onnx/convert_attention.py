"""Converters of the ONNX transformer ops of opset 23: RotaryEmbedding and Attention.
"""
from __future__ import annotations

from ...ir import expr as E
from ...nn import op
from .errors import ONNXImportError
from .registry import _check_inputs, _register
from .shape_folding import _simp


@_register("RotaryEmbedding")
def _rotary_embedding(im, node, ins, at):
    """``RotaryEmbedding`` (opset 23; Su et al. 2021, RoFormer): the first ``rotary_embedding_dim`` (all when 0)
    features of each head rotated by the cos / sin caches, gathered by ``position_ids`` when given (else
    caches of shape (batch, seq, dim / 2)); halves (``interleaved=0``, HF Llama's ``rotate_half``) or
    even / odd pairs (``interleaved=1``, GPT-J's). Input (B, H, S, D), or (B, S, H * D) with ``num_heads``."""
    _check_inputs(ins, node)
    x = im.tensor(ins[0])
    cos, sin = im.tensor(ins[1]), im.tensor(ins[2])
    pos = ins[3] if len(ins) > 3 and ins[3] is not None else None
    nd = len(x.shape)
    if nd == 4:
        xs = op.permute_dims(x, [0, 2, 1, 3])                       # (B, S, H, D)
    elif nd == 3:
        heads = int(at.get("num_heads", 0))
        hidden = _simp(x.shape[2])
        if heads <= 0 or not isinstance(hidden, int) or hidden % heads:
            raise ONNXImportError(f"a 3-d input needs num_heads dividing its hidden size {hidden}, got {heads}")
        xs = op.reshape(x, [x.shape[0], x.shape[1], heads, hidden // heads])
    else:
        raise ONNXImportError(f"the input must be 3-d or 4-d, got {nd}-d")
    d = _simp(xs.shape[3])
    rd = int(at.get("rotary_embedding_dim", 0)) or d
    if not isinstance(d, int) or rd % 2 or rd > d:
        raise ONNXImportError(f"rotary_embedding_dim {rd} must be even and at most the head size {d}")
    if pos is not None:
        cos, sin = op.take(cos, im.tensor(pos), axis=0), op.take(sin, im.tensor(pos), axis=0)   # (B, S, rd / 2)
    cos, sin = (op.unsqueeze(op.astype(c, x.dtype) if c.dtype != x.dtype else c, 2) for c in (cos, sin))
    rot = op.strided_slice(xs, [3], [0], [rd]) if rd < d else xs
    if int(at.get("interleaved", 0)):
        x1, x2 = (op.strided_slice(rot, [3], [k], [rd], [2]) for k in (0, 1))
    else:
        x1, x2 = op.strided_slice(rot, [3], [0], [rd // 2]), op.strided_slice(rot, [3], [rd // 2], [rd])
    real = op.subtract(op.multiply(cos, x1), op.multiply(sin, x2))
    imag = op.add(op.multiply(sin, x1), op.multiply(cos, x2))
    if int(at.get("interleaved", 0)):
        rot = op.reshape(op.concat([op.unsqueeze(real, 4), op.unsqueeze(imag, 4)], 4),
                         [xs.shape[0], xs.shape[1], xs.shape[2], rd])
    else:
        rot = op.concat([real, imag], 3)
    out = op.concat([rot, op.strided_slice(xs, [3], [rd], [d])], 3) if rd < d else rot
    return op.permute_dims(out, [0, 2, 1, 3]) if nd == 4 else op.reshape(out, list(x.shape))


@_register("Attention")
def _attention_op(im, node, ins, at):
    """``Attention`` (opsets 23 / 24): scaled dot-product attention (:func:`builder.nn.op.scaled_dot_product_attention`)
    of (B, H, S, D) inputs, or (B, S, H * D) with ``q_num_heads`` / ``kv_num_heads``; GQA; a bool or additive
    ``attn_mask``; ``is_causal`` aligned bottom-right to the past (``j <= i + past``); ``past_key`` /
    ``past_value`` concatenated into ``present_key`` / ``present_value``. A fully masked row gives zeros, as
    the spec's errata says. Raises ONNXImportError for ``softcap``, the ``qk_matmul_output`` output,
    ``nonpad_kv_seqlen``, and a causal mask between different query and key lengths."""
    _check_inputs(ins, node)
    opt = lambda i: ins[i] if len(ins) > i and ins[i] is not None else None  # noqa: E731
    q, k, v = (im.tensor(t) for t in ins[:3])
    mask, past_k, past_v = opt(3), opt(4), opt(5)
    if opt(6) is not None:
        raise ONNXImportError("nonpad_kv_seqlen is not supported")
    if float(at.get("softcap", 0.0)):
        raise ONNXImportError("softcap is not supported")
    if len(node.output) > 3 and node.output[3]:
        raise ONNXImportError("the qk_matmul_output output is not supported")
    if (past_k is None) != (past_v is None):
        raise ONNXImportError("past_key and past_value go together")
    three = len(q.shape) == 3
    if three:
        hq, hk = int(at.get("q_num_heads", 0)), int(at.get("kv_num_heads", 0))
        if hq <= 0 or hk <= 0:
            raise ONNXImportError("3-d inputs need q_num_heads and kv_num_heads")

        def heads(t, h):   # (B, S, H * D) -> (B, H, S, D)
            size = _simp(t.shape[2])
            if not isinstance(size, int) or size % h:
                raise ONNXImportError(f"a hidden size {size} is not a multiple of {h} heads")
            return op.permute_dims(op.reshape(t, [t.shape[0], t.shape[1], h, size // h]), [0, 2, 1, 3])

        q, k, v = heads(q, hq), heads(k, hk), heads(v, hk)
    elif len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        raise ONNXImportError("Q, K and V must all be 3-d or all 4-d")
    causal = None
    if int(at.get("is_causal", 0)):
        if past_k is None:
            causal = "TopLeft"
        elif E.prove_equal(E.convert(q.shape[2]), E.convert(k.shape[2])):
            causal = "BottomRight"   # j <= i + past: the new keys end where the queries do
        else:
            raise ONNXImportError(f"a causal mask with a past needs as many new keys ({k.shape[2]}) as queries "
                                  f"({q.shape[2]})")
    if past_k is not None:
        k = op.concat([im.tensor(past_k), k], 2)
        v = op.concat([im.tensor(past_v), v], 2)
    scale = at.get("scale")
    bias = None if mask is None else im.tensor(mask)
    y = op.scaled_dot_product_attention(op.permute_dims(q, [0, 2, 1, 3]), op.permute_dims(k, [0, 2, 1, 3]),
                                        op.permute_dims(v, [0, 2, 1, 3]), attn_mask=bias,
                                        scale=None if scale is None else float(scale), causal_mask=causal)  # BSHD
    if three:
        y = op.reshape(y, [y.shape[0], y.shape[1], y.shape[2] * y.shape[3]])
    else:
        y = op.permute_dims(y, [0, 2, 1, 3])
    outs = [y]
    if len(node.output) > 1 and any(node.output[1:3]):
        outs += [k, v]
    return tuple(outs) if len(outs) > 1 else y
