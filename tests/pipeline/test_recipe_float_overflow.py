"""A number in a recipe's ``forward:`` must fit the dtype of the tensor it is combined with (docs/SECURITY.md,
"Recipes and overrides"): a finite float that the tensor's float dtype would turn into inf is a recipe error
at the number's call (exit 2), decided by numpy's cast (issue 40 item 7). Values that round to the dtype's
largest finite value fit; an infinite literal (``1e309`` is Python's inf) stays allowed; the ``nn.op`` API
itself keeps numpy's and PyTorch's inf (imported models keep their meaning)."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import builder
from builder import nn
from builder.nn.op.common import scalar_constant
from helpers.recipes import with_forward

_NUMPY = {"float16": np.float16, "float32": np.float32, "bfloat16": ml_dtypes.bfloat16}


def _overflows(value: float, dtype: str) -> bool:
    """The reference rule: the cast of a finite Python float gives inf (numpy; ml_dtypes for bfloat16)."""
    with np.errstate(over="ignore"):
        return bool(np.isinf(np.array(value, np.float64).astype(_NUMPY[dtype])))


CASES = [   # (forward, dtype, the number, its column on line 6)
    ("return x * 1e39", "float32", 1e39, 12),
    ("return x * 3.5e38", "float32", 3.5e38, 12),
    ("return x * -3.5e38", "float32", -3.5e38, 12),
    ("return where(x > 0, 1e39, x)", "float32", 1e39, 12),
    ("return where(x > 0, x, -1e39)", "float32", -1e39, 12),
    ("return add(x, 70000.0)", "float16", 70000.0, 12),
    ("return x - 65520.0", "float16", 65520.0, 12),           # halfway to 65536: rounds to inf
    ("return x * 3.4028235677973366e38", "float32", 3.4028235677973366e38, 12),   # float32's halfway point
    ("return x + 100000", "float16", 100000, 12),             # an int, too
    ("return maximum(x, 3.4e38)", "bfloat16", 3.4e38, 12),   # finite in float32, inf in bfloat16
    ("return 1e39 / x", "float32", 1e39, 12),
]


@pytest.mark.parametrize("forward,dtype,value,col", CASES, ids=[c[0] + " " + c[1] for c in CASES])
def test_a_float_that_overflows_the_tensors_dtype_is_a_recipe_error(run_cli, forward, dtype, value, col):
    assert _overflows(value, dtype)
    rc, err, _, path = run_cli(with_forward(forward, dtype))
    assert rc == 2, err
    message = f"the constant {float(value)!r} does not fit {dtype}: it would become inf"
    assert re.search(rf"^{re.escape(path)}:6:{col}: model\.forward: .*{re.escape(message)}", err, re.M), err
    assert "Traceback" not in err


FITTING = [   # numbers that round to a finite value of the dtype, or are inf themselves
    ("return x * 3.4028235e38", "float32", 3.4028235e38),
    ("return x * -3.4028235677973362e38", "float32", -3.4028235677973362e38),   # just below the halfway point
    ("return x + 65504.0", "float16", 65504.0),
    ("return x + 65519.0", "float16", 65519.0),
    ("return x * 3.39e38", "bfloat16", 3.39e38),
    ("return where(x > 0, x, -1e309)", "float32", float("-inf")),
    ("return x * 1e39", "float64", 1e39),
]


@pytest.mark.parametrize("forward,dtype,value", FITTING, ids=[c[0] + " " + c[1] for c in FITTING])
def test_numbers_that_fit_are_accepted_with_numpys_value(tmp_path, forward, dtype, value):
    if dtype in _NUMPY:
        assert not _overflows(value, dtype) or not np.isfinite(value)
    path = tmp_path / "r.yaml"
    path.write_text(with_forward(forward, dtype, "[2, 16]"))
    model = builder.build(path)
    x = np.ones((2, 16), _NUMPY.get(dtype, np.float64))
    y = np.asarray(model(x))
    y = (y.view(ml_dtypes.bfloat16) if y.dtype == np.uint16 else y).astype(np.float64)
    a = x.astype(np.float64)
    c = np.float64(np.array(value).astype(_NUMPY.get(dtype, np.float64)))   # the number as the dtype holds it
    with np.errstate(over="ignore"):
        expected = {"*": a * c, "+": a + c}.get(forward.split()[2], np.where(a > 0, a, c))
        expected = expected.astype(_NUMPY.get(dtype, np.float64)).astype(np.float64)
    np.testing.assert_array_equal(y, expected)


def test_the_nn_op_api_keeps_numpys_inf():
    """Outside a recipe (Python code, imported models) a number beyond a float dtype becomes inf, as numpy
    and PyTorch make it."""
    assert nn.op.multiply(nn.Parameter((2,), "float16"), 1e5).dtype == "float16"
    assert np.isposinf(scalar_constant(1e5, "float16").values())
    assert np.isneginf(scalar_constant(-3.5e38, "float32").values())
