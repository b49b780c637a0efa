"""The inputs of one concat are bounded (issue 40 fuzzers): its kernel's compile time grew with the square of
the inputs (2,000: 13 s, 5,000 past 45 s; LLVM on the balanced ``if_then_else`` search of te.topi.concat), so
past ``MAX_CONCAT_INPUTS`` the concat is refused where the graph is built: nn.op at the call, a recipe at
its line (exit 2), ONNX at the node. The old code compiled these for minutes: they run in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder.ir.op.manipulation import MAX_CONCAT_INPUTS
from builder.nn import op
from helpers.functional import jit

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), MB_CACHE="0")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_recipe_concat_past_the_bound_is_a_positioned_error(tmp_path):
    from helpers.recipes import with_forward

    n = MAX_CONCAT_INPUTS + 1
    path = tmp_path / "r.yaml"
    path.write_text(with_forward(f"return concat([{', '.join(['x'] * n)}], dim=0)", shape="[batch, 4]"))
    done = _run(f"from builder.cli import main; raise SystemExit(main([{str(path)!r}, '--no-ir']))")
    assert done.returncode == 2, done.stderr
    assert f"{path}:6:" in done.stderr and f"{n} tensors are more than one concat takes" in done.stderr
    assert "Traceback" not in done.stderr


def test_onnx_concat_past_the_bound_names_the_node():
    pytest.importorskip("onnx")
    n = MAX_CONCAT_INPUTS + 1
    code = f"""
from onnx import TensorProto, helper
from builder.frontend.onnx import ONNXImportError, from_onnx
from helpers.onnx_models import make_model
nodes = [helper.make_node("Concat", ["x"] * {n}, ["z"], axis=-1, name="wide")]
model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 2])],
                   [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", {2 * n}])])
try:
    from_onnx(model)
except ONNXImportError as err:
    print("ERR", err)
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert "ERR" in done.stdout and "wide" in done.stdout and "MAX_CONCAT_INPUTS" in done.stdout, done.stdout


def test_concat_in_groups_at_the_bound_runs():
    half = MAX_CONCAT_INPUTS // 2
    f = jit(lambda x, y: op.concat([op.concat([x, y] * half, dim=1), y], dim=1),
            x=(("n", 3), "float32"), y=(("n", "m"), "float32"))
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 2)).astype(np.float32)
    np.testing.assert_array_equal(f(x, y), np.concatenate([x, y] * half + [y], axis=1))
    with pytest.raises(ValueError, match="MAX_CONCAT_INPUTS"):
        jit(lambda x: op.concat([x] * (MAX_CONCAT_INPUTS + 1), dim=0), x=(("n", 3), "float32"))
