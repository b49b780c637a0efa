"""Struct-info inference: shapes and dtypes at emit time, errors naming both sides."""
import pytest

from builder import nn
from builder.ir import expr as E
from builder.ir.expr import Var


def export(fn, **inputs):
    class M(nn.Module):
        def forward(self, *args):
            return fn(*args)

    return M().export_tvm(spec={"forward": {k: nn.spec.Tensor(*v) for k, v in inputs.items()}})[0]


def test_matmul_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"lhs \(2, 3\) has 3, rhs \(4, 5\) has 4"):
        export(lambda a, b: nn.op.matmul(a, b), a=((2, 3), "float32"), b=((4, 5), "float32"))


def test_dtype_mismatch_names_both():
    with pytest.raises(TypeError, match="lhs float32 vs rhs float16"):
        export(lambda a, b: a + b, a=((2, 3), "float32"), b=((2, 3), "float16"))


def test_broadcast_error():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 3\) do not broadcast"):
        export(lambda a, b: a * b, a=((2, 3), "float32"), b=((4, 3), "float32"))


def test_broadcast_and_batched_matmul_shapes():
    mod = export(lambda a, b: nn.op.matmul(a, b) + a.sum_placeholder if False else nn.op.matmul(a, b),
                 a=(("n", 1, 2, 3), "float32"), b=((5, 3, 4), "float32"))
    assert 'R.Tensor((n, 5, 2, 4), dtype="float32")' in mod.script()


def test_reshape_minus_one_symbolic():
    mod = export(lambda a: nn.op.reshape(a, [-1, 4]), a=(("b", "s", 8), "float32"))
    assert "R.shape([b * s * 2, 4])" in mod.script()


def test_conv1d_symbolic_length():
    mod = nn.Conv1D(4, 6, kernel_size=3, stride=2, padding=1, bias=False).export_tvm(
        spec={"forward": {"x": nn.spec.Tensor([1, 4, "w"], "float32")}})[0]
    assert "R.Tensor((1, 6, (w - 1) // 2 + 1)" in mod.script()


def test_simplify_and_prove_equal():
    n, m = Var("n"), Var("m")
    assert str(E.simplify(n + 1 + 1 - 2)) == "n"
    assert str(E.simplify((n * 4) // 2)) == "n * 2"
    assert E.prove_equal(n * m + n, n * (m + 1))
    assert not E.prove_equal(n, m)
    assert E.evaluate((n * 3 + m) // 2, {n: 5, m: 1}) == 8
