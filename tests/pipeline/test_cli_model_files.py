"""``build model.onnx``: an imported model goes through the same print / compile / run path as a recipe."""
import numpy as np
import pytest

from builder.cli import main


def _mlp_onnx(path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return w.astype(np.float64), b.astype(np.float64)


def test_build_runs_an_onnx_file_on_npz_inputs(tmp_path, capsys):
    w, b = _mlp_onnx(tmp_path / "mlp.onnx")
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    assert main([str(tmp_path / "mlp.onnx"), "--plain", "--input", str(tmp_path / "x.npz"),
                 "--output", str(tmp_path / "y.npz")]) == 0
    out = capsys.readouterr().out
    assert "def main(x: R.Tensor((\"batch\", 8), dtype=\"float32\"))" in out and "linear/" in out
    with np.load(tmp_path / "y.npz") as y:
        np.testing.assert_allclose(y["output"], np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_model_files_refuse_recipe_only_flags(tmp_path, capsys):
    _mlp_onnx(tmp_path / "mlp.onnx")
    assert main([str(tmp_path / "mlp.onnx"), "hidden=3", "--no-ir"]) == 1
    assert "takes no KEY=VALUE overrides" in capsys.readouterr().err
    assert main([str(tmp_path / "mlp.onnx"), "--print-recipe"]) == 1


def test_a_torch_export_archive_is_not_loaded(tmp_path, capsys):
    """``torch.export.load`` may unpickle (code its author chose): ``build`` refuses .pt2 files."""
    (tmp_path / "model.pt2").write_bytes(b"PK\x03\x04 not really")
    assert main([str(tmp_path / "model.pt2"), "--no-ir"]) == 1
    assert "model.pt2" in capsys.readouterr().err


def test_an_onnx_file_at_high_matmul_precision(tmp_path, capsys, monkeypatch):
    """``build model.onnx matmul_precision=high``: the float32 GEMM on AMX tiles (emulated, so any host
    runs it) within bf16x3's error of float64; an unknown precision or a second one is refused.

    No host feature is needed: ``MB_SIMD_EMULATE=amx`` kernels are generic IR in the 16-lane shape that
    ``MB_SIMD_SHAPE=avx512`` forces (LLVM splits the vectors on a narrower CPU), and the executable asks for
    no tile state (it records ``amx`` only when its IR calls a tile instruction, ``uses_amx_tiles``), which the
    test checks on every host by loading it as a host whose OS grants no tiles does. (Until commit bdee34e the
    executable recorded ``amx`` and such a host refused it: the failure issue 41 reported.)"""
    import runtime.host

    monkeypatch.setenv("MB_SIMD_SHAPE", "avx512")
    monkeypatch.setenv("MB_SIMD_EMULATE", "amx")
    # as a host without AMX (or whose OS grants no tiles) loads it, on every host
    monkeypatch.setattr(runtime.host, "amx_permitted", lambda: False)
    w, b = _mlp_onnx(tmp_path / "mlp.onnx")
    x = np.random.default_rng(2).standard_normal((40, 8)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    assert main([str(tmp_path / "mlp.onnx"), "matmul_precision=high", "--no-ir", "--input", str(tmp_path / "x.npz"),
                 "--output", str(tmp_path / "y.npz")]) == 0
    assert "linear/avx512+amx3" in capsys.readouterr().out
    with np.load(tmp_path / "y.npz") as y:
        ref = np.maximum(x.astype(np.float64) @ w + b, 0)
        np.testing.assert_allclose(y["output"], ref, rtol=0, atol=2e-5 * np.abs(ref).max())
    assert main([str(tmp_path / "mlp.onnx"), "matmul_precision=low", "--no-ir"]) == 1
    assert "matmul_precision must be one of" in capsys.readouterr().err
    assert main([str(tmp_path / "mlp.onnx"), "matmul_precision=high", "matmul_precision=medium", "--no-ir"]) == 1
