"""ConvToGemm: 1-D and 2-D convolutions become GEMMs that kernel selection gives to the linear
kernels (issue 15), before :class:`~builder.transform.SelectKernels` runs.

**Conv1D** (``R.nn.conv1d``, groups 1): the explicit im2col lowering (Chellapilla et al., "High
Performance Convolutional Neural Networks for Document Processing", 2006; PyTorch's CPU slow path and
onnxruntime's ``Conv`` do the same)::

    col = conv1d_im2col(x)                         (N, W_out, C, K), zero padding inline
    y_nwc = matmul(reshape(col, (N, W_out, C * K)), permute_dims(reshape(w, (O, C * K))))
    y = permute_dims(y_nwc, [0, 2, 1])             (N, O, W_out), NCW as the op says

The weight is used as stored (OIW reshaped, no copy per call) and the GEMM is one large product
(M = N * W_out rows, K = C * K_w, N = O), which the float GEMM runs within about 10% of OpenBLAS's
sgemm on Whisper's stem (``benchmarks/bench_conv.py``). The columns cost ``K_w`` times the input in
memory and one copy pass (Whisper's stem: 0.55 ms of copying into a warm buffer, 4.5 ms with the
page faults of the VM's freshly allocated outputs, against 30 ms of GEMM). The alternative without
them, one GEMM per tap on strided slices summed (``y = sum_k W[:, :, k] @ x_pad[..., k*d :: s]``),
copies the slices anyway (the graph has no strided views), writes ``K_w`` outputs and cannot fuse
an epilogue into a sum of GEMMs: more memory traffic for the same arithmetic. A truly im2col-free
GEMM (rows of the padded NWC input at a row stride of ``stride * C``) needs a strided-``x`` variant
of the linear kernels.

**Conv2D** (``R.nn.conv2d``, groups 1): the same lowering per spatial dim::

    col = conv2d_im2col(x)                         (N, oH, oW, C, kH, kW), zero padding inline
    y_nhwc = matmul(reshape(col, (N, oH, oW, C*kH*kW)), permute_dims(reshape(w, (O, C*kH*kW))))
    y = permute_dims(y_nhwc, [0, 3, 1, 2])         (N, O, oH, oW)

A depthwise Conv2D (groups = channels; MobileNet's) is no GEMM but runs channels last too
(:func:`builder.te.topi.depthwise_conv2d_nhwc`, the channel loop innermost: 144 channels at 56 x 56,
3 x 3: 0.49 -> 0.13 ms, against torch's 0.29), on the NHWC twin of its input. Other grouped ones run one
GEMM per group when each group's dot product is long enough (``_Rewriter.grouped``).

Pooling (``max_pool``, ``avg_pool``, ``adaptive_avg_pool``) of a value with a channels-last twin pools
the twin (``layout="NHWC"`` / ``"NWC"``), so a ResNet's stem, pooling and residual blocks stay channels
last. A ResNet layer (64 -> 64 channels, 3 x 3, 56 x 56) went from 84 ms in the reference loops to 1.2 ms
(0.6x torch's oneDNN; Intel Xeon, 2 threads). A 1 x 1 convolution with stride 1 and no padding of an
input with an NHWC twin needs no columns: its GEMM reads the twin.

**Layouts.** The GEMM computes channels last (NWC / NHWC; below for 1-D, the same with
``[0, 2, 3, 1]`` / ``[0, 3, 1, 2]`` for 2-D); NCW is restored by a transpose only where something needs
it. A transpose ``y = permute_dims(y_nwc, [0, 2, 1])`` that this pass introduced is *pending*: an
elementwise / broadcast op (a fusable record: ``add`` of the bias reshaped to ``(1, O, 1)``,
``gelu``, ...) with a single-use pending operand is computed in NWC instead, when every other
operand has a twin or is 0-d or a broadcast whose transpose is a reshape (``(1, O, 1) -> (1, 1, O)``;
a full NCW operand is not transposed for it), so the bias and activation stay the GEMM's epilogue; ``permute_dims(v, [0, 2, 1])`` of a value with a known
twin is the twin; a following convolution reads its input's twin (``conv1d_im2col`` reads NWC as
well as NCW). Whisper's stem (``gelu(conv1)``, ``gelu(conv2)``, then ``permute_dims(.., [0, 2, 1])``)
so becomes two fused GEMM kernels and two im2col copies, with no transpose at all. Pending
transposes nothing uses are removed (dead code elimination); one that stays (the NCW result is
returned, or read by an op that is not elementwise) is folded into the GEMM's store by kernel
selection (:class:`~builder.transform.SelectKernels`), so it costs no pass of its own. A pointwise convolution (kernel 1,
stride 1, no padding) of an input with an NWC twin needs no columns at all: the twin is the GEMM's
input.

**ConvTranspose1D / 2D** (``R.nn.conv1d_transpose`` / ``conv2d_transpose``, groups 1): a GEMM producing
the columns, then the overlap-add (col2im; Caffe's ``Deconvolution``, PyTorch's ``slow_conv_transpose1d``;
2-D: the NHWC input times ``(C, O*kH*kW)``, :func:`builder.te.topi.conv2d_transpose_col2im`; 64 -> 32
channels, 4 x 4 stride 2 at 32 x 32: 31.7 ms in the loops -> 1.1 ms, torch 0.39; Intel Xeon)::

    cols = matmul(permute_dims(x, [0, 2, 1]), permute_dims(transpose(reshape(w, (C, O * K)))))
    y = reshape(conv1d_transpose_col2im(cols), (N, O, W_out))

(``cols`` in float32 for 16-bit data, so that the taps are summed before the one rounding, as the
reference loops do). The transposes of ``x`` (unless it has a twin) and of the weight are copies
of an operand, small next to the GEMM.

Left to the generic loops (``topi.conv1d`` / ``conv1d_transpose``): groups > 1, dtypes other than
float32 / float16 / bfloat16, an ``out_dtype`` other than the data's or float32, operands without a
static channel count or kernel size, and calls outside dataflow blocks.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.op.common import static_int
from ..te import topi
from ..te.call_te import call_te
from .dce import dead_code_elimination
from .pass_infra import FunctionPass
from .patterns import FLOATS, call_op, fusable, tensor_sinfo, void_dtype

__all__ = ["ConvToGemm"]

_SWAP = [0, 2, 1]
# channels-first (NCW / NCHW) -> channels-last (NWC / NHWC), and back, by rank
_TO_LAST = {3: [0, 2, 1], 4: [0, 2, 3, 1]}
_TO_FIRST = {3: [0, 2, 1], 4: [0, 3, 1, 2]}
# pooling ops that run channels last as well (their ``layout`` attribute)
_POOLS = {f"relax.nn.{kind}_pool{n}d" for kind in ("max", "avg", "adaptive_avg") for n in (1, 2)}
_LAST_LAYOUT = {3: "NWC", 4: "NHWC"}
#: The most groups a grouped Conv2D is split into GEMMs for (more: the reference loops, one kernel).
_MAX_GEMM_GROUPS = 64
#: The shortest per-group dot product (C / groups x kH x kW) worth a GEMM per group; shorter ones (ResNeXt's
#: 4 channels x 3 x 3) run faster in the loops. Intel Xeon, 128 channels 3 x 3 at 28 x 28: 2 groups 24.6 ms
#: in the loops -> 0.70 split, 8 groups 4.1 -> 1.0, 32 groups (depth 36) 0.62 in the loops, 1.37 split.
_MIN_GROUP_DEPTH = 64


def _layout_swap(call: rx.Call) -> str | None:
    """``"last"`` for ``permute_dims(v, _TO_LAST[ndim])`` of a 3-D / 4-D ``v`` (axes also as negative
    numbers), ``"first"`` for ``_TO_FIRST``, else None (3-D: the swap is both; ``"last"`` is said)."""
    s = tensor_sinfo(call.args[0])
    axes = call.attrs.get("axes")
    if s is None or s.ndim not in _TO_LAST or axes is None:
        return None
    axes = [int(a) % s.ndim for a in axes]
    return "last" if axes == _TO_LAST[s.ndim] else "first" if axes == _TO_FIRST[s.ndim] else None


def _conv_operands(call: rx.Call):
    """``(x, w, xs, ws, C, K)`` of a convolution call the GEMM lowering takes, else None (``K`` the
    kernel's taps: ``kW`` or ``(kH, kW)``)."""
    x, w = call.args
    xs, ws, out = tensor_sinfo(x), tensor_sinfo(w), tensor_sinfo(call)
    nd = 4 if call.op.name in ("relax.nn.conv2d", "relax.nn.conv2d_transpose") else 3
    if xs is None or ws is None or out is None or xs.ndim != nd or ws.ndim != nd:
        return None
    if xs.dtype not in FLOATS or ws.dtype != xs.dtype or int(call.attrs.get("groups", 1)) != 1:
        return None
    if void_dtype(call.attrs.get("out_dtype")) not in (None, xs.dtype, "float32"):
        return None
    c = static_int(ws.shape[0] if call.op.name.endswith("_transpose") else ws.shape[1])
    ks = [static_int(d) for d in ws.shape[2:]]
    if c is None or any(k is None for k in ks):
        return None
    return x, w, xs, ws, c, ks[0] if nd == 3 else tuple(ks)


class _Rewriter:
    """The rewrite of one dataflow block (see the module docstring): ``bindings`` is the new block,
    ``last[v]`` a variable holding the channels-last form of the channels-first ``v``
    (``permute_dims(v, _TO_LAST)``), ``first[u]`` the channels-first form of the channels-last ``u``,
    ``pending`` the channels-first values that are a transpose this pass added."""

    def __init__(self, bb: BlockBuilder, uses: Counter, vmap: dict) -> None:
        self.bb, self.uses, self.vmap = bb, uses, vmap
        self.bindings: list[rx.VarBinding] = []
        self.last: dict[rx.Var, rx.Expr] = {}
        self.first: dict[rx.Var, rx.Expr] = {}
        self.pending: set[rx.Var] = set()
        self.consts: dict[rx.Var, rx.Constant] = {}

    def emit(self, value: rx.Expr, name: str) -> rx.DataflowVar:
        var = rx.DataflowVar(name, value.struct_info)
        self.bindings.append(rx.VarBinding(var, value))
        return var

    def bind(self, var: rx.Var, value: rx.Expr) -> None:
        self.bindings.append(rx.VarBinding(var, value))

    def pair(self, cf: rx.Expr, cl: rx.Expr) -> None:
        """Record that ``cl`` is the channels-last form of the channels-first ``cf`` (3-D: the swap is its
        own inverse, so each is also the other's transpose the other way)."""
        self.last[cf], self.first[cl] = cl, cf
        if tensor_sinfo(cl).ndim == 3:
            self.last[cl], self.first[cf] = cf, cl

    def bind_pending(self, var: rx.Var, cl: rx.Var) -> None:
        """``var = permute_dims(cl, _TO_FIRST)``, a pending transpose of the channels-last ``cl``."""
        self.bind(var, call_op("permute_dims", [cl], axes=list(_TO_FIRST[tensor_sinfo(cl).ndim])))
        self.pair(var, cl)
        self.pending.add(var)

    def binding(self, b: rx.VarBinding) -> None:
        value = rx.substitute_vars(b.value, self.vmap)
        if isinstance(value, rx.Constant):
            self.consts[b.var] = value
        call = value if isinstance(value, rx.Call) and isinstance(value.op, rx.Op) else None
        done = False
        if call is not None:
            name = call.op.name
            if name == "relax.nn.conv1d":
                done = self.conv1d(b.var, call)
            elif name == "relax.nn.conv2d":
                done = self.conv2d(b.var, call)
            elif name == "relax.nn.conv1d_transpose":
                done = self.conv1d_transpose(b.var, call)
            elif name == "relax.nn.conv2d_transpose":
                done = self.conv2d_transpose(b.var, call)
            elif name in _POOLS:
                done = self.pool(b.var, call)
            elif name == "relax.permute_dims" and _layout_swap(call):
                done = self.swap(b.var, call)
            elif fusable(call.op):
                done = self.elementwise(b.var, call)
        if not done:
            self.bind(b.var, value)

    # -- the rewrites: each returns whether it bound ``var``

    def conv1d(self, var: rx.Var, call: rx.Call) -> bool:
        got = _conv_operands(call)
        if got is None:
            return False
        x, w, _, ws, c, k = got
        a = call.attrs
        n, _, out_w = tensor_sinfo(call).shape
        src, layout = (self.last[x], "NWC") if x in self.last else (x, "NCW")
        strides, padding = [int(v) for v in a.get("strides", (1,))], [int(v) for v in a.get("padding", (0,))]
        if k == 1 and layout == "NWC" and set(strides) == {1} and set(padding) == {0}:
            col = src   # a pointwise convolution of channels-last data: the data are the columns
        else:
            try:
                col = call_te(self.bb, topi.conv1d_im2col, (src,),
                              {"kernel_size": k, "strides": tuple(strides), "padding": tuple(padding),
                               "dilation": tuple(a.get("dilation", (1,))), "layout": layout}, "conv1d_im2col")
            except ValueError:
                return False   # the loops raise the same error where the shapes allow it
            col = self.emit(col, "conv_col")
            col = self.emit(call_op("reshape", [col, rx.ShapeExpr([n, out_w, c * k])]), "conv_col")
        w2 = self.emit(call_op("reshape", [w, rx.ShapeExpr([ws.shape[0], c * k])]), "conv_weight")
        wt = self.emit(call_op("permute_dims", [w2], axes=[1, 0]), "conv_weight_t")
        y = self.emit(call_op("matmul", [col, wt], out_dtype=a.get("out_dtype", "void")), "conv_nwc")
        self.bind_pending(var, y)
        return True

    def conv1d_transpose(self, var: rx.Var, call: rx.Call) -> bool:
        got = _conv_operands(call)
        if got is None:
            return False
        x, w, xs, ws, c, k = got
        a = call.attrs
        n, o, out_w = tensor_sinfo(call).shape
        og = ws.shape[1]
        odt = void_dtype(a.get("out_dtype")) or xs.dtype
        if x in self.last:
            src = self.last[x]
        else:
            src = self.emit(call_op("permute_dims", [x], axes=list(_SWAP)), "deconv_x_nwc")
        w2 = self.emit(call_op("reshape", [w, rx.ShapeExpr([c, og * k])]), "deconv_weight")
        wt = self.emit(call_op("permute_dims", [w2], axes=[1, 0]), "deconv_weight_t")   # (O*K, C): a copy
        wtt = self.emit(call_op("permute_dims", [wt], axes=[1, 0]), "deconv_weight")
        cols = self.emit(call_op("matmul", [src, wtt], out_dtype="float32"), "deconv_cols")
        try:
            out = call_te(self.bb, topi.conv1d_transpose_col2im, (cols,),    # (the output width from the input's)
                          {"out_channels": og, "kernel_size": k, "output_padding": int(tuple(a.get("output_padding", (0,)))[0]),
                           "strides": tuple(a.get("strides", (1,))), "padding": tuple(a.get("padding", (0, 0))),
                           "dilation": tuple(a.get("dilation", (1,))), "out_dtype": odt},
                          "conv1d_transpose_col2im")
        except ValueError:
            return False
        out = self.emit(out, "deconv_rows")
        self.bind(var, call_op("reshape", [out, rx.ShapeExpr([n, o, out_w])]))
        return True

    def depthwise(self, var: rx.Var, call: rx.Call) -> bool:
        """A depthwise ``conv2d`` (groups = in = out channels) computed channels last
        (:func:`builder.te.topi.depthwise_conv2d_nhwc`: the channel loop innermost) on the input's NHWC
        twin (or a transpose of it), then a pending transpose to NCHW."""
        x, w = call.args
        xs, ws, out = tensor_sinfo(x), tensor_sinfo(w), tensor_sinfo(call)
        if xs is None or ws is None or out is None or xs.ndim != 4 or ws.ndim != 4:
            return False
        c, g = static_int(xs.shape[1]), int(call.attrs.get("groups", 1))
        ks = [static_int(d) for d in ws.shape[2:]]
        if c is None or g != c or g == 1 or static_int(ws.shape[0]) != c or static_int(ws.shape[1]) != 1 \
                or None in ks or xs.dtype not in FLOATS or ws.dtype != xs.dtype \
                or void_dtype(call.attrs.get("out_dtype")) not in (None, xs.dtype):
            return False
        a = call.attrs
        src = self.last[x] if x in self.last else self.emit(call_op("permute_dims", [x], axes=list(_TO_LAST[4])),
                                                             "conv_x_nhwc")
        w2 = self.emit(call_op("reshape", [w, rx.ShapeExpr([c, ks[0] * ks[1]])]), "dw_weight")
        wt = self.emit(call_op("permute_dims", [w2], axes=[1, 0]), "dw_weight_t")
        try:
            y = call_te(self.bb, topi.depthwise_conv2d_nhwc, (src, wt),
                        {"kernel_size": tuple(ks), "strides": tuple(a.get("strides", (1, 1))),
                         "padding": tuple(a.get("padding", (0,) * 4)), "dilation": tuple(a.get("dilation", (1, 1)))},
                        "depthwise_conv2d_nhwc")
        except ValueError:
            return False
        self.bind_pending(var, self.emit(y, "conv_nhwc"))
        return True

    def conv2d(self, var: rx.Var, call: rx.Call) -> bool:
        """``conv2d`` (groups 1) as im2col + one GEMM in NHWC, then a pending transpose to NCHW; a
        depthwise one channels last (:meth:`depthwise`), a grouped one as one GEMM per group
        (:meth:`grouped`)."""
        got = _conv_operands(call)
        if got is None:
            return self.depthwise(var, call) or self.grouped(var, call)
        x, w, _, ws, c, (kh, kw) = got
        n, _, oh, ow = tensor_sinfo(call).shape
        src, layout = (self.last[x], "NHWC") if x in self.last else (x, "NCHW")
        wc = w if isinstance(w, rx.Constant) else self.consts.get(w)
        y = self._gemm_conv2d(src, layout, w, wc, c, kh, kw, call.attrs, n, oh, ow, ws.shape[0])
        if y is None:
            return False
        self.bind_pending(var, y)
        return True

    def _gemm_conv2d(self, src, layout: str, w, wc, c: int, kh: int, kw: int, a, n, oh, ow, o):
        """The NHWC result (N, oH, oW, O) of the groups-1 convolution of ``src`` (``layout``) with the
        weight ``w`` (OIHW; ``wc`` its constant, or None): im2col + one GEMM; None when the columns
        cannot be made (the loops then raise the error)."""
        strides, padding = [int(v) for v in a.get("strides", (1, 1))], [int(v) for v in a.get("padding", (0,) * 4)]
        k = c * kh * kw
        # NHWC data and a constant weight: columns with the channels innermost (each tap one contiguous
        # copy), the weight reordered to (O, kH, kW, C) here, once
        order = "HWC" if layout == "NHWC" and wc is not None and (kh, kw) != (1, 1) else "CHW"
        if (kh, kw) == (1, 1) and layout == "NHWC" and set(strides) == {1} and set(padding) == {0}:
            col = src
        else:
            try:
                col = call_te(self.bb, topi.conv2d_im2col, (src,),
                              {"kernel_size": (kh, kw), "strides": tuple(strides), "padding": tuple(padding),
                               "dilation": tuple(a.get("dilation", (1, 1))), "layout": layout, "col_order": order},
                              "conv2d_im2col")
            except ValueError:
                return None
            col = self.emit(col, "conv_col")
            col = self.emit(call_op("reshape", [col, rx.ShapeExpr([n, oh, ow, k])]), "conv_col")
        if order == "HWC":
            data = np.ascontiguousarray(wc.data.transpose(0, 2, 3, 1)).reshape(wc.data.shape[0], k)
            w2 = self.emit(rx.Constant(data, wc.dtype), "conv_weight_hwc")
        else:
            w2 = self.emit(call_op("reshape", [w, rx.ShapeExpr([o, k])]), "conv_weight")
        wt = self.emit(call_op("permute_dims", [w2], axes=[1, 0]), "conv_weight_t")
        # (N, oH, oW, C*kH*kW) @ (C*kH*kW, O): the GEMM's rows are the batch dims flattened, and its
        # output is NHWC as it is, so an epilogue fuses into it
        return self.emit(call_op("matmul", [col, wt], out_dtype=a.get("out_dtype", "void")), "conv_nhwc")

    def grouped(self, var: rx.Var, call: rx.Call) -> bool:
        """A grouped ``conv2d`` (1 < groups <= :data:`_MAX_GEMM_GROUPS`, not depthwise, a per-group depth of
        at least :data:`_MIN_GROUP_DEPTH`) as one GEMM-lowered convolution per group on its channels (a
        slice of the input, of the weight: of a constant at build time), the results concatenated
        channels last."""
        x, w = call.args
        xs, ws, out = tensor_sinfo(x), tensor_sinfo(w), tensor_sinfo(call)
        g = int(call.attrs.get("groups", 1))
        if xs is None or ws is None or out is None or xs.ndim != 4 or ws.ndim != 4 or not 1 < g <= _MAX_GEMM_GROUPS:
            return False
        cg, o = static_int(ws.shape[1]), static_int(ws.shape[0])
        kh, kw = (static_int(d) for d in ws.shape[2:])
        if None in (cg, o, kh, kw) or o % g or xs.dtype not in FLOATS or ws.dtype != xs.dtype \
                or void_dtype(call.attrs.get("out_dtype")) not in (None, xs.dtype, "float32") \
                or cg * kh * kw < _MIN_GROUP_DEPTH:
            return False
        og = o // g
        n, _, oh, ow = out.shape
        src, layout = (self.last[x], "NHWC") if x in self.last else (x, "NCHW")
        axis = 3 if layout == "NHWC" else 1
        wc = w if isinstance(w, rx.Constant) else self.consts.get(w)
        parts = []
        for i in range(g):
            xg = self.emit(call_op("strided_slice", [src], axes=[axis], begin=[i * cg], end=[(i + 1) * cg], strides=[1],
                               assume_inbound=True), "conv_group_x")
            if wc is not None:
                wcg = rx.Constant(np.ascontiguousarray(wc.data[i * og:(i + 1) * og]), wc.dtype)
                wg = self.emit(wcg, "conv_group_weight")
            else:
                wcg = None
                wg = self.emit(call_op("strided_slice", [w], axes=[0], begin=[i * og], end=[(i + 1) * og], strides=[1],
                                   assume_inbound=True), "conv_group_weight")
            y = self._gemm_conv2d(xg, layout, wg, wcg, cg, kh, kw, call.attrs, n, oh, ow, og)
            if y is None:
                return False
            parts.append(y)
        y = self.emit(call_op("concat", [rx.Tuple(parts)], axis=3), "conv_nhwc")
        self.bind_pending(var, y)
        return True

    def pool(self, var: rx.Var, call: rx.Call) -> bool:
        """A pooling of a value with a channels-last twin pools the twin (``layout="NHWC"``); its
        result is channels last too, with a pending transpose."""
        x = call.args[0]
        if x not in self.last or call.attrs.get("layout") in _LAST_LAYOUT.values():
            return False
        layout = _LAST_LAYOUT[tensor_sinfo(x).ndim]
        cl = self.emit(rx.Call(call.op, [self.last[x]], {**call.attrs, "layout": layout, "out_layout": layout}),
                       f"{var.name_hint}_nwc")
        self.bind_pending(var, cl)
        return True

    def conv2d_transpose(self, var: rx.Var, call: rx.Call) -> bool:
        """``conv2d_transpose`` (groups 1) as a GEMM of the NHWC input with the weight (C, O*kH*kW) into
        float32 columns, then the overlap-add (:func:`builder.te.topi.conv2d_transpose_col2im`) into NCHW
        (ConvTranspose1D's lowering per spatial dim; a constant weight's transpose is made at build
        time)."""
        got = _conv_operands(call)
        if got is None:
            return False
        x, w, xs, ws, c, (kh, kw) = got
        a = call.attrs
        n, o, oh, ow = tensor_sinfo(call).shape
        og = ws.shape[1]
        odt = void_dtype(a.get("out_dtype")) or xs.dtype
        src = self.last[x] if x in self.last else self.emit(call_op("permute_dims", [x], axes=list(_TO_LAST[4])),
                                                             "deconv_x_nhwc")
        wc = w if isinstance(w, rx.Constant) else self.consts.get(w)
        if wc is not None:     # (O*kH*kW, C): the linear kernels' weight, made once
            data = np.ascontiguousarray(wc.data.reshape(c, -1).T)
            wt = self.emit(rx.Constant(data, wc.dtype), "deconv_weight_t")
        else:
            w2 = self.emit(call_op("reshape", [w, rx.ShapeExpr([c, og * kh * kw])]), "deconv_weight")
            wt = self.emit(call_op("permute_dims", [w2], axes=[1, 0]), "deconv_weight_t")   # (O*K, C): a copy
        wtt = self.emit(call_op("permute_dims", [wt], axes=[1, 0]), "deconv_weight")
        cols = self.emit(call_op("matmul", [src, wtt], out_dtype="float32"), "deconv_cols")
        try:
            out = call_te(self.bb, topi.conv2d_transpose_col2im, (cols,),    # (the output size from the input's)
                          {"out_channels": og, "kernel_size": (kh, kw),
                           "output_padding": tuple(a.get("output_padding", (0, 0))),
                           "strides": tuple(a.get("strides", (1, 1))), "padding": tuple(a.get("padding", (0,) * 4)),
                           "dilation": tuple(a.get("dilation", (1, 1))), "out_dtype": odt},
                          "conv2d_transpose_col2im")
        except ValueError:
            return False
        self.bind(var, out)
        return True

    def swap(self, var: rx.Var, call: rx.Call) -> bool:
        """``permute_dims`` between channels-first and channels-last: the known other form, or a
        transpose whose result and operand are recorded as each other's forms."""
        x = call.args[0]
        to_last = _layout_swap(call) == "last"
        known = self.last.get(x) if to_last else self.first.get(x)
        if known is not None:
            if isinstance(var, rx.DataflowVar):
                self.vmap[var] = known
            else:
                self.bind(var, known)
            return True
        self.bind(var, call)
        if to_last:
            self.pair(x, var)
        else:
            self.pair(var, x)
        return True

    def elementwise(self, var: rx.Var, call: rx.Call) -> bool:
        """An elementwise / broadcast op over a single-use pending value, computed channels-last."""
        out = tensor_sinfo(var)
        if out is None or out.ndim not in _TO_LAST or not any(
                a in self.pending and self.uses[a] == 1 for a in call.args):
            return False
        nd = out.ndim
        perm = _TO_LAST[nd]
        args = []
        for a in call.args:
            s = tensor_sinfo(a)
            if s is None or s.ndim > nd:
                return False
            if a in self.last:
                args.append(self.last[a])
            elif s.ndim == 0:
                args.append(a)
            else:
                shape = [E.IntImm(1, "int64")] * (nd - s.ndim) + list(s.shape)
                moved = [i for i in perm if static_int(shape[i]) != 1]
                if moved != sorted(moved):
                    return False   # a real transpose of another operand: not worth it
                args.append(self.emit(call_op("reshape", [a, rx.ShapeExpr([shape[i] for i in perm])]), "nwc_operand"))
        cl = self.emit(rx.Call(call.op, args, call.attrs), f"{var.name_hint}_nwc")
        self.bind_pending(var, cl)
        return True


class ConvToGemm(FunctionPass):
    """Pass: see the module docstring. ``ConvToGemm()(mod)``; unused bindings are removed after it."""

    name = "conv_to_gemm"

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """The module with every graph-level function rewritten (:meth:`transform_function`), then the
        bindings and PrimFuncs left unused removed (:func:`~builder.transform.dce.dead_code_elimination`)."""
        return dead_code_elimination(super().transform_module(mod))

    def transform_function(self, bb: BlockBuilder, func: rx.Function, name: str) -> rx.Function:
        """``func`` with its dataflow blocks' convolutions rewritten as the module docstring says:
        ``R.nn.conv1d`` / ``conv2d`` to im2col + matmul in channels-last layout, the transposed ones to a
        GEMM and col2im, depthwise / grouped ones, poolings and elementwise ops onto the channels-last
        twins of their inputs; ``func`` itself when it has no convolution. Later uses of a rewritten
        variable read its replacement."""
        uses: Counter = Counter()
        convs = False
        for block in func.body.blocks:
            for b in block.bindings:
                uses.update(rx.used_vars(b.value))
                convs |= (isinstance(b.value, rx.Call) and isinstance(b.value.op, rx.Op)
                          and b.value.op.name in ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv1d_transpose",
                                                  "relax.nn.conv2d_transpose"))
        if not convs:
            return func
        uses.update(rx.used_vars(func.body.body))
        vmap: dict = {}
        blocks = []
        for block in func.body.blocks:
            if not block.is_dataflow:
                blocks.append(type(block)([rx.VarBinding(b.var, rx.substitute_vars(b.value, vmap))
                                           for b in block.bindings]))
                continue
            rw = _Rewriter(bb, uses, vmap)
            for b in block.bindings:
                rw.binding(b)
            blocks.append(type(block)(rw.bindings))
        body = rx.SeqExpr(blocks, rx.substitute_vars(func.body.body, vmap))
        return rx.Function(func.params, body, func.ret_struct_info, func.attrs, func.is_pure, name=name)
