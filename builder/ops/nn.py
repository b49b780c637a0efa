"""Neural-network ops: matmul, norms, convolutions, pooling, resize2d, attention, recurrent layers."""
from __future__ import annotations

import math

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.kernel import KERNEL_ATTR, AttentionKernelSpec
from ..ir.op.common import static_int
from ..ir.struct_info import TensorStructInfo
from ..ir.op import OpPattern, register_op
from ..ir.op.nn import (infer_adaptive_pool, infer_attention, infer_attention_var_len, infer_paged_attention,
    infer_rope, infer_conv1d,
    infer_conv1d_transpose, infer_conv2d_transpose,
    infer_conv2d, infer_group_norm, infer_layer_norm, infer_matmul, infer_pool, infer_resize2d, infer_rms_norm,
    infer_rnn)
from ..te import placeholder, topi
from ..te.call_te import call_te
from .common import localize_shape, te_rule, void_none

FUSABLE = OpPattern.OUT_ELEMWISE_FUSABLE


def _matmul(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    return call_te(bb, topi.matmul, call.args, {"out_dtype": void_none(call.attrs.get("out_dtype"))}, "matmul")


def _conv1d(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    a = call.attrs
    return call_te(bb, topi.conv1d, call.args, {
        "strides": a["strides"], "padding": a["padding"], "dilation": a["dilation"], "groups": a["groups"],
        "out_dtype": void_none(a.get("out_dtype"))}, "conv1d")


def _conv2d(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    a = call.attrs
    return call_te(bb, topi.conv2d, call.args, {
        "strides": a["strides"], "padding": a["padding"], "dilation": a["dilation"], "groups": a["groups"],
        "out_dtype": void_none(a.get("out_dtype"))}, "conv2d")


def _conv_transpose(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    a = call.attrs
    name = call.op.name.removeprefix("relax.nn.")
    return call_te(bb, getattr(topi, name), call.args, {
        "strides": a["strides"], "padding": a["padding"], "output_padding": a["output_padding"],
        "dilation": a["dilation"], "groups": a["groups"], "out_dtype": void_none(a.get("out_dtype"))}, name)


def _pool(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    a = call.attrs
    kind = "max" if "max_pool" in call.op.name else "avg"
    attrs = {"kind": kind, "pool_size": a["pool_size"], "strides": a["strides"], "padding": a["padding"],
             "dilation": a["dilation"], "ceil_mode": bool(a.get("ceil_mode", False)), "layout": a.get("layout")}
    if kind == "avg":
        attrs["count_include_pad"] = bool(a.get("count_include_pad", True))
    return call_te(bb, topi.pool, (call.args[0],), attrs, f"{kind}_pool")


def _adaptive_avg_pool(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    sizes = call.attrs.get("output_size")
    nsp = call.args[0].struct_info.ndim - 2
    sizes = [None] * nsp if sizes is None else list(sizes)
    return call_te(bb, topi.adaptive_avg_pool, (call.args[0],), {"output_size": sizes, "layout": call.attrs.get("layout")},
                   "adaptive_avg_pool")


def _group_norm(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    a = call.attrs
    x, gamma, beta = call.args
    return call_te(bb, topi.group_norm, (x, gamma if a.get("scale", True) else None,
                                         beta if a.get("center", True) else None), {
        "num_groups": a["num_groups"], "channel_axis": a["channel_axis"], "axes": a["axes"],
        "epsilon": a["epsilon"]}, "group_norm")


def _resize2d(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    a = call.attrs
    return call_te(bb, topi.resize2d, (call.args[0],), {
        "size": list(call.args[1].values), "layout": a.get("layout", "NCHW"), "method": a["method"],
        "coordinate_transformation_mode": a.get("coordinate_transformation_mode", "half_pixel"),
        "rounding_method": a.get("rounding_method", "round"), "cubic_alpha": float(a.get("cubic_alpha", -0.5)),
        "cubic_exclude": int(a.get("cubic_exclude", 0)), "out_dtype": void_none(a.get("out_dtype"))},
        "resize2d")


def _attention_rule(reference, name: str):
    """The legalization of an attention op to the reference loops of ``reference``
    (:func:`builder.te.topi.attention`, or :func:`~builder.te.topi.attention_var_len`: one batch row with
    a bias across sequences), marked with an :class:`~builder.ir.kernel.AttentionKernelSpec` when the code
    generator's attention kernel may take them (static heads and head dims; ``seqstart`` for the
    variable-length form, whose units visit each sequence's own keys): the spec is only a hint, the loops
    stay the semantics. A sliding window (``window_size``) and a ``logit_softcap`` go into the spec
    (``window``, ``softcap``); the kernel visits only the window's keys."""
    def legalize(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
        a = call.attrs
        scale = None if a.get("scale") is None else float(a["scale"])
        extra = {k: a[k] for k in ("window_size", "logit_softcap") if a.get(k) is not None}
        if isinstance(extra.get("window_size"), E.IntImm):
            extra["window_size"] = extra["window_size"].value
        if isinstance(extra.get("logit_softcap"), E.FloatImm):
            extra["logit_softcap"] = extra["logit_softcap"].value
        spec = attention_kernel_spec(call.args, scale, a.get("causal_mask"), extra.get("window_size"),
                                     extra.get("logit_softcap"), paged=name == "paged_attention")
        on_new = None if spec is None else (lambda func: func.attrs.__setitem__(KERNEL_ATTR, spec))
        return call_te(bb, reference, call.args, {"scale": scale, "causal_mask": a.get("causal_mask"), **extra},
                       name, on_new=on_new)
    return legalize


def attention_kernel_spec(args, scale: float | None, causal_mask: str | None, window_size: int | None = None,
                          logit_softcap: float | None = None, paged: bool = False) -> AttentionKernelSpec | None:
    """The :class:`~builder.ir.kernel.AttentionKernelSpec` of ``nn.attention(q, k, v[, bias])`` (graph
    values ``args``; ``window_size`` / ``logit_softcap`` its attributes), of ``nn.attention_var_len(q, k, v,
    seqstart)`` or (``paged``) of ``nn.paged_attention(q, k_pool, v_pool, block_table, lengths[, bias])``, or
    None when it cannot describe them: non-float32/16-bit dtypes, symbolic head counts or head dims, an
    unknown mask, a window or cap that is not a positive number (a window without a causal mask), or either
    on the variable-length form. Parameters of the PrimFunc are the arguments in order, then the output."""
    sis = [x.struct_info for x in args]
    window = 0 if window_size is None else window_size
    cap = 0.0 if logit_softcap is None else float(logit_softcap)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0 or (window and causal_mask is None) \
            or not 0 <= cap < math.inf or (window_size is not None and not window) \
            or (logit_softcap is not None and not cap):
        return None
    if paged:
        return _paged_kernel_spec(sis, scale, causal_mask, window, cap)
    if len(sis) == 4 and all(isinstance(si, TensorStructInfo) and si.ndim == 3 for si in sis[:3]) \
            and isinstance(sis[3], TensorStructInfo) and sis[3].ndim == 1:   # attention_var_len
        q, k, v = sis[:3]
        heads, kv_heads, dim = static_int(q.shape[1]), static_int(k.shape[1]), static_int(q.shape[2])
        if q.dtype not in ("float32", "float16", "bfloat16") or any(si.dtype != q.dtype for si in sis[:3]) \
                or None in (heads, kv_heads, dim, static_int(v.shape[2])) or not kv_heads or heads % kv_heads \
                or dim <= 0 or causal_mask not in (None, "TopLeft") or window or cap:
            return None
        return AttentionKernelSpec(0, 1, 2, -1, 4, causal_mask or "none", (), heads // kv_heads,
                                   1.0 / math.sqrt(dim) if scale is None else scale, seqstart=3)
    if len(sis) not in (3, 4) or not all(isinstance(si, TensorStructInfo) and si.ndim == 4 for si in sis):
        return None
    q, k, v = sis[:3]
    if q.dtype not in ("float32", "float16", "bfloat16") or any(si.dtype != q.dtype for si in sis):
        return None
    heads, kv_heads, dim = static_int(q.shape[2]), static_int(k.shape[2]), static_int(q.shape[3])
    if heads is None or kv_heads is None or dim is None or static_int(v.shape[3]) is None or not kv_heads \
            or heads % kv_heads or dim <= 0 or causal_mask not in (None, "TopLeft", "BottomRight"):
        return None
    bcast: tuple = ()
    if len(sis) == 4:
        scores = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
        bcast = tuple(d for d, (bd, sd) in enumerate(zip(sis[3].shape, scores))
                      if static_int(bd) == 1 and static_int(sd) != 1)
    return AttentionKernelSpec(0, 1, 2, 3 if len(sis) == 4 else -1, len(sis), causal_mask or "none", bcast,
                               heads // kv_heads, 1.0 / math.sqrt(dim) if scale is None else scale,
                               window=window, softcap=cap)


def _paged_kernel_spec(sis, scale: float | None, causal_mask: str | None, window: int,
                       cap: float) -> AttentionKernelSpec | None:
    """The spec of ``nn.paged_attention`` (struct infos ``sis``; ``window`` / ``cap`` 0 for none), or None
    for dtypes other than float32 / 16-bit floats, symbolic heads or head dims, or another mask."""
    if len(sis) not in (5, 6) or not all(isinstance(si, TensorStructInfo) for si in sis):
        return None
    q, k, v = sis[:3]
    if q.dtype not in ("float32", "float16", "bfloat16") or any(si.dtype != q.dtype for si in sis[:3] + sis[5:]):
        return None
    heads, kv_heads, dim = static_int(q.shape[2]), static_int(k.shape[2]), static_int(q.shape[3])
    if None in (heads, kv_heads, dim, static_int(v.shape[3])) or not kv_heads or heads % kv_heads or dim <= 0 \
            or causal_mask not in (None, "BottomRight"):
        return None
    bcast: tuple = ()
    if len(sis) == 6:
        lead = (q.shape[0], q.shape[2], q.shape[1], None)
        bcast = tuple(d for d, (bd, sd) in enumerate(zip(sis[5].shape, lead))
                      if static_int(bd) == 1 and (sd is None or static_int(sd) != 1))
    return AttentionKernelSpec(0, 1, 2, 5 if len(sis) == 6 else -1, len(sis), causal_mask or "none", bcast,
                               heads // kv_heads, 1.0 / math.sqrt(dim) if scale is None else scale,
                               window=window, softcap=cap, block_table=3, lengths=4)


register_op("matmul", infer_matmul, ("out_dtype",), pattern=FUSABLE, legalize=_matmul, frontend="matmul", in_recipes=True,
            doc="``numpy.matmul`` (batch dims broadcast); 16-bit floats accumulate in float32.")
register_op("nn.layer_norm", infer_layer_norm, ("axes", "epsilon", "center", "scale"), pattern=OpPattern.OPAQUE,
            legalize=te_rule(topi.layer_norm, "layer_norm", ("axes", "epsilon")), frontend="layer_norm", in_recipes=True,
            doc="Layer normalisation over ``axes`` (Ba et al. 2016).")
register_op("nn.rms_norm", infer_rms_norm, ("axes", "epsilon"), pattern=OpPattern.OPAQUE,
            legalize=te_rule(topi.rms_norm, "rms_norm", ("axes", "epsilon")), frontend="rms_norm", in_recipes=True,
            doc="Root-mean-square normalisation (Zhang & Sennrich 2019).")
register_op("nn.conv1d", infer_conv1d, ("strides", "padding", "dilation", "groups", "data_layout", "kernel_layout",
                                         "out_layout", "out_dtype"), pattern=FUSABLE, legalize=_conv1d,
            frontend="conv1d", in_recipes=True, doc="1-D convolution, NCW data, OIW weight.")
register_op("nn.conv2d", infer_conv2d, ("strides", "padding", "dilation", "groups", "data_layout", "kernel_layout",
                                         "out_layout", "out_dtype"), pattern=FUSABLE, legalize=_conv2d,
            frontend="conv2d", in_recipes=True, doc="2-D convolution, NCHW data, OIHW weight.")
register_op("nn.conv1d_transpose", infer_conv1d_transpose,
            ("strides", "padding", "output_padding", "dilation", "groups", "data_layout", "kernel_layout",
             "out_layout", "out_dtype"), pattern=FUSABLE, legalize=_conv_transpose, frontend="conv1d_transpose", in_recipes=True,
            doc="1-D transposed convolution, NCW data, IOW weight.")
_POOL_ATTRS = ("pool_size", "strides", "padding", "dilation", "ceil_mode", "count_include_pad", "layout",
               "out_layout")
for _n in (1, 2):
    _lay = "NCW" if _n == 1 else "NCHW"
    register_op(f"nn.max_pool{_n}d", infer_pool, _POOL_ATTRS, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, legalize=_pool,
                frontend=f"max_pool{_n}d", in_recipes=True,
                doc=f"{_n}-D max pooling, {_lay} data (``torch.nn.MaxPool{_n}d``).")
    register_op(f"nn.avg_pool{_n}d", infer_pool, _POOL_ATTRS, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, legalize=_pool,
                frontend=f"avg_pool{_n}d", in_recipes=True,
                doc=f"{_n}-D average pooling, {_lay} data (``torch.nn.AvgPool{_n}d``).")
    register_op(f"nn.adaptive_avg_pool{_n}d", infer_adaptive_pool, ("output_size", "layout", "out_layout"),
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE, legalize=_adaptive_avg_pool,
                frontend=f"adaptive_avg_pool{_n}d", in_recipes=True,
                doc=f"{_n}-D adaptive average pooling, {_lay} data (``torch.nn.AdaptiveAvgPool{_n}d``).")
register_op("nn.conv2d_transpose", infer_conv2d_transpose,
            ("strides", "padding", "output_padding", "dilation", "groups", "data_layout", "kernel_layout",
             "out_layout", "out_dtype"), pattern=FUSABLE, legalize=_conv_transpose, frontend="conv2d_transpose",
            in_recipes=True, doc="2-D transposed convolution, NCHW data, IOHW weight.")
register_op("nn.group_norm", infer_group_norm, ("num_groups", "channel_axis", "axes", "epsilon", "center", "scale"),
            pattern=OpPattern.OPAQUE, legalize=_group_norm, frontend="group_norm", in_recipes=True,
            doc="Group normalisation (Wu & He 2018).")
register_op("image.resize2d", infer_resize2d, ("roi", "layout", "method", "coordinate_transformation_mode",
                                                "rounding_method", "cubic_alpha", "cubic_exclude", "extrapolation_value",
                                                "out_dtype"), pattern=OpPattern.INJECTIVE, legalize=_resize2d,
            frontend="interpolate", in_recipes=True, doc="Resize the two spatial dims (nearest, linear or cubic).")
def _rnn(bb: BlockBuilder, call: rx.Call) -> rx.Expr:
    """The loops of :func:`builder.te.topi.rnn_prim_func` as one call_tir with two or three outputs."""
    names = ("xw", "r", "rb", "h0", "c0")
    phs = [placeholder(localize_shape(a.struct_info.shape), a.struct_info.dtype, name=n)
           for a, n in zip(call.args, names)]
    at = call.attrs
    func = topi.rnn_prim_func(*phs[:4], phs[4] if len(phs) > 4 else None, cell=at.get("cell", "lstm"),
                              reverse=bool(at.get("reverse")), linear_before_reset=bool(at.get("linear_before_reset")))
    gvar = bb.add_func(func, at.get("cell", "lstm"))
    return rx.Call(rx.Op.get("call_tir"), [gvar, rx.Tuple(list(call.args))], sinfo_args=list(call.struct_info.fields))


register_op("nn.rnn", infer_rnn, ("cell", "reverse", "linear_before_reset"), pattern=OpPattern.OPAQUE, legalize=_rnn,
            frontend="rnn_recurrence", in_recipes=True,
            doc="One direction of an LSTM / GRU / RNN over projected inputs (the recurrence, serial over time).")
register_op("nn.rope", infer_rope, pattern=OpPattern.INJECTIVE, legalize=te_rule(topi.rope, "rope"),
            doc="Rotary position embedding of one tensor: ``x * cos + rotate_half(x) * sin`` (HF Llama).")
register_op("nn.attention", infer_attention, ("scale", "causal_mask", "window_size", "logit_softcap"), pattern=OpPattern.OPAQUE,
            legalize=_attention_rule(topi.attention, "attention"), frontend="scaled_dot_product_attention",
            in_recipes=True,
            doc="``softmax(q @ k^T * scale [softcapped] [+ bias] [+ causal / sliding-window mask]) @ v`` (BSNH layout).")
register_op("nn.attention_var_len", infer_attention_var_len, ("scale", "causal_mask"), pattern=OpPattern.OPAQUE,
            legalize=_attention_rule(topi.attention_var_len, "attention_var_len"), frontend="attention_var_len",
            doc="Attention within each of several sequences packed one after another (``seqstart``).")
register_op("nn.paged_attention", infer_paged_attention, ("scale", "causal_mask", "window_size", "logit_softcap"),
            pattern=OpPattern.OPAQUE, legalize=_attention_rule(topi.paged_attention, "paged_attention"),
            frontend="paged_attention",
            doc="Attention of new queries over a paged KV cache's blocks (``block_table``, ``lengths``; vLLM's).")
