"""The differential ONNX fuzzer: small random graphs of one or two ops, run by our importer (``from_onnx``,
``compile``, the VM) and by onnxruntime on the same inputs, and compared value by value.

:func:`diff_cases` draws a case from a table of op specs (:data:`SPECS`): each spec draws the op's
attributes (the edge values included: negative steps and out-of-range bounds of Slice, each
``nearest_mode`` / ``coordinate_transformation_mode`` of Resize at scales that make exact .5 ties,
reductions over empty sets and ``noop_with_empty_axes``, opsets <= 12 of the softmax family with a
non-last axis, pools with NaN, quantized integer ops at 0 / 255 / -128 / 127), small shapes (zero-size
dims included) and values (NaN, +-inf, -0.0, huge and denormal floats, ties, integer extremes) from a
numpy generator seeded by Hypothesis. Inputs are graph inputs (static or symbolic dims) or, sometimes,
initializers (the importer's constant folding then computes the op). A second op (a unary one) may
follow the first.

:func:`run_case` (in the worker) runs onnxruntime first (a model it refuses is skipped), then ours, and
:func:`compare` lists the differences. The rules (:func:`tests.fuzz.harness.judge_onnx_diff`): the
shapes and dtypes of every output equal onnxruntime's; integer and bool outputs exactly equal; float
outputs with NaN at the same positions, infinities at the same positions with the same sign, and the
finite values within :data:`TOLERANCE` of the dtype (relative, plus an absolute floor scaled by the
largest finite input for sums). A clean refusal by our importer (``ONNXImportError``, or another
non-internal error, at import or compile) is not a problem, nor is a case where the importer documents
another rule than onnxruntime's (:func:`_documented_divergence`: NaN in MaxPool / ArgMax / ArgMin /
ReduceMax / ReduceMin, an empty ReduceMean), nor a u8 x s8 integer matmul where ours is the spec's exact value
and onnxruntime's saturated (:func:`_u8s8_reference`); an internal error (``TypeError``,
``IndexError``, ...) is, and so is an error at run time (onnxruntime ran the same inputs). A symbolic
input dim is never 1 (exporters keep broadcasting dims static; a symbolic dim is assumed not to broadcast).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

#: (relative, absolute) tolerance of float outputs per dtype.
TOLERANCE = {"float64": (1e-9, 1e-12), "float32": (2e-4, 2e-5), "float16": (2e-2, 2e-3)}

_I64_MAX, _I64_MIN = (1 << 63) - 1, -(1 << 63)

_UNARY = ["Abs", "Neg", "Exp", "Log", "Sqrt", "Relu", "Sigmoid", "Tanh", "Floor", "Ceil", "Round", "Sign",
          "Erf", "Reciprocal", "Sin", "Cos", "Softplus", "Softsign", "Elu", "LeakyRelu", "HardSigmoid", "Selu",
          "HardSwish", "IsNaN", "IsInf", "Identity"]
_BINARY_F = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less", "Greater",
             "LessOrEqual", "GreaterOrEqual"]
_BINARY_I = ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater"]
_REDUCE = ["ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


class Graph:
    """What a spec builds: nodes, inputs (``name -> array``, each a graph input or an initializer), extra
    initializers (the op's constant operands), the output names and the opset. ``folded``: the data inputs
    are initializers too (the importer folds the op at import)."""

    def __init__(self, opset: int = 18) -> None:
        self.nodes: list = []
        self.inputs: dict[str, np.ndarray] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.outputs: list[str] = []
        self.opset = opset
        self.domains: dict[str, int] = {}

    def node(self, op: str, ins: list[str], outs: list[str], **attrs) -> None:
        from onnx import helper

        self.nodes.append(helper.make_node(op, ins, outs, **{k: v for k, v in attrs.items() if v is not None}))


# --- values -----------------------------------------------------------------------------------------------

@st.composite
def shapes(draw, min_rank: int = 1, max_rank: int = 3, max_dim: int = 5, zero: bool = True) -> tuple:
    """A small shape; a zero-size dim now and then (``zero``)."""
    rank = draw(st.integers(min_rank, max_rank))
    low = 0 if zero and draw(st.integers(0, 5)) == 0 else 1
    return tuple(draw(st.integers(low, max_dim)) for _ in range(rank))


def float_values(rng: np.random.Generator, shape, mode: str, dtype: str = "float32") -> np.ndarray:
    """Floats of ``shape``: ``normal`` (scaled normals), ``ties`` (small integers and halves: equal values,
    exact .5), ``special`` (normals with NaN, +-inf, -0.0 scattered), ``nan`` (NaN rows mixed with values),
    ``extreme`` (specials plus huge, tiny and denormal magnitudes)."""
    n = int(np.prod(shape, dtype=np.int64))
    if mode == "ties":
        a = rng.integers(-4, 5, n) / rng.choice([1.0, 2.0])
    else:
        a = rng.standard_normal(n) * rng.choice([0.5, 1.0, 3.0])
    if mode in ("special", "extreme", "nan") and n:
        pool = [np.nan, np.inf, -np.inf, -0.0, 0.0] if mode == "special" else [np.nan] if mode == "nan" else \
            [np.nan, np.inf, -np.inf, -0.0, 1e30, -1e30, 3.4e38, -3.4e38, 1e-30, 1e-42, -1e-42]
        k = int(rng.integers(1, max(2, n // 2) + 1))
        a[rng.integers(0, n, k)] = rng.choice(pool, k)
    return a.reshape(shape).astype(dtype)


def int_values(rng: np.random.Generator, shape, dtype: str, mode: str) -> np.ndarray:
    """Integers of ``shape`` and ``dtype``: ``random`` over the dtype's range, ``low`` / ``high`` (all the
    dtype's smallest / largest value), ``extremes`` (only those two), ``small`` (-3..3)."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    if dtype == "int64":
        lo, hi = -(1 << 20), 1 << 20
    if mode == "low":
        return np.full(shape, info.min, dtype)
    if mode == "high":
        return np.full(shape, info.max, dtype)
    if mode == "extremes":
        return rng.choice(np.array([info.min, info.max], dtype), shape)
    if mode == "small":
        return rng.integers(max(lo, -3), min(hi, 3) + 1, shape).astype(dtype)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def _fmode(draw, nan: bool = True, big: bool = True) -> str:
    modes = ["normal", "ties"] + (["special", "nan"] if nan else []) + (["extreme"] if nan and big else [])
    return draw(st.sampled_from(modes))


def _ints(name_vals: list[int]) -> np.ndarray:
    return np.array(name_vals, np.int64)


# --- op specs: each draws one op into a Graph ---------------------------------------------------------------

def spec_unary(draw, rng, g: Graph) -> None:
    op = draw(st.sampled_from(_UNARY))
    attrs = {}
    if op in ("Elu", "LeakyRelu"):
        attrs["alpha"] = draw(st.sampled_from([0.01, 0.5, 1.0, 2.0]))
    if op == "HardSigmoid":
        attrs.update(alpha=draw(st.sampled_from([0.2, 0.5])), beta=draw(st.sampled_from([0.5, 0.1])))
    dtype = draw(st.sampled_from(["float32", "float32", "float64"])) if op not in ("HardSwish",) else "float32"
    g.inputs["x"] = float_values(rng, draw(shapes()), _fmode(draw), dtype)
    g.node(op, ["x"], ["y"], **attrs)
    g.outputs = ["y"]


def _broadcast_pair(draw) -> tuple[tuple, tuple]:
    a = draw(shapes(1, 3, 4))
    b = list(a[len(a) - draw(st.integers(1, len(a))):])
    for i in range(len(b)):
        if draw(st.integers(0, 3)) == 0:
            b[i] = 1
    return (a, tuple(b)) if draw(st.booleans()) else (tuple(b), a)


def spec_binary(draw, rng, g: Graph) -> None:
    sa, sb = _broadcast_pair(draw)
    if draw(st.booleans()):
        op = draw(st.sampled_from(_BINARY_F))
        mode = _fmode(draw)
        g.inputs["a"] = float_values(rng, sa, mode)
        g.inputs["b"] = float_values(rng, sb, _fmode(draw))
        attrs = {"fmod": 1} if op == "Mod" else {}
    else:
        op = draw(st.sampled_from(_BINARY_I))
        dtype = draw(st.sampled_from(["int32", "int64"]))
        g.inputs["a"] = int_values(rng, sa, dtype, draw(st.sampled_from(["random", "small"])))
        b = int_values(rng, sb, dtype, draw(st.sampled_from(["random", "small"])))
        if op in ("Div", "Mod"):
            b[b == 0] = draw(st.sampled_from([1, -1, 3]))      # integer division by zero is undefined
        g.inputs["b"] = b
        attrs = {"fmod": draw(st.integers(0, 1))} if op == "Mod" else {}
    g.node(op, ["a", "b"], ["y"], **attrs)
    g.outputs = ["y"]


def spec_slice(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 6))
    g.opset = draw(st.sampled_from([10, 13, 18]))
    g.inputs["x"] = float_values(rng, shape, _fmode(draw))
    rank = len(shape)
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    starts, ends, steps = [], [], []
    for ax in axes:
        d = shape[ax]
        bound = st.sampled_from([0, 1, 2, -1, -2, d, d - 1, d + 3, -d, -d - 3, 1 << 40, -(1 << 40),
                                 _I64_MAX, _I64_MIN])
        starts.append(draw(bound))
        ends.append(draw(bound))
        steps.append(draw(st.sampled_from([1, 1, 2, 3, -1, -1, -2, -3])))
    neg = draw(st.booleans())
    g.consts.update(starts=_ints(starts), ends=_ints(ends),
                    axes=_ints([a - rank if neg else a for a in axes]), steps=_ints(steps))
    ins = ["x", "starts", "ends"]
    if draw(st.integers(0, 4)) or any(s != 1 for s in steps):
        ins += ["axes", "steps"]
    g.node("Slice", ins, ["y"])
    g.outputs = ["y"]


def spec_softmax(draw, rng, g: Graph) -> None:
    op = draw(st.sampled_from(["Softmax", "LogSoftmax", "Hardmax"]))
    g.opset = draw(st.sampled_from([11, 12, 12, 13, 18]))    # <= 12: coerced to 2-D at axis
    shape = draw(shapes(2, 4, 4))
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    mode = draw(st.sampled_from(["normal", "ties", "ties"] + (["special"] if op != "Hardmax" else [])))
    g.inputs["x"] = float_values(rng, shape, mode)
    g.node(op, ["x"], ["y"], axis=axis)
    g.outputs = ["y"]


_NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
_COORD = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn",
          "half_pixel_symmetric"]


def spec_resize(draw, rng, g: Graph) -> None:
    g.opset = draw(st.sampled_from([13, 18, 19]))
    rank = draw(st.sampled_from([3, 4, 4]))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) + tuple(draw(st.integers(1, 5))
                                                                       for _ in range(rank - 2))
    mode = draw(st.sampled_from(["nearest", "nearest", "linear", "cubic"]))
    coords = [c for c in _COORD if (c != "half_pixel_symmetric" or g.opset >= 19)
              and (c != "tf_half_pixel_for_nn" or mode == "nearest")]
    attrs = {"mode": mode, "coordinate_transformation_mode": draw(st.sampled_from(coords))}
    if mode == "nearest":
        attrs["nearest_mode"] = draw(st.sampled_from(_NEAREST))
    g.inputs["x"] = float_values(rng, shape, draw(st.sampled_from(["normal", "ties"])))
    g.consts["roi"] = np.array([], np.float32)
    if draw(st.booleans()):
        scales = [1.0, 1.0] + [draw(st.sampled_from([0.5, 1.5, 2.0, 3.0, 0.25, 0.75, 2.5, 1.0, 0.6]))
                               for _ in range(rank - 2)]
        g.consts["scales"] = np.array(scales, np.float32)
        g.node("Resize", ["x", "roi", "scales"], ["y"], **attrs)
    else:
        sizes = list(shape[:2]) + [draw(st.integers(1, 9)) for _ in range(rank - 2)]
        g.consts["sizes"] = _ints(sizes)
        g.node("Resize", ["x", "roi", "", "sizes"], ["y"], **attrs)
    g.outputs = ["y"]


def spec_reduce(draw, rng, g: Graph) -> None:
    op = draw(st.sampled_from(_REDUCE))
    g.opset = draw(st.sampled_from([13, 18]))
    shape = draw(shapes(1, 3, 4))
    if draw(st.integers(0, 2)) == 0:        # an empty set to reduce over
        empty = draw(st.integers(0, len(shape) - 1))
        shape = tuple(0 if i == empty else d for i, d in enumerate(shape))
    rank = len(shape)
    nan = op not in ("ReduceLogSumExp",)
    mode = _fmode(draw, nan=nan, big=False)
    x = float_values(rng, shape, mode)
    if op in ("ReduceLogSum",):
        x = np.abs(x) + np.float32(0.5) if mode == "normal" else x
    g.inputs["x"] = x
    axes = draw(st.one_of(st.none(), st.lists(st.integers(-rank, rank - 1), max_size=rank,
                                              unique_by=lambda a: a % rank)))
    attrs = {"keepdims": draw(st.sampled_from([None, 0, 1]))}
    as_input = g.opset >= 18 or op == "ReduceSum"
    if as_input:
        attrs["noop_with_empty_axes"] = draw(st.sampled_from([None, 0, 1]))
        ins = ["x"]
        if axes is not None:
            g.consts["axes"] = _ints(axes)
            ins.append("axes")
        g.node(op, ins, ["y"], **attrs)
    else:
        g.node(op, ["x"], ["y"], axes=axes or None, **attrs)
    g.outputs = ["y"]


def spec_arg(draw, rng, g: Graph) -> None:
    op = draw(st.sampled_from(["ArgMax", "ArgMin"]))
    shape = draw(shapes(1, 3, 5, zero=False))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    g.inputs["x"] = float_values(rng, shape, draw(st.sampled_from(["ties", "nan", "special", "normal"])))
    g.node(op, ["x"], ["y"], axis=axis, keepdims=draw(st.sampled_from([None, 0, 1])),
           select_last_index=draw(st.sampled_from([None, 0, 1])))
    g.outputs = ["y"]


def spec_pool(draw, rng, g: Graph) -> None:
    op = draw(st.sampled_from(["MaxPool", "MaxPool", "AveragePool"]))
    g.opset = draw(st.sampled_from([12, 18, 19]))
    nd = draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(nd)]
    spatial = [draw(st.integers(k, 6)) for k in kernel]
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), *spatial)
    pads = [draw(st.integers(0, k - 1)) for k in kernel] * 2
    attrs = {"kernel_shape": kernel, "strides": [draw(st.integers(1, 2)) for _ in range(nd)],
             "pads": pads if any(pads) else None, "ceil_mode": draw(st.sampled_from([None, 0, 1]))}
    if op == "MaxPool" and draw(st.booleans()):
        attrs["dilations"] = [draw(st.integers(1, 2)) for _ in range(nd)]
    if op == "AveragePool":
        attrs["count_include_pad"] = draw(st.sampled_from([None, 0, 1]))
    # NaN, not +-inf: onnxruntime's own MaxPool kernels disagree on a window of -inf (-inf when dilated,
    # the float's lowest value otherwise)
    g.inputs["x"] = float_values(rng, shape, draw(st.sampled_from(["nan", "normal", "ties"])))
    g.node(op, ["x"], ["y"], **attrs)
    g.outputs = ["y"]


def _qtype(draw) -> tuple[str, int]:
    from onnx import TensorProto

    return draw(st.sampled_from([("uint8", TensorProto.UINT8), ("int8", TensorProto.INT8)]))


def _qmode(draw) -> str:
    return draw(st.sampled_from(["random", "low", "high", "extremes", "small"]))


def _long_k(draw) -> int:
    """A reduction length: short, or long enough that 255 * 255 * K passes float32's exact integers (2**24)."""
    return draw(st.one_of(st.integers(1, 9), st.sampled_from([258, 1024, 4096])))


def spec_matmul_integer(draw, rng, g: Graph) -> None:
    m, k, n = draw(st.integers(1, 4)), _long_k(draw), draw(st.integers(1, 4))
    ta, tb = _qtype(draw)[0], _qtype(draw)[0]
    batch = (draw(st.integers(1, 2)),) if draw(st.integers(0, 3)) == 0 else ()
    g.inputs["a"] = int_values(rng, batch + (m, k), ta, _qmode(draw))
    g.inputs["b"] = int_values(rng, (k, n), tb, _qmode(draw))
    ins = ["a", "b"]
    if draw(st.booleans()):
        g.consts["az"] = int_values(rng, (), ta, _qmode(draw))
        g.consts["bz"] = int_values(rng, (), tb, _qmode(draw)) if draw(st.booleans()) else \
            int_values(rng, (n,), tb, _qmode(draw))
        ins += ["az", "bz"]
    g.node("MatMulInteger", ins, ["y"])
    g.outputs = ["y"]


def spec_qlinear_matmul(draw, rng, g: Graph) -> None:
    m, k, n = draw(st.integers(1, 4)), _long_k(draw), draw(st.integers(1, 4))
    ta, tb, ty = _qtype(draw)[0], _qtype(draw)[0], _qtype(draw)[0]
    g.inputs["a"] = int_values(rng, (m, k), ta, _qmode(draw))
    g.inputs["b"] = int_values(rng, (k, n), tb, _qmode(draw))
    scale = lambda: np.float32(draw(st.sampled_from([1.0, 0.5, 0.01, 1e-3, 2.0, 0.0625])))  # noqa: E731
    g.consts.update(sa=scale(), za=int_values(rng, (), ta, _qmode(draw)), sb=scale(),
                    zb=int_values(rng, (), tb, _qmode(draw)), sy=scale(), zy=int_values(rng, (), ty, _qmode(draw)))
    g.node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    g.outputs = ["y"]


def spec_conv_integer(draw, rng, g: Graph) -> None:
    c, o, kk = draw(st.sampled_from([1, 2, 3, 300])), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    hw = [draw(st.integers(kk, 5)) for _ in range(2)]     # 300 channels x 3 x 3 taps: past 2**24 at 255
    g.inputs["x"] = int_values(rng, (1, c, *hw), "uint8", _qmode(draw))
    g.inputs["w"] = int_values(rng, (o, c, kk, kk), "uint8", _qmode(draw))
    ins = ["x", "w"]
    if draw(st.booleans()):
        g.consts["xz"] = int_values(rng, (), "uint8", _qmode(draw))
        g.consts["wz"] = int_values(rng, (), "uint8", _qmode(draw))
        ins += ["xz", "wz"]
    pads = [draw(st.integers(0, kk - 1))] * 4
    g.node("ConvInteger", ins, ["y"], pads=pads if any(pads) else None,
           strides=[draw(st.integers(1, 2))] * 2)
    g.outputs = ["y"]


def spec_dynamic_quantize(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 2, 6, zero=False))
    kind = draw(st.sampled_from(["normal", "zeros", "const", "positive", "negative", "big", "ties"]))
    if kind == "zeros":
        x = np.zeros(shape, np.float32)
    elif kind == "const":
        x = np.full(shape, draw(st.sampled_from([1.0, -1.0, 0.5, 300.0, -1e-3])), np.float32)
    else:
        x = float_values(rng, shape, "ties" if kind == "ties" else "normal")
        x = np.abs(x) if kind == "positive" else -np.abs(x) if kind == "negative" else x
        x = x * np.float32(1e6) if kind == "big" else x
    g.inputs["x"] = x.astype(np.float32)
    g.node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    g.outputs = ["y", "scale", "zp"]


def spec_quantize(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 4, zero=False))
    qt = _qtype(draw)[0]
    per_axis = len(shape) > 1 and draw(st.booleans())
    axis = draw(st.integers(0, len(shape) - 1)) if per_axis else None
    n = shape[axis] if per_axis else None
    scales = rng.choice(np.array([1.0, 0.5, 0.1, 1e-3, 3.0], np.float32), (n,) if per_axis else ())
    zps = int_values(rng, (n,) if per_axis else (), qt, _qmode(draw))
    g.consts.update(s=np.asarray(scales, np.float32), z=zps)
    if draw(st.booleans()):
        g.inputs["x"] = float_values(rng, shape, draw(st.sampled_from(["normal", "ties"]))) * np.float32(
            draw(st.sampled_from([1.0, 100.0, 1000.0])))
        g.node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=axis)
    else:
        g.inputs["x"] = int_values(rng, shape, qt, _qmode(draw))
        g.node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=axis)
    g.outputs = ["y"]


def spec_gather(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 4, zero=False))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    d = shape[axis]
    g.inputs["x"] = float_values(rng, shape, _fmode(draw))
    idx = rng.integers(-d, d, draw(shapes(0, 2, 3))).astype(draw(st.sampled_from(["int64", "int32"])))
    if draw(st.booleans()):
        g.node("Gather", ["x", "i"], ["y"], axis=axis)
    else:
        ishape = list(shape)
        ishape[axis] = draw(st.integers(0, 3))
        idx = rng.integers(-d, d, ishape).astype(np.int64)
        g.node("GatherElements", ["x", "i"], ["y"], axis=axis)
    (g.inputs if draw(st.booleans()) else g.consts)["i"] = idx
    g.outputs = ["y"]


def spec_concat(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 3, zero=False))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    names = []
    for i in range(draw(st.integers(1, 5))):
        s = list(shape)
        s[axis] = draw(st.integers(0, 3))
        names.append(f"x{i}")
        g.inputs[names[-1]] = float_values(rng, s, _fmode(draw))
    g.node("Concat", names, ["y"], axis=axis)
    g.outputs = ["y"]


def spec_transpose(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 4, 4))
    g.inputs["x"] = float_values(rng, shape, "normal")
    perm = draw(st.permutations(range(len(shape))))
    g.node("Transpose", ["x"], ["y"], perm=list(perm) if draw(st.integers(0, 4)) else None)
    g.outputs = ["y"]


def spec_pad(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 4, zero=False))
    mode = draw(st.sampled_from(["constant", "reflect", "edge", "wrap"]))
    g.opset = 19 if mode == "wrap" else draw(st.sampled_from([13, 18]))
    g.inputs["x"] = float_values(rng, shape, _fmode(draw))
    limit = lambda d: d - 1 if mode == "reflect" else d  # noqa: E731
    pads = [draw(st.integers(-1 if d > 1 else 0, max(0, limit(d)))) for d in shape] + \
           [draw(st.integers(-1 if d > 2 else 0, max(0, limit(d)))) for d in shape]
    g.consts["pads"] = _ints(pads)
    ins = ["x", "pads"]
    if mode == "constant" and draw(st.booleans()):
        g.consts["value"] = np.array(draw(st.sampled_from([0.0, 1.5, -np.inf, np.nan])), np.float32)
        ins.append("value")
    g.node("Pad", ins, ["y"], mode=mode)
    g.outputs = ["y"]


def spec_cumsum(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 5))
    dtype = draw(st.sampled_from(["float32", "int64", "int32"]))
    g.inputs["x"] = float_values(rng, shape, _fmode(draw, big=False)) if dtype == "float32" else \
        int_values(rng, shape, dtype, "small")
    g.consts["axis"] = np.array(draw(st.integers(-len(shape), len(shape) - 1)), np.int64)
    g.node("CumSum", ["x", "axis"], ["y"], exclusive=draw(st.sampled_from([None, 0, 1])),
           reverse=draw(st.sampled_from([None, 0, 1])))
    g.outputs = ["y"]


def spec_topk(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 5, zero=False))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    g.inputs["x"] = float_values(rng, shape, draw(st.sampled_from(["ties", "normal"])))
    g.consts["k"] = _ints([draw(st.integers(0, shape[axis]))])
    g.node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=draw(st.sampled_from([None, 0, 1])))
    g.outputs = ["v", "i"]


def spec_clip_where(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 4))
    g.inputs["x"] = float_values(rng, shape, _fmode(draw))
    if draw(st.booleans()):
        ins = ["x"]
        lo, hi = sorted([draw(st.sampled_from([-1.0, 0.0, 0.5, 2.0])), draw(st.sampled_from([-0.5, 1.0, 3.0]))])
        for name, v in (("lo", lo), ("hi", hi)):
            if draw(st.booleans()):
                g.consts[name] = np.array(v, np.float32)
                ins.append(name)
            else:
                ins.append("")
        while ins[-1] == "":
            ins.pop()
        g.node("Clip", ins, ["y"])
    else:
        c, b = _broadcast_pair(draw)
        g.inputs["c"] = rng.integers(0, 2, c).astype(bool)
        g.inputs["b"] = float_values(rng, b, _fmode(draw))
        g.inputs["x"] = float_values(rng, b, "normal")
        g.node("Where", ["c", "x", "b"], ["y"])
    g.outputs = ["y"]


def spec_matmul(draw, rng, g: Graph) -> None:
    m, k, n = (draw(st.integers(0 if draw(st.integers(0, 4)) == 0 else 1, 5)) for _ in range(3))
    if draw(st.booleans()):
        batch = draw(shapes(0, 2, 2, zero=False))
        g.inputs["a"] = float_values(rng, (*batch, m, k), _fmode(draw, big=False))
        g.inputs["b"] = float_values(rng, (k, n), "normal")
        g.node("MatMul", ["a", "b"], ["y"])
    else:
        ta, tb = draw(st.integers(0, 1)), draw(st.integers(0, 1))
        g.inputs["a"] = float_values(rng, (k, m) if ta else (m, k), _fmode(draw, big=False))
        g.inputs["b"] = float_values(rng, (n, k) if tb else (k, n), "normal")
        ins = ["a", "b"]
        if draw(st.booleans()):
            g.consts["c"] = float_values(rng, draw(st.sampled_from([(n,), (1, n), (m, n), ()])), "normal")
            ins.append("c")
        g.node("Gemm", ins, ["y"], transA=ta or None, transB=tb or None,
               alpha=draw(st.sampled_from([None, 0.5, 2.0])), beta=draw(st.sampled_from([None, 0.0, 1.5])))
    g.outputs = ["y"]


def spec_conv(draw, rng, g: Graph) -> None:
    nd = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 1, 2]))
    c, o = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(nd)]
    dil = [draw(st.integers(1, 2)) for _ in range(nd)]
    spatial = [draw(st.integers((k - 1) * d + 1, 6)) for k, d in zip(kernel, dil)]
    g.inputs["x"] = float_values(rng, (draw(st.integers(1, 2)), c, *spatial), _fmode(draw, big=False))
    g.consts["w"] = float_values(rng, (o, c // groups, *kernel), "normal")
    ins = ["x", "w"]
    if draw(st.booleans()):
        g.consts["b"] = float_values(rng, (o,), "normal")
        ins.append("b")
    attrs = {"group": groups if groups > 1 else None, "dilations": dil,
             "strides": [draw(st.integers(1, 2)) for _ in range(nd)]}
    if draw(st.booleans()):
        attrs["auto_pad"] = draw(st.sampled_from(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["pads"] = [draw(st.integers(0, k - 1)) for k in kernel] * 2
    g.node("Conv", ins, ["y"], **attrs)
    g.outputs = ["y"]


def spec_cast(draw, rng, g: Graph) -> None:
    from onnx import TensorProto as T

    src = draw(st.sampled_from(["float32", "float64", "int64", "int32", "uint8", "bool"]))
    to = draw(st.sampled_from([("float32", T.FLOAT), ("float64", T.DOUBLE), ("float16", T.FLOAT16),
                               ("int64", T.INT64), ("int32", T.INT32), ("bool", T.BOOL)]))
    shape = draw(shapes(1, 3, 4))
    if src.startswith("float"):
        x = float_values(rng, shape, "normal" if to[0] not in ("float32", "float64", "float16") else _fmode(draw),
                         src)
        if to[0] in ("int64", "int32"):
            x = x * 10
    elif src == "bool":
        x = rng.integers(0, 2, shape).astype(bool)
    else:
        x = int_values(rng, shape, src, "small" if to[0] == "bool" else "random")
    g.inputs["x"] = x
    g.node("Cast", ["x"], ["y"], to=to[1])
    g.outputs = ["y"]


def spec_reshape_expand(draw, rng, g: Graph) -> None:
    shape = draw(shapes(1, 3, 4))
    g.inputs["x"] = float_values(rng, shape, "normal")
    kind = draw(st.sampled_from(["Reshape", "Expand", "Tile", "Flatten", "Squeeze", "Unsqueeze"]))
    n = int(np.prod(shape))
    if kind == "Reshape":
        target = draw(st.sampled_from([[-1], [n], [1, -1], [-1, 1], [0, -1], list(shape[::-1]) if n else [0]]))
        g.consts["s"] = _ints(target)
        g.node("Reshape", ["x", "s"], ["y"])
    elif kind == "Expand":
        out = [d if d != 1 or draw(st.booleans()) else draw(st.integers(1, 3)) for d in shape]
        g.consts["s"] = _ints([draw(st.integers(1, 2))] * draw(st.integers(0, 1)) + out)
        g.node("Expand", ["x", "s"], ["y"])
    elif kind == "Tile":
        g.consts["r"] = _ints([draw(st.integers(0, 3)) for _ in shape])
        g.node("Tile", ["x", "r"], ["y"])
    elif kind == "Flatten":
        g.node("Flatten", ["x"], ["y"], axis=draw(st.integers(-len(shape), len(shape))))
    elif kind == "Squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        if ones and draw(st.booleans()):
            g.consts["a"] = _ints(ones[:draw(st.integers(1, len(ones)))])
            g.node("Squeeze", ["x", "a"], ["y"])
        else:
            g.node("Squeeze", ["x"], ["y"])
    else:
        g.consts["a"] = _ints(sorted(draw(st.lists(st.integers(-len(shape) - 1, len(shape)), min_size=1,
                                                   max_size=2, unique_by=lambda a: a % (len(shape) + 2)))))
        g.node("Unsqueeze", ["x", "a"], ["y"])
    g.outputs = ["y"]


def spec_norm(draw, rng, g: Graph) -> None:
    shape = draw(shapes(2, 4, 4, zero=False))
    kind = draw(st.sampled_from(["LayerNormalization", "InstanceNormalization", "LpNormalization",
                                 "MeanVarianceNormalization"]))
    g.inputs["x"] = float_values(rng, shape, draw(st.sampled_from(["normal", "ties"])))
    if kind == "LayerNormalization":
        axis = draw(st.integers(-len(shape), len(shape) - 1))
        ax = axis % len(shape)
        g.consts["s"] = float_values(rng, shape[ax:], "normal")
        g.consts["b"] = float_values(rng, shape[ax:], "normal")
        g.node(kind, ["x", "s", "b"], ["y"], axis=axis, epsilon=draw(st.sampled_from([None, 1e-3])))
    elif kind == "InstanceNormalization":
        shape = shape if len(shape) >= 3 else shape + (3,)
        g.inputs["x"] = float_values(rng, shape, "normal")
        g.consts["s"] = float_values(rng, (shape[1],), "normal")
        g.consts["b"] = float_values(rng, (shape[1],), "normal")
        g.node(kind, ["x", "s", "b"], ["y"])
    elif kind == "LpNormalization":
        g.node(kind, ["x"], ["y"], axis=draw(st.integers(-len(shape), len(shape) - 1)), p=draw(st.sampled_from([1, 2])))
    else:
        g.node(kind, ["x"], ["y"])
    g.outputs = ["y"]


#: name -> spec; a spec draws one op (and its operands) into a :class:`Graph`.
SPECS = {name[5:]: fn for name, fn in dict(globals()).items() if name.startswith("spec_")}


# --- a case: spec -> serialized model + inputs ----------------------------------------------------------------

def _make_model(g: Graph, symbolic: set[str]) -> bytes | None:
    """The serialized model of ``g`` (inputs in ``symbolic`` with dim_param dims; outputs typed by shape
    inference), or None when shape inference cannot type every output."""
    import onnx
    from onnx import helper, numpy_helper

    def vi(name, arr):
        elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
        # a symbolic dim is never 1 here: a dim that broadcasts is static in the models exporters write
        dims = [f"{name}_d{i}" if name in symbolic and d != 1 else d for i, d in enumerate(arr.shape)]
        return helper.make_tensor_value_info(name, elem, dims)

    graph_inputs = [vi(k, v) for k, v in g.inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in g.consts.items()]
    graph = helper.make_graph(g.nodes, "diff", graph_inputs, [onnx.ValueInfoProto(name=o) for o in g.outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])
    model.ir_version = 8
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - onnx's own inference failed: an invalid combination, skipped
        return None
    for out, inf in zip(model.graph.output, inferred.graph.output):
        if not inf.type.tensor_type.elem_type or not inf.type.tensor_type.HasField("shape"):
            return None
        out.type.CopyFrom(inf.type)
    return model.SerializeToString()


class DiffCase:
    """One differential case: ``desc`` (the spec, opset and how the inputs are given), ``data`` (the
    serialized model, None when onnx's shape inference rejected the drawn graph) and ``inputs`` ({graph
    input name: array}). Its repr is the description and the inputs' shapes (what Hypothesis prints)."""

    def __init__(self, desc: str, data: bytes | None, inputs: dict) -> None:
        self.desc, self.data, self.inputs = desc, data, inputs

    def __repr__(self) -> str:
        shapes_ = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.inputs.items())
        return f"<{self.desc}; {shapes_}>"


@st.composite
def diff_cases(draw, specs: list[str] | None = None) -> DiffCase:
    """One differential case (see the module docstring and :class:`DiffCase`) from the specs named in
    ``specs`` (default: all of :data:`SPECS`)."""
    from onnx import helper

    name = draw(st.sampled_from(specs or sorted(SPECS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = Graph()
    SPECS[name](draw, rng, g)
    if len(g.outputs) == 1 and draw(st.integers(0, 4)) == 0:    # a second op on the first one's result
        follow = draw(st.sampled_from(["Neg", "Abs", "Relu", "Exp", "Sigmoid", "Identity"]))
        if name in ("matmul_integer", "conv_integer", "binary", "cast", "arg", "quantize", "cumsum"):
            follow = draw(st.sampled_from(["Neg", "Abs", "Identity"]))   # integer results: ops of every dtype
        g.nodes[-1].output[0] = "y0"
        g.nodes.append(helper.make_node(follow, ["y0"], ["y"]))
        name += f"+{follow}"
    folded = draw(st.integers(0, 3)) == 0
    if folded:      # the data as initializers: the importer folds the op (or keeps constants)
        g.consts.update(g.inputs)
        g.inputs = {}
    symbolic = {k for k in g.inputs if draw(st.integers(0, 2)) == 0}
    data = _make_model(g, symbolic)
    desc = f"{name} opset {g.opset}{' folded' if folded else ''}{' symbolic' if symbolic else ''}"
    return DiffCase(desc, data, dict(g.inputs))


# --- comparison -------------------------------------------------------------------------------------------

def compare(ours, ref: list, inputs: dict | None = None) -> list[str]:
    """Differences between our outputs ``ours`` (an array or a tuple of them) and onnxruntime's ``ref`` (a
    list), by the rules of the module docstring; the absolute floor of float outputs grows with the
    largest finite float input (sums of large values round differently in another order)."""
    got = list(ours) if isinstance(ours, (tuple, list)) else [ours]
    if len(got) != len(ref):
        return [f"{len(got)} outputs, onnxruntime has {len(ref)}"]
    scale = 1.0
    for v in (inputs or {}).values():
        v = np.asarray(v)
        if v.dtype.kind == "f" and v.size:
            finite = np.abs(v[np.isfinite(v)].astype(np.float64))
            if finite.size:
                scale = max(scale, float(finite.max()))
    out = []
    for i, (a, b) in enumerate(zip(got, ref)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"output {i}: {a.dtype}{list(a.shape)}, onnxruntime {b.dtype}{list(b.shape)}")
            continue
        if a.dtype.kind != "f":
            bad = np.argwhere(a != b)
            if bad.size:
                at = tuple(int(j) for j in bad[0])
                out.append(f"output {i}: {len(bad)} of {a.size} values differ, first at {list(at)}: "
                           f"{a[at]!r} vs onnxruntime {b[at]!r}")
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        inf_diff = (np.isinf(a64) | np.isinf(b64)) & ~(nan_a | nan_b) & (a64 != b64)
        rel, absolute = TOLERANCE.get(str(a.dtype), (1e-3, 1e-4))
        fin = np.isfinite(a64) & np.isfinite(b64)
        val_diff = np.zeros(a.shape, bool)
        val_diff[fin] = np.abs(a64[fin] - b64[fin]) > absolute * scale + rel * np.abs(b64[fin])
        for what, mask in (("NaN", nan_a != nan_b), ("inf", inf_diff), ("value", val_diff)):
            bad = np.argwhere(mask)
            if bad.size:
                at = tuple(int(j) for j in bad[0])
                out.append(f"output {i}: {len(bad)} {what} mismatch(es) of {a.size}, first at {list(at)}: "
                           f"{a[at]!r} vs onnxruntime {b[at]!r}")
    return out


def run_case(path: str, inputs_path: str) -> dict:
    """In the worker: onnxruntime and then ours on the model at ``path`` with the arrays of the ``.npz`` at
    ``inputs_path`` (named like the graph inputs). Returns ``{"skip": why}`` when onnxruntime refuses the
    model or its inputs, else ``{"ours": {"ok": [differences]} or {"error": ...}}``."""
    import onnxruntime as ort

    from .worker import _outcome

    with np.load(inputs_path, allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 4
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        order = [i.name for i in sess.get_inputs()]
        ref = sess.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime refuses: no reference, the case is skipped
        return {"skip": f"{type(exc).__name__}: {str(exc)[:300]}"}

    documented = _documented_divergence(path, feeds)
    if documented:
        return {"skip": documented}

    def ours():
        import builder
        from builder.frontend import from_onnx
        from runtime import VirtualMachine

        main = VirtualMachine(builder.compile(from_onnx(path)))["main"]
        try:
            result = main(*[feeds[k] for k in order])
        except Exception as exc:  # noqa: BLE001 - refusing at run time what onnxruntime ran is a difference
            return [f"refused at run time what onnxruntime runs: {type(exc).__name__}: {str(exc)[:300]}"]
        problems = compare(result, ref, feeds)
        if problems:
            exact = _u8s8_reference(path, feeds)
            if exact is not None and not compare(result, [exact], feeds):
                return []      # ours is the spec's value where onnxruntime's u8 x s8 pairs saturated
        return problems

    return {"ours": _outcome(ours)}


def _u8s8_reference(path: str, feeds: dict) -> np.ndarray | None:
    """The exact output of a one-node ``MatMulInteger`` / ``QLinearMatMul`` graph of uint8 A and int8 B (int64
    sums; QLinearMatMul's rescale in float64, rounded half to even, saturated to y's type), else None.

    onnxruntime's u8 x s8 kernels on x86 without VNNI multiply with ``vpmaddubsw``, whose int16 pair sums
    saturate (its quantization guide: U8S8 "may suffer from saturation" on AVX2 / AVX-512 without VNNI, e.g.
    255 * -128 twice), so on such hosts the spec, not onnxruntime, decides the case."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    if len(model.graph.node) != 1 or model.graph.node[0].op_type not in ("MatMulInteger", "QLinearMatMul"):
        return None
    node = model.graph.node[0]
    values = {**{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **feeds}

    def get(i: int):
        return np.asarray(values[node.input[i]]) if len(node.input) > i and node.input[i] else None

    def rows(z):      # a per-row zero point / scale of A: (M,) against A's rows
        return z if z is None or z.ndim == 0 else z.reshape(-1, 1)

    if node.op_type == "MatMulInteger":
        a, b, za, zb = get(0), get(1), rows(get(2)), get(3)
    else:
        a, sa, za, b, sb, zb, sy, zy = (get(i) for i in range(8))
        sa, za = rows(sa), rows(za)
    if a.dtype != np.uint8 or b.dtype != np.int8:
        return None
    acc = np.matmul(a.astype(np.int64) - (0 if za is None else za.astype(np.int64)),
                    b.astype(np.int64) - (0 if zb is None else zb.astype(np.int64)))
    if node.op_type == "MatMulInteger":
        return acc.astype(np.int32)
    info = np.iinfo(zy.dtype)
    y = np.rint(acc * (sa.astype(np.float64) * sb.astype(np.float64) / sy.astype(np.float64))) + zy.astype(np.float64)
    return np.clip(y, info.min, info.max).astype(zy.dtype)


def _documented_divergence(path: str, feeds: dict) -> str | None:
    """Why the case is not compared with onnxruntime, where the importer documents another rule than
    onnxruntime's for it (``builder/frontend/onnx/convert_conv_pool.py``): a MaxPool window holding a NaN gives NaN (onnxruntime
    keeps or drops it by kernel), ArgMax / ArgMin take the first NaN of a row (numpy's rule), ReduceMax /
    ReduceMin of a set holding a NaN give NaN (numpy's; onnxruntime skips a NaN that is not first), ReduceMean over
    an empty set is NaN (the spec's "undefined"; onnxruntime gives 0). None otherwise."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    ops = {n.op_type for n in model.graph.node}
    arrays = list(feeds.values()) + [numpy_helper.to_array(t) for t in model.graph.initializer]
    nan = any(a.dtype.kind == "f" and np.isnan(a).any() for a in arrays)
    nan_rules = {"MaxPool", "ArgMax", "ArgMin", "ReduceMax", "ReduceMin"}
    if nan and ops & nan_rules:
        return f"documented NaN rule of {sorted(ops & nan_rules)}"
    if "ReduceMean" in ops and any(a.size == 0 for a in arrays if a.dtype.kind == "f"):
        return "documented NaN of an empty ReduceMean"
    return None
