"""Symbolic ints in creation ops and tensor arithmetic (issue 14): ``arange`` with a symbolic start,
``full`` with symbolic dims and fill values, ``zeros`` / ``ones`` with symbolic shapes, and
``Tensor`` arithmetic with Python numbers and symbolic int PrimExprs, against numpy in float64 with
the symbolic dims bound to several sizes, negative values included (a symbolic int becomes a 0-d
tensor through the VM builtin ``vm.builtin.prim_value_to_tensor``, in O(1)); strided slices whose
bounds only appear inside compound dims."""

import numpy as np
import pytest

from builder import nn
from builder.nn import op
from helpers.functional import Fn, export, jit, spec_of


def close(got, want):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, atol=1e-6)


def zeros(*shape):
    return np.zeros(shape, "float32")


def test_arange_symbolic_start_kv_positions():
    """Positions of the new tokens after a cache: ``arange(total - seq, total)`` and
    ``arange(past, past + seq)``; the result's length is the symbolic ``seq``."""
    f = jit(lambda k, q: op.arange(k.shape[1] - q.shape[1], k.shape[1], dtype="int64"),
            k=([1, "total"], "float32"), q=([1, "seq"], "float32"))
    g = jit(lambda p, q: op.arange(p.shape[1], p.shape[1] + q.shape[1], dtype="float32"),
            p=([1, "past"], "float32"), q=([1, "seq"], "float32"))
    for past, seq in ((0, 1), (5, 3), (17, 1), (0, 9)):
        y = f(zeros(1, past + seq), zeros(1, seq))
        assert y.dtype == np.int64
        close(y, np.arange(past, past + seq))
        z = g(zeros(1, past), zeros(1, seq))
        assert z.dtype == np.float32
        close(z, np.arange(past, past + seq, dtype=np.float64))
    text = export(lambda p, q: op.arange(p.shape[1], p.shape[1] + q.shape[1], dtype="int64"),
                  p=([1, "past"], "float32"), q=([1, "seq"], "float32"))
    assert 'arange: R.Tensor((seq,), dtype="int64") = R.add(' in text, text


def test_arange_symbolic_start_with_step_and_static_end():
    f = jit(lambda x: op.arange(x.shape[1], 11, 3, dtype="float32"), x=([2, "n"], "float32"))
    g = jit(lambda x: op.arange(x.shape[1] * 2, x.shape[1] * 2 + 5, dtype=None), x=([2, "n"], "float32"))
    for n in (0, 1, 4, 10):
        close(f(zeros(2, n)), np.arange(n, 11, 3))
        y = g(zeros(2, n))
        assert y.dtype == np.int64
        close(y, np.arange(2 * n, 2 * n + 5))


def test_arange_symbolic_start_errors():
    with pytest.raises(ValueError, match="symbolic step"):
        export(lambda x: op.arange(x.shape[1], 8, x.shape[1]), x=([2, "n"], "float32"))
    with pytest.raises(ValueError, match="needs integer bounds"):
        export(lambda x: op.arange(x.shape[1], 8.5), x=([2, "n"], "float32"))


def test_full_zeros_ones_symbolic():
    def fn(x):
        b, n = x.shape
        return (op.full([n, b], n - 1, "float32"), op.full([b, n * 2], 7, "int32"),
                op.full([n], b * n, "int64"), op.zeros([n, b + 1], "float32"), op.ones([b, n], "float16"))

    f = jit(fn, x=(["b", "n"], "float32"))
    for b, n in ((1, 1), (2, 5), (3, 8)):
        fv, fi, fp, z, o = f(zeros(b, n))
        close(fv, np.full((n, b), n - 1.0))
        assert fi.dtype == np.int32 and fp.dtype == np.int64 and o.dtype == np.float16
        close(fi, np.full((b, 2 * n), 7))
        close(fp, np.full((n,), b * n))
        close(z, np.zeros((n, b + 1)))
        close(o, np.ones((b, n)))


def test_tensor_arithmetic_with_numbers_and_symbolic_ints():
    def fn(x):
        n = x.shape[1]
        return (x * n, x + 1, 2.5 - x, x / n, op.subtract(n, x), -x + n, x * (n - 1) + n * 2)

    f = jit(fn, x=([2, "n"], "float32"))
    for n in (1, 4, 9):
        x = np.random.default_rng(n).standard_normal((2, n)).astype("float32")
        xd = x.astype(np.float64)
        outs = f(x)
        for got, want in zip(outs, (xd * n, xd + 1, 2.5 - xd, xd / n, n - xd, -xd + n, xd * (n - 1) + n * 2)):
            assert got.dtype == np.float32
            close(got, want)
    g = jit(lambda i: i * i.shape[0] - 3, i=(["n"], "int32"))
    i = np.arange(6, dtype="int32")
    y = g(i)
    assert y.dtype == np.int32
    close(y, i.astype(np.int64) * 6 - 3)


def test_symbolic_scalar_errors():
    with pytest.raises(TypeError, match="cannot combine a Tensor with str"):
        export(lambda x: x * "2", x=([2, "n"], "float32"))
    with pytest.raises(TypeError, match="fill_value must be a number, a symbolic int or a 0-d Tensor"):
        export(lambda x: op.full([2], "a"), x=([2, "n"], "float32"))


def test_strided_slice_bound_inside_a_compound_dim():
    """``x[:, past:]`` of a tensor whose dim is ``past + seq``: the kernel recovers ``past`` as
    its input's length minus its output's."""
    f = jit(lambda p, q: op.concat([p, q], dim=1)[:, p.shape[1]:], p=([2, "past"], "float32"),
            q=([2, "seq"], "float32"))
    for past, seq in ((0, 2), (3, 1), (6, 4)):
        p = np.random.default_rng(past).standard_normal((2, past)).astype("float32")
        q = np.random.default_rng(seq).standard_normal((2, seq)).astype("float32")
        close(f(p, q), np.concatenate([p, q], 1)[:, past:])


def jit_int(fn, int_name: str, **inputs):
    """``fn`` compiled for the tensor ``inputs`` (``name=(shape, dtype)``) then an int input
    ``int_name`` (``spec.Int``, as a recipe's ``total_seq_len``): the JitModule."""
    spec = spec_of(**inputs)
    spec["forward"][int_name] = nn.spec.Int()
    return Fn(fn, [*inputs, int_name]).jit(spec)


def test_arange_from_an_int_input_below_zero_matches_numpy():
    """``arange(total - seq, total)`` (the positions of a prefill, ``total`` a ``spec.Int``): numpy's
    values for every ``total``, also below ``seq`` (a negative start), where the start used to be read
    from a sliced ``arange(0, total - seq + 1)`` that failed with "strided_slice: index out of range:
    expected 0 <= index < v0"; with a step, and cast to float32."""
    m = jit_int(lambda x, total: (op.arange(total - x.shape[1], total, dtype="int64"),
                                  op.arange(total - 2 * x.shape[1], total, 2, dtype="float32")),
                "total", x=([1, "seq"], "int64"))
    for total, seq in ((5, 3), (3, 3), (2, 3), (0, 3), (0, 1), (9, 1), (1, 4)):
        pos, even = m["forward"](np.zeros((1, seq), "int64"), total)
        assert pos.dtype == np.int64 and even.dtype == np.float32
        np.testing.assert_array_equal(pos, np.arange(total - seq, total))
        np.testing.assert_array_equal(even, np.arange(total - 2 * seq, total, 2, dtype=np.float32))


def test_symbolic_start_costs_no_work_in_the_stop():
    """The start of ``arange(total - seq, total)`` comes from the VM builtin
    ``vm.builtin.prim_value_to_tensor`` (O(1)), so no kernel's output depends on ``total``: a decode
    step does O(seq) work for its positions, not O(total_seq_len)."""
    m = jit_int(lambda x, total: op.arange(total - x.shape[1], total, dtype="int64"), "total",
                x=([1, "seq"], "int64"))
    fn = m.exe.functions["forward"]
    builtins = [i for i in fn["instructions"] if i[0] == "call_builtin"]
    assert [b[2] for b in builtins] == ["vm.builtin.prim_value_to_tensor"], builtins
    assert builtins[0][3] == [["dim", ["sub", ["var", "total"], ["var", "seq"]]]], builtins
    outputs = [spec for i in fn["instructions"] if i[0] == "call" for spec in i[4]]
    assert outputs and all("total" not in repr(dims) for _, dims in outputs), outputs
    text = m.ir.script()
    assert 'R.call_pure_packed("vm.builtin.prim_value_to_tensor"' in text, text
    assert "strided_slice" not in text, text


def test_negative_symbolic_scalars_in_arithmetic_and_full():
    """Symbolic ints that come out negative when the code runs (``n - 5`` for n < 5) are their
    values, in tensor arithmetic and as ``full``'s fill value, as in numpy."""
    f = jit(lambda x: (x * (x.shape[1] - 5), op.full([x.shape[1]], x.shape[1] - 3, "int64"),
                       op.subtract(x.shape[1] - 4, x)), x=([2, "n"], "float32"))
    for n in (1, 3, 7):
        x = np.random.default_rng(n).standard_normal((2, n)).astype("float32")
        scaled, filled, diff = f(x)
        close(scaled, x.astype(np.float64) * (n - 5))
        assert filled.dtype == np.int64
        np.testing.assert_array_equal(filled, np.full((n,), n - 3))
        close(diff, (n - 4) - x.astype(np.float64))
