"""The main job end to end: recipe -> IR -> native code -> run, through the API and the CLI."""
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.cli import main
from runtime import WeightsError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SMALL = str(ROOT / "recipes" / "llama_mlp_small.yaml")
DEFAULT = str(ROOT / "recipes" / "llama_mlp.yaml")
WEIGHTS = str(DATA / "llama_mlp_layer0.safetensors")


def _rel_err(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


def test_default_recipe_prints_reference_ir(capsys):
    assert main([DEFAULT, "--plain"]) == 0
    out = capsys.readouterr().out
    golden = (DATA / "ir" / "llama_mlp_fp16_dynamic.txt").read_text()
    assert out.startswith(golden)
    assert "135,266,304 elements" in out
    # how each function was generated: both fused matmuls take the linear kernels on weights in
    # row tiles (or, on a CPU without vectors, the loops), made by one weight transform for both shapes
    from builder.codegen import Target
    from builder.codegen.kernels import SimdInfo

    simd = SimdInfo.from_target(Target.host().triple, Target.host().features)
    want = f"3 kernels for {Target.host().cpu}: " + (f"2 linear/{simd.name}+tiles" if simd.usable else "2 loops")
    assert want + ", 1 weight transform;" in out


def test_overrides_change_printed_shapes_and_dtypes(capsys):
    assert main([DEFAULT, "dtype=float32", "hidden_size=512", "intermediate_size=1024", "--plain"]) == 0
    out = capsys.readouterr().out
    assert 'x: R.Tensor(("batch_size", 512), dtype="float32")' in out
    assert 'gate_proj_weight: R.Tensor((1024, 512), dtype="float32")' in out
    assert "float16" not in out


def test_api_matches_hf_reference():
    ref = np.load(DATA / "llama_mlp_layer0.npz")
    m = builder.build(SMALL, weights=WEIGHTS)
    y = m(ref["x"])
    assert y.dtype == np.float32 and y.shape == ref["y"].shape
    assert _rel_err(y, ref["y"].astype(np.float64)) < 1e-5
    assert m["forward"](x=ref["x"]).shape == (3, 256)
    assert set(m.params) == {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}
    assert "R.matmul" in m.ir.script()


def test_cli_input_output_matches_hf_reference(tmp_path):
    ref = np.load(DATA / "llama_mlp_layer0.npz")
    np.savez(tmp_path / "x.npz", x=ref["x"])
    rc = main([SMALL, "--weights", WEIGHTS, "--input", str(tmp_path / "x.npz"),
               "--output", str(tmp_path / "y.npz"), "--no-ir"])
    assert rc == 0
    y = np.load(tmp_path / "y.npz")["output"]
    assert _rel_err(y, ref["y"].astype(np.float64)) < 1e-5


@pytest.mark.parametrize("batch", [1, 5, 17])
def test_random_weights_match_numpy(batch):
    m = builder.build(SMALL, overrides=["hidden_size=40", "intermediate_size=72"], seed=3)
    p = {k: v.astype(np.float64) for k, v in m.params.items()}
    x = np.random.default_rng(batch).standard_normal((batch, 40)).astype(np.float32)
    gate = x @ p["gate_proj.weight"].T
    ref = ((gate / (1 + np.exp(-gate))) * (x @ p["up_proj.weight"].T)) @ p["down_proj.weight"].T
    assert _rel_err(m(x), ref) < 1e-5


def test_float16_recipe_runs_with_fp32_accumulation():
    m = builder.build(DEFAULT, overrides=["hidden_size=64", "intermediate_size=96"])
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float16)
    p = {k: v.astype(np.float64) for k, v in m.params.items()}
    xd = x.astype(np.float64)
    gate, up = xd @ p["gate_proj.weight"].T, xd @ p["up_proj.weight"].T
    ref = ((gate / (1 + np.exp(-gate))) * up) @ p["down_proj.weight"].T
    y = m(x)
    assert y.dtype == np.float16
    assert _rel_err(y, ref) < 2e-2


def test_wrong_input_raises_value_error_naming_both_sides():
    m = builder.build(SMALL, overrides=["hidden_size=16", "intermediate_size=24"])
    with pytest.raises(ValueError, match=r"'x'.*\(3, 15\).*\(batch_size, 16\)"):
        m(np.zeros((3, 15), np.float32))
    with pytest.raises(ValueError, match="dtype float64, expected float32"):
        m(np.zeros((3, 16), np.float64))
    with pytest.raises(ValueError, match="3 dims"):
        m(np.zeros((1, 3, 16), np.float32))
    with pytest.raises(ValueError, match="numpy array"):
        m([[0.0] * 16])


def test_weights_errors_are_listed_together(tmp_path):
    from safetensors.numpy import save_file

    save_file({"gate_proj.weight": np.zeros((688, 255), np.float32),
               "up_proj.weight": np.zeros((688, 256), np.int32),   # another float dtype is cast
               "extra.weight": np.zeros((2,), np.float32)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(WeightsError) as info:
        builder.build(SMALL, weights=tmp_path / "w.safetensors")
    text = str(info.value)
    assert "shape (688, 255)" in text and "dtype int32" in text
    assert "missing tensor 'down_proj.weight'" in text and "unexpected tensor 'extra.weight'" in text
    assert len(info.value.problems) == 4


def test_weights_prefix_from_recipe(tmp_path):
    from safetensors.numpy import load_file, save_file

    tensors = {f"model.layers.0.mlp.{k}": v for k, v in load_file(WEIGHTS).items()}
    save_file(tensors, str(tmp_path / "w.safetensors"))
    text = Path(SMALL).read_text() + "weights:\n  prefix: model.layers.0.mlp.\n"
    (tmp_path / "r.yaml").write_text(text)
    ref = np.load(DATA / "llama_mlp_layer0.npz")
    m = builder.build(tmp_path / "r.yaml", weights=tmp_path / "w.safetensors")
    assert _rel_err(m(ref["x"]), ref["y"].astype(np.float64)) < 1e-5


def test_weights_map_entries_must_name_parameters(tmp_path):
    """A ``weights.map`` entry for a name the model does not have (a typo) is listed with the
    other weight problems, with the close names."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(WEIGHTS)
    tensors["mlp.gate.weight"] = tensors.pop("gate_proj.weight")
    save_file(tensors, str(tmp_path / "w.safetensors"))
    good = "weights:\n  map: {gate_proj.weight: mlp.gate.weight}\n"
    (tmp_path / "r.yaml").write_text(Path(SMALL).read_text() + good)
    ref = np.load(DATA / "llama_mlp_layer0.npz")
    m = builder.build(tmp_path / "r.yaml", weights=tmp_path / "w.safetensors")
    assert _rel_err(m(ref["x"]), ref["y"].astype(np.float64)) < 1e-5
    (tmp_path / "r.yaml").write_text(Path(SMALL).read_text() + good.replace("{gate_proj", "{gate_prj"))
    with pytest.raises(WeightsError) as info:
        builder.build(tmp_path / "r.yaml", weights=tmp_path / "w.safetensors")
    assert ("the name map's entry 'gate_prj.weight' names no parameter of the model "
            "(did you mean 'gate_proj.weight'") in str(info.value)
