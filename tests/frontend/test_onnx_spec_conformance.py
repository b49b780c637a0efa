"""ONNX ops whose results differed from the ONNX spec and onnxruntime (issue 40): Slice's clamping of
starts / ends for negative steps, Hardmax of opsets <= 12 (2-D coercion), Resize nearest at exact .5 ties,
reductions over empty sets and empty axes, MaxPool with NaN; against onnxruntime, onnx's reference
evaluator or a float64 / exact-fraction numpy reading of the spec."""
import itertools
import warnings
from fractions import Fraction

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="from_onnx needs the onnx package (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="the reference results come from onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from helpers.onnx_models import make_model, outputs_of_both, runner_of_both  # noqa: E402

F = TensorProto.FLOAT
rng = np.random.default_rng(40)


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def spec_slice_indices(start, end, step, dim):
    """The indices ONNX Slice-13 selects on one axis, written out from the spec's text (independent of the
    importer): negative bounds get dim added; step > 0 clamps both to [0, dim]; step < 0 clamps start to
    [0, dim - 1] and end to [-1, dim - 1]; an end of INT64_MAX (the spec's "to the end" sentinel) runs to the
    end in the step's direction, as onnxruntime reads it."""
    if end == 2**63 - 1:
        end = dim if step > 0 else -dim - 1
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    out, i = [], start
    while (i < end) if step > 0 else (i > end):
        out.append(i)
        i += step
    return out


INT_MAX, INT_MIN = 2**63 - 1, -2**63
BOUNDS = [INT_MIN, -20, -6, -5, -1, 0, 1, 4, 5, 7, INT_MAX]


@pytest.mark.parametrize("step", [-3, -1, 1, 2])
def test_slice_clamping_every_bound(step):
    """Every pair of starts / ends around and beyond a dim of 5 (below -dim, -dim, -1, 0, dim, INT_MAX /
    INT_MIN) with positive and negative steps, on a tensor (the gather / strided_slice path) and on a
    constant (folded at import): onnxruntime's result and the spec's indices."""
    pairs = list(itertools.product(BOUNDS, BOUNDS))
    x = rng.standard_normal((5, 3)).astype(np.float32)
    nodes, outs, inits = [], [], [("c", x), ("ax", np.array([0], np.int64)), ("st", np.array([step], np.int64))]
    for k, (s, e) in enumerate(pairs):
        inits += [(f"s{k}", np.array([s], np.int64)), (f"e{k}", np.array([e], np.int64))]
        nodes.append(helper.make_node("Slice", ["x", f"s{k}", f"e{k}", "ax", "st"], [f"y{k}"]))
        nodes.append(helper.make_node("Slice", ["c", f"s{k}", f"e{k}", "ax", "st"], [f"z{k}"]))
        outs += [vi(f"y{k}", [f"n{k}", 3]), vi(f"z{k}", [f"m{k}", 3])]
    model = make_model(nodes, [vi("x", [5, 3])], outs, inits, opset=17)
    got, want = outputs_of_both(model, {"x": x})
    for k, (s, e) in enumerate(pairs):
        ref = x[spec_slice_indices(s, e, step, 5)]
        for g, w in ((got[2 * k], want[2 * k]), (got[2 * k + 1], want[2 * k + 1])):
            np.testing.assert_array_equal(w, ref, err_msg=f"onnxruntime vs the spec at {(s, e, step)}")
            np.testing.assert_array_equal(g, ref, err_msg=f"ours at {(s, e, step)}")


def test_slice_several_axes_mixed_steps():
    """Two axes at once, one stepping backwards from below -dim and one forwards past the end, axes given
    out of order and negative, on a 3-d tensor and a constant."""
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    starts, ends, axes, steps = [-9, 1], [INT_MIN, 100], [-1, 1], [-2, 2]
    inits = [("c", x), ("s", np.array(starts, np.int64)), ("e", np.array(ends, np.int64)),
             ("a", np.array(axes, np.int64)), ("st", np.array(steps, np.int64))]
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]),
             helper.make_node("Slice", ["c", "s", "e", "a", "st"], ["z"])]
    model = make_model(nodes, [vi("x", [4, 6, 5])], [vi("y", [4, "p", "q"]), vi("z", [4, "p", "q"])], inits, opset=17)
    got, want = outputs_of_both(model, {"x": x})
    ref = x[:, spec_slice_indices(1, 100, 2, 6)][:, :, spec_slice_indices(-9, INT_MIN, -2, 5)]
    assert ref.shape == (4, 3, 1)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(w, ref)
        np.testing.assert_array_equal(g, ref)


def hardmax_2d_reference(x, axis):
    """Hardmax-11 from its text: x coerced to [prod(dims[:axis]), prod(dims[axis:])], 1 at the first maximum of
    each row."""
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    out = np.zeros_like(rows)
    out[np.arange(rows.shape[0]), rows.argmax(axis=1)] = 1
    return out.reshape(x.shape).astype(x.dtype)


@pytest.mark.parametrize("opset", [7, 11, 12, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2])
def test_hardmax_old_opsets_coerce_to_2d(opset, axis):
    """Hardmax at opsets <= 12 (converted to 13 before import) takes the maximum over all the dims from axis on
    (default axis 1); at 13 along axis only (default -1); on a symbolic batch; onnxruntime and the spec's text."""
    if opset < 11 and axis is not None and axis < 0:
        pytest.skip("negative axes came with opset 11")
    kw = {} if axis is None else {"axis": axis}
    model = make_model([helper.make_node("Hardmax", ["x"], ["y"], **kw)], [vi("x", ["n", 3, 4])],
                       [vi("y", ["n", 3, 4])], opset=opset)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x[1, 2, 1] = x[1, 2, 3] = x[1].max() + 1   # a tie: the first maximum wins
    got, want = outputs_of_both(model, {"x": x})
    if opset < 13:
        a = 1 if axis is None else axis % 3
        ref = hardmax_2d_reference(x, a)
    else:
        a = -1 if axis is None else axis
        ref = (np.arange(x.shape[a]).reshape([-1 if i == a % 3 else 1 for i in range(3)])
               == np.expand_dims(x.argmax(axis=a), a)).astype(np.float32)
    np.testing.assert_array_equal(want[0], ref)
    np.testing.assert_array_equal(got[0], ref)


NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
COORDS = ["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners"]


def spec_nearest_indices(n_in, n_out, coord, mode):
    """Resize-19's nearest source index along one axis, in exact fractions (the spec's formulas, scale =
    n_out / n_in), clamped to [0, n_in - 1]."""
    out = []
    for i in range(n_out):
        if coord == "asymmetric":
            x = Fraction(i * n_in, n_out)
        elif coord == "align_corners":
            x = Fraction(i * (n_in - 1), n_out - 1) if n_out > 1 else Fraction(0)
        elif coord == "pytorch_half_pixel" and n_out == 1:
            x = Fraction(0)
        else:
            x = (i + Fraction(1, 2)) * Fraction(n_in, n_out) - Fraction(1, 2)
        r = {"floor": math_floor(x), "ceil": -math_floor(-x), "round_prefer_floor": -math_floor(Fraction(1, 2) - x),
             "round_prefer_ceil": math_floor(x + Fraction(1, 2))}[mode]
        out.append(min(max(r, 0), n_in - 1))
    return out


def math_floor(q: Fraction) -> int:
    return q.numerator // q.denominator


# (in, out) pairs whose coordinates hit exact .5 ties (and exact integers) for some output index, with
# scales that onnxruntime's float32 arithmetic represents exactly
TIE_PAIRS = [(4, 6), (4, 7), (4, 13), (6, 9), (12, 9), (3, 9), (4, 12), (6, 10), (8, 4), (8, 12), (2, 5), (5, 2)]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", NEAREST_MODES)
def test_resize_nearest_ties(coord, mode):
    """Every nearest_mode and coordinate transformation on sizes whose coordinates fall on exact .5 ties, 1-D
    (NCW) and 2-D (NCHW, H and W resized differently): the spec's exact indices and onnxruntime's result."""
    for (h_in, h_out), (w_in, w_out) in zip(TIE_PAIRS, TIE_PAIRS[1:] + TIE_PAIRS[:1]):
        x = rng.standard_normal((1, 2, h_in, w_in)).astype(np.float32)
        node = helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="nearest",
                                coordinate_transformation_mode=coord, nearest_mode=mode)
        model = make_model([node], [vi("x", [1, 2, h_in, w_in])], [vi("y", [1, 2, h_out, w_out])],
                           [("sz", np.array([1, 2, h_out, w_out], np.int64))], opset=19)
        got, want = outputs_of_both(model, {"x": x})
        ref = x[:, :, spec_nearest_indices(h_in, h_out, coord, mode)][:, :, :, spec_nearest_indices(w_in, w_out, coord, mode)]
        np.testing.assert_array_equal(want[0], ref, err_msg=f"onnxruntime {(h_in, h_out, w_in, w_out)}")
        np.testing.assert_array_equal(got[0], ref, err_msg=f"ours {(h_in, h_out, w_in, w_out)}")


@pytest.mark.parametrize("coord", COORDS)
def test_resize_nearest_exact_on_every_size_and_symbolic(coord):
    """Every in / out length up to 13 against the spec's exact indices (onnxruntime's float32 coordinates miss
    some exact integers, 10 -> 6 half_pixel floor: 6.9999995), and a symbolic input length (the indices then
    computed when the model runs) resized by a whole scale and to a size."""
    # one model per coordinate mode (every nearest_mode x every output length), the input length symbolic so
    # that one compile serves every input length
    cases = [(mode, n) for mode in NEAREST_MODES for n in range(1, 14)]
    nodes = [helper.make_node("Resize", ["x", "", "", f"sz{n}"], [f"y{i}"], mode="nearest",
                              coordinate_transformation_mode=coord, nearest_mode=mode)
             for i, (mode, n) in enumerate(cases)]
    inits = [(f"sz{n}", np.array([1, 1, n], np.int64)) for n in range(1, 14)]
    model = make_model(nodes, [vi("x", [1, 1, "w"])], [vi(f"y{i}", [1, 1, n]) for i, (_, n) in enumerate(cases)],
                       inits, opset=19)
    run = runner_of_both(model)
    for n_in in range(1, 14):
        x = np.arange(n_in, dtype=np.float32).reshape(1, 1, n_in)
        got, _ = run({"x": x})
        for (mode, n), g in zip(cases, got):
            np.testing.assert_array_equal(g.ravel(), spec_nearest_indices(n_in, n, coord, mode),
                                          err_msg=f"{mode} {n_in} -> {n}")
    for mode in NEAREST_MODES:
        nodes = [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest", coordinate_transformation_mode=coord,
                                  nearest_mode=mode),
                 helper.make_node("Resize", ["x", "", "", "sz"], ["z"], mode="nearest",
                                  coordinate_transformation_mode=coord, nearest_mode=mode)]
        model = make_model(nodes, [vi("x", [1, 1, "w"])], [vi("y", [1, 1, "w2"]), vi("z", [1, 1, 7])],
                           [("sc", np.array([1, 1, 3], np.float32)), ("sz", np.array([1, 1, 7], np.int64))], opset=19)
        run = runner_of_both(model)
        for n_in in (2, 4, 5):
            x = np.arange(n_in, dtype=np.float32).reshape(1, 1, n_in)
            got, _ = run({"x": x})
            np.testing.assert_array_equal(got[0].ravel(), spec_nearest_indices(n_in, 3 * n_in, coord, mode))
            np.testing.assert_array_equal(got[1].ravel(), spec_nearest_indices(n_in, 7, coord, mode))


REDUCTIONS = ["ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def numpy_reduction(name, x, axis):
    """The reductions in float64 numpy with the spec's value for an empty set (ReduceMax -inf, ReduceMin +inf,
    ReduceLogSum(Exp) log(0) = -inf, the sums 0, the product 1, the mean 0 / 0 = NaN)."""
    x = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"ReduceMax": lambda: np.max(x, axis, initial=-np.inf), "ReduceMin": lambda: np.min(x, axis, initial=np.inf),
                "ReduceMean": lambda: np.sum(x, axis) / x.shape[axis], "ReduceSum": lambda: np.sum(x, axis),
                "ReduceProd": lambda: np.prod(x, axis), "ReduceL1": lambda: np.sum(np.abs(x), axis),
                "ReduceL2": lambda: np.sqrt(np.sum(x * x, axis)), "ReduceSumSquare": lambda: np.sum(x * x, axis),
                "ReduceLogSum": lambda: np.log(np.sum(x, axis)),
                "ReduceLogSumExp": lambda: np.logaddexp.reduce(x, axis)}[name]()


def reduce_model(name, shape, in_shape, constant=None, **kw):
    inits = [("ax", np.array([1], np.int64))] + ([("c", constant)] if constant is not None else [])
    nodes = [helper.make_node(name, ["x", "ax"], ["y"], keepdims=0, **kw)]
    outs = [vi("y", [in_shape[0], in_shape[2]])]
    if constant is not None:
        nodes.append(helper.make_node(name, ["c", "ax"], ["z"], keepdims=0, **kw))
        outs.append(vi("z", [shape[0], shape[2]]))
    return make_model(nodes, [vi("x", in_shape)], outs, inits, opset=18)


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("symbolic", [False, True])
def test_reductions_over_an_empty_set(name, symbolic):
    """A reduced dim of 0 (static, symbolic, and a folded constant): the spec's value from float64 numpy, and
    onnxruntime's, but for ReduceMean (the spec: "undefined"; ours NaN as numpy's and onnx's ReferenceEvaluator,
    onnxruntime 0)."""
    x = np.zeros((2, 0, 3), np.float32)
    model = reduce_model(name, x.shape, ["a", "b", 3] if symbolic else [2, 0, 3], constant=x)
    got, want = outputs_of_both(model, {"x": x})
    ref = numpy_reduction(name, x, 1)
    if name == "ReduceMean":
        from onnx.reference import ReferenceEvaluator
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # numpy: "Mean of empty slice"
            want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(w.astype(np.float64), ref)
        np.testing.assert_array_equal(g.astype(np.float64), ref)


@pytest.mark.parametrize("name", ["ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceSum"])
def test_reductions_of_infinities(name):
    """Rows of nothing but -inf or +inf, mixed with finite values and +-FLT_MAX (which the reducers must keep
    apart from the infinities): onnxruntime and float64 numpy."""
    big = np.finfo(np.float32).max
    x = np.array([[[-np.inf, np.inf, 1.0], [-np.inf, np.inf, -big], [-np.inf, np.inf, big]],
                  [[-big, big, -np.inf], [2.0, -3.0, -np.inf], [-big, big, -np.inf]]], np.float32)
    model = reduce_model(name, x.shape, ["a", "b", 3], constant=x)
    got, want = outputs_of_both(model, {"x": x})
    ref = numpy_reduction(name, x, 1)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(w.astype(np.float64), ref.astype(np.float32))
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_noop_with_empty_axes_applies_the_element_function(name):
    """No axes with noop_with_empty_axes=1: the identity for the plain reductions, the element function for the
    composite ones (ReduceL1 |x|, ReduceL2 sqrt(x * x), ReduceSumSquare x * x, ReduceLogSum log x,
    ReduceLogSumExp x); onnxruntime and onnx's ReferenceEvaluator (but at +-inf, where the reference's shifted
    LogSumExp gives NaN), on a tensor and a folded constant."""
    from onnx.reference import ReferenceEvaluator

    x = np.array([[100.0, -100.0, 1e20], [0.0, -1.0, 0.5], [2.0, np.inf, -np.inf]], np.float32)
    nodes = [helper.make_node(name, ["x"], ["y"], noop_with_empty_axes=1),
             helper.make_node(name, ["c"], ["z"], noop_with_empty_axes=1)]
    model = make_model(nodes, [vi("x", ["n", 3])], [vi("y", ["n", 3]), vi("z", [3, 3])], [("c", x)], opset=18)
    got, want = outputs_of_both(model, {"x": x})
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = ReferenceEvaluator(model).run(None, {"x": x})
    finite = np.isfinite(x) if name == "ReduceLogSumExp" else np.ones(x.shape, bool)
    for g, w, r in zip(got, want, ref):
        np.testing.assert_array_equal(w[finite], r[finite])
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_max_pool_propagates_nan():
    """MaxPool over windows holding NaN gives NaN (numpy's max, what ReduceMax and GlobalMaxPool give in onnx's
    ReferenceEvaluator and GlobalMaxPool in onnxruntime): the spec does not say, and onnxruntime's MaxPool
    drops a NaN or keeps it depending on where in the window it stands; a window covering the whole input
    equals GlobalMaxPool."""
    x = np.array([[[1.0, np.nan, 3.0, np.nan, 5.0, 4.0]]], np.float32)
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2]),
             helper.make_node("MaxPool", ["x"], ["w"], kernel_shape=[6]),
             helper.make_node("GlobalMaxPool", ["x"], ["g"])]
    model = make_model(nodes, [vi("x", [1, 1, 6])], [vi("y", [1, 1, 5]), vi("w", [1, 1, 1]), vi("g", [1, 1, 1])],
                       opset=18)
    got, want = outputs_of_both(model, {"x": x})
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), 2, axis=2)
    np.testing.assert_array_equal(got[0], np.max(windows, axis=-1).astype(np.float32))
    np.testing.assert_array_equal(got[1], want[2])
    np.testing.assert_array_equal(got[2], want[2])


def test_where_symbolic_dims_broadcast_or_refuse():
    """Where over symbolic dims the shapes cannot relate (condition ``[c0, c1]``, x and y ``[x0, x1]``): fed
    equal shapes, onnxruntime's values; fed a condition (1, 1) against (4, 2) (numpy broadcasting at run time,
    which the compiled code does not do for symbolic dims), a clear error, as Add gives, never a result of
    another shape (it returned shape (1, 1))."""
    model = make_model([helper.make_node("Where", ["c", "x", "y"], ["z"])],
                       [vi("c", ["c0", "c1"], TensorProto.BOOL), vi("x", ["x0", "x1"]), vi("y", ["x0", "x1"])],
                       [vi("z", ["z0", "z1"])], opset=13)
    run = runner_of_both(model)
    x, y = rng.standard_normal((4, 2)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    (got,), (want,) = run({"c": rng.random((4, 2)) < 0.5, "x": x, "y": y})
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    for c in [(1, 1), (4, 1), (1, 2)]:
        with pytest.raises(ValueError, match="shapes do not match"):
            run({"c": np.ones(c, bool), "x": x, "y": y})
    add = make_model([helper.make_node("Add", ["c", "x"], ["z"])], [vi("c", ["c0", "c1"]), vi("x", ["x0", "x1"])],
                     [vi("z", ["z0", "z1"])], opset=13)
    with pytest.raises(ValueError, match="shapes do not match"):
        runner_of_both(add)({"c": np.ones((1, 1), np.float32), "x": x})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("given", ["none", "min", "max"])
def test_clip_default_bounds_are_the_dtypes_limits(opset, dtype, given):
    """Clip-11 / 13 with a bound left out: the spec's defaults are ``numeric_limits<T>::lowest()`` and
    ``max()``, so +-inf becomes +-``finfo(T).max`` (inf stayed inf), NaN stays NaN; against numpy's
    ``clip`` to those limits, and against onnxruntime for float32 / float64 (its float16 kernel leaves +-inf
    and it has no float16 / float64 Clip-11; onnx's reference evaluator skips the clip when no bound is given:
    both read the spec's defaults otherwise)."""
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    big = np.finfo(dtype).max
    x = np.array([np.inf, -np.inf, np.nan, 1.5, -2.0, big, -big, 0.0], dtype)
    lo, hi = np.array(-1.0, dtype), np.array(1.0, dtype)
    inputs, inits = {"none": (["x"], []), "min": (["x", "lo"], [("lo", lo)]),
                     "max": (["x", "", "hi"], [("hi", hi)])}[given]
    model = make_model([helper.make_node("Clip", inputs, ["y"])], [vi("x", [8], t)], [vi("y", [8], t)], inits,
                       opset=opset)
    ref = np.clip(x, lo if given == "min" else -big, hi if given == "max" else big)
    if dtype == np.float32 or (dtype == np.float64 and opset >= 13):
        (got,), (want,) = outputs_of_both(model, {"x": x})
        np.testing.assert_array_equal(got, want)
    else:
        from builder import compile as build
        from builder.frontend.onnx import from_onnx
        from runtime import VirtualMachine

        got = np.asarray(VirtualMachine(build(from_onnx(model)))["main"](x))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("opset", [10, 13])
def test_slice_symbolic_dim_end_before_start_is_empty(opset):
    """Slice (step 1) on a symbolic dim, fed 5, 3 and 1, with an end at or before the start once the negative
    bounds count from the end (``starts=-1, ends=0``: refused at run time with a length of -4; ``-3:1``,
    ``-2:-4``, ``0:0``) and with bounds that do select (``-1:``, ``1:``, ``0:-1``, ``-2:-1``): onnxruntime's
    result and the spec's indices, from one compiled model, fed 5, 4 and 3."""
    pairs = [(-1, 0), (-3, 1), (-2, -4), (0, 0), (-1, 2**63 - 1), (1, 2**63 - 1), (0, -1), (-2, -1)]
    nodes, outs, inits = [], [], [("ax", np.array([0], np.int64))]
    for k, (s, e) in enumerate(pairs):
        inits += [(f"s{k}", np.array([s], np.int64)), (f"e{k}", np.array([e], np.int64))]
        nodes.append(helper.make_node("Slice", ["x", f"s{k}", f"e{k}", "ax"], [f"y{k}"]))
        outs.append(vi(f"y{k}", [f"n{k}", 2]))
    run = runner_of_both(make_model(nodes, [vi("x", ["d", 2])], outs, inits, opset=opset))
    for d in (5, 4, 3):   # (a start outside a symbolic dim is assumed in range: an error when run)
        x = rng.standard_normal((d, 2)).astype(np.float32)
        got, want = run({"x": x})
        for k, (s, e) in enumerate(pairs):
            ref = x[spec_slice_indices(s, e, 1, d)]
            np.testing.assert_array_equal(want[k], ref, err_msg=f"onnxruntime vs the spec at {(s, e)}, dim {d}")
            np.testing.assert_array_equal(got[k], ref, err_msg=f"ours at {(s, e)}, dim {d}")


def test_nested_loop_errors_name_the_body_nodes():
    """An error in a Loop body nested in a Loop body names each unnamed node by its op type and index in its
    own body and the body's name (``Loop_1 (-> inner_out)`` of the body ``outer_body``), never a negative
    index (it said ``Loop_-2``), and keeps the spec's reason (a Slice step of 0)."""
    from builder.frontend.onnx import ONNXImportError, from_onnx

    I64, B = TensorProto.INT64, TensorProto.BOOL
    inner = helper.make_graph(
        [helper.make_node("Slice", ["vi", "z", "z", "z", "z"], ["vo"])], "inner_body",
        [vi("ii", [], I64), vi("ci", [], B), vi("vi", [2])], [vi("ci", [], B), vi("vo", [2])])
    outer = helper.make_graph(
        [helper.make_node("Identity", ["vb"], ["vb2"]),
         helper.make_node("Loop", ["n", "", "vb2"], ["inner_out"], body=inner)], "outer_body",
        [vi("ib", [], I64), vi("cb", [], B), vi("vb", [2])], [vi("cb", [], B), vi("inner_out", [2])])
    model = make_model([helper.make_node("Loop", ["n", "", "x"], ["y"], body=outer)], [vi("x", [2])],
                       [vi("y", [2])], [("n", np.array(2, np.int64)), ("z", np.array([0], np.int64))], opset=17)
    with pytest.raises(ONNXImportError) as info:
        from_onnx(model)
    msg = str(info.value)
    assert "'Loop_0 (-> y)' (Loop)" in msg
    assert "'Loop_1 (-> inner_out)' (Loop) of the body 'outer_body'" in msg
    assert "'Slice_0 (-> vo)' (Slice) of the body 'inner_body'" in msg
    assert "a step of 0" in msg and "_-" not in msg


def test_slice_to_an_empty_static_dim_between_symbolic_dims():
    """A Slice whose result is empty along a static middle dim (starts = ends) between symbolic dims: the
    scheduler fused the two outer row loops with the static inner extent 0 and built ``f % 0``, an internal
    DivisionByZero at compile time (found by the differential fuzzer); now an empty result as onnxruntime's."""
    model = make_model([helper.make_node("Slice", ["x", "s", "e", "a", "p"], ["y"])], [vi("x", ["d0", "d1", "d2"])],
                       [vi("y", ["d0", "o", "d2"])],
                       [("s", np.array([1])), ("e", np.array([1])), ("a", np.array([1])), ("p", np.array([2]))],
                       opset=13)
    run = runner_of_both(model)
    for shape in ((3, 6, 3), (1, 2, 40)):
        got, want = run({"x": np.ones(shape, np.float32)})
        assert got[0].shape == want[0].shape == (shape[0], 0, shape[2])


def test_mod_fmod_of_floats_by_infinity_and_zero():
    """``Mod(fmod=1)`` of floats is C's ``fmod``: a finite dividend over an infinite divisor is the dividend
    (``a - trunc(a / b) * b`` gave ``0 * inf = NaN``; found by the differential fuzzer), an infinite dividend or
    a zero divisor NaN; checked against numpy's fmod and onnxruntime."""
    model = make_model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)], [vi("a", ["n"]), vi("b", ["n"])],
                       [vi("y", ["n"])], opset=18)
    a = np.array([-0.0, 0.0, 3.5, -3.5, 7.0, -7.25, np.inf, -np.inf, 5.0, np.nan, 1e30, 2.0], np.float32)
    b = np.array([-np.inf, np.inf, np.inf, -np.inf, 2.0, 3.0, 2.0, np.inf, 0.0, 1.0, np.inf, np.nan], np.float32)
    got, want = runner_of_both(model)({"a": a, "b": b})
    with np.errstate(invalid="ignore"):
        ref = np.fmod(a, b)
    np.testing.assert_array_equal(got[0], ref)
    np.testing.assert_array_equal(want[0], ref)
