"""Weights of transformed recipes: a float checkpoint is quantized (or cast) while it is loaded,
saved transformed parameters load back without conversion, and problems name both sides."""
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from builder.cli import main
from builder.terminal import ConversionProgressDisplay
from builder.build_model import build
from runtime import WeightsError
from runtime.weights import read_safetensors_header, read_safetensors_metadata, save_params

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SMALL = str(ROOT / "recipes" / "llama_mlp_small.yaml")
WEIGHTS = str(DATA / "llama_mlp_layer0.safetensors")


class Calls(list):
    def __call__(self, done, total, name):
        self.append((done, total, name))


def test_float_checkpoint_is_quantized_on_load_and_saved_params_load_back_directly(tmp_path):
    calls = Calls()
    m = build(SMALL, ["quantization=q4f32_1"], weights=WEIGHTS, progress=calls)
    assert calls == [(0, 3, "gate_proj.weight"), (1, 3, "gate_proj.weight"), (2, 3, "up_proj.weight"),
                     (3, 3, "down_proj.weight")]
    floats = load_file(WEIGHTS)
    for layer in ("gate_proj", "up_proj", "down_proj"):
        q_weight, q_scale = m.mapping.map_func[f"{layer}.weight"](floats[f"{layer}.weight"])
        np.testing.assert_array_equal(m.params[f"{layer}.q_weight"], q_weight)
        np.testing.assert_array_equal(m.params[f"{layer}.q_scale"], q_scale)
    m.save_params(tmp_path / "q.safetensors")
    header = read_safetensors_header(tmp_path / "q.safetensors")
    # 688 -> 704 padded / 8 words, 256 rows in tiles of 16
    assert header["down_proj.q_weight"] == {"dtype": "uint32", "shape": [16, 88, 16]}
    assert read_safetensors_metadata(tmp_path / "q.safetensors")["quantization"] == "q4f32_1"

    again = Calls()
    m2 = build(SMALL, ["quantization=q4f32_1"], weights=tmp_path / "q.safetensors", progress=again)
    assert again == []  # nothing converted
    x = np.load(DATA / "llama_mlp_layer0.npz")["x"]
    np.testing.assert_array_equal(m2(x), m(x))


def test_dtype_presets_cast_on_load_and_bfloat16_round_trips(tmp_path, exported):
    values = exported(SMALL, ["quantization=q0f16"]).load(WEIGHTS)
    assert values["up_proj.weight"].dtype == np.float16
    np.testing.assert_array_equal(values["up_proj.weight"], load_file(WEIGHTS)["up_proj.weight"].astype(np.float16))
    mb = build(SMALL, ["quantization=q0bf16"], weights=WEIGHTS)
    mb.save_params(tmp_path / "b.safetensors")
    assert read_safetensors_header(tmp_path / "b.safetensors")["gate_proj.weight"]["dtype"] == "bfloat16"
    calls = Calls()
    again = exported(SMALL, ["quantization=q0bf16"]).load(tmp_path / "b.safetensors", calls)
    assert calls == []
    for name in mb.param_names:
        assert again[name].dtype == np.uint16
        np.testing.assert_array_equal(again[name], mb.params[name])


@pytest.mark.parametrize("overrides", [["quantization=q4f32_1"], ["dtype=float32"], ["dtype=float16"]])
def test_checkpoint_of_another_float_dtype_is_cast_on_load(tmp_path, overrides):
    """A bfloat16 checkpoint loads into a float32 / float16 model under every transform:
    parameters without a conversion (norm weights, unquantized ones) are cast like the
    quantized ones are converted; an integer tensor still has to match exactly."""
    from runtime.native import bfloat16_bits_to_float32, float32_to_bfloat16_bits

    floats = load_file(WEIGHTS)
    bits = {k: float32_to_bfloat16_bits(v) for k, v in floats.items()}
    path = tmp_path / "w_bf16.safetensors"
    save_params(path, bits, dtypes={k: "bfloat16" for k in bits})
    m = build(SMALL, overrides, weights=path)
    ref = build(SMALL, overrides, weights=_as_file(tmp_path, {k: bfloat16_bits_to_float32(v) for k, v in bits.items()}))
    for name in m.param_names:
        np.testing.assert_array_equal(m.params[name], ref.params[name])
    x = np.load(DATA / "llama_mlp_layer0.npz")["x"].astype(m.spec["forward"]["x"].dtype)
    np.testing.assert_array_equal(m(x), ref(x))


def _as_file(tmp_path, tensors) -> Path:
    path = tmp_path / "w_f32.safetensors"
    save_file(tensors, str(path))
    return path


def test_saved_params_use_the_recipes_file_names(tmp_path, exported):
    tensors = {f"model.layers.0.mlp.{k}": v for k, v in load_file(WEIGHTS).items()}
    save_file(tensors, str(tmp_path / "w.safetensors"))
    (tmp_path / "r.yaml").write_text(Path(SMALL).read_text() + "weights:\n  prefix: model.layers.0.mlp.\n")
    m = build(tmp_path / "r.yaml", ["quantization=q8f32_1"], weights=tmp_path / "w.safetensors")
    m.save_params(tmp_path / "q.safetensors")
    assert "model.layers.0.mlp.up_proj.q_scale" in read_safetensors_header(tmp_path / "q.safetensors")
    calls = Calls()
    again = exported(tmp_path / "r.yaml", ["quantization=q8f32_1"]).load(tmp_path / "q.safetensors", calls)
    assert calls == [] and all(np.array_equal(m.params[n], again[n]) for n in m.param_names)


def test_weight_problems_name_both_sides(tmp_path):
    save_file({"gate_proj.weight": np.zeros((688, 255), np.float32),
               "up_proj.weight": np.zeros((688, 256), np.int32),
               "extra.weight": np.zeros((2,), np.float32)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(WeightsError) as info:
        build(SMALL, ["quantization=q4f16_1"], weights=tmp_path / "w.safetensors")
    problems = info.value.problems
    assert ("'gate_proj.weight' has shape (688, 255), parameter 'gate_proj.weight' (converted into "
            "gate_proj.q_weight, gate_proj.q_scale) expects (688, 256)") in problems
    assert ("'up_proj.weight' has dtype int32, parameter 'up_proj.weight' (converted into up_proj.q_weight, "
            "up_proj.q_scale) expects a floating-point tensor") in problems
    assert ("missing tensor 'down_proj.q_weight' or its source 'down_proj.weight' to convert from for "
            "parameter 'down_proj.q_weight'") in problems
    assert "unexpected tensor 'extra.weight' (no parameter uses it)" in problems


def test_params_saved_with_another_quantization_are_explained(tmp_path, exported):
    m = build(SMALL, ["quantization=q4f32_1"], weights=WEIGHTS)
    m.save_params(tmp_path / "q.safetensors")
    with pytest.raises(WeightsError) as info:
        exported(SMALL, ["quantization=q8f32_1"]).load(tmp_path / "q.safetensors")
    text = str(info.value)
    assert "'gate_proj.q_weight' has shape (43, 32, 16), parameter 'gate_proj.q_weight' expects (43, 64, 16)" in text
    assert "saved by recipe 'llama_mlp_small' with quantization 'q4f32_1', this recipe uses 'q8f32_1'" in text


def test_cli_save_params_and_summary(tmp_path, capsys):
    out = tmp_path / "q.safetensors"
    np.savez(tmp_path / "x.npz", x=np.load(DATA / "llama_mlp_layer0.npz")["x"])
    assert main([SMALL, "quantization=q8f32_1", "--weights", WEIGHTS, "--no-ir", "--save-params", str(out),
                 "--input", str(tmp_path / "x.npz"), "--output", str(tmp_path / "y1.npz")]) == 0
    text = capsys.readouterr().out
    assert "(from " in text and "2.0 MiB before q8f32_1, 3.53x smaller)" in text
    assert f"saved parameters to {out}" in text
    assert main([SMALL, "quantization=q8f32_1", "--weights", str(out), "--no-ir",
                 "--input", str(tmp_path / "x.npz"), "--output", str(tmp_path / "y2.npz")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y1.npz")["output"], np.load(tmp_path / "y2.npz")["output"])


def test_progress_bar_appears_only_after_a_moment():
    p = ConversionProgressDisplay(delay=0.05)
    p(0, 3, "a")
    p(1, 3, "a")
    assert p.bar is None  # fast: no bar
    time.sleep(0.06)
    p(2, 3, "b")
    assert p.bar is not None
    p(3, 3, "c")
    assert p.bar is None  # done: removed


@pytest.mark.parametrize("preset,words", [("q4f32_1", 88), ("q8f32_1", 176)])
def test_row_major_params_are_tiled_on_load(tmp_path, preset, words):
    """Parameters of 4- and 8-bit weights saved row-major (MLC-LLM's layout, and this project's
    before the row tiles) load into a model whose q_weight / q_scale are row-tiled: each tiled
    when read, the same arrays as quantizing the float checkpoint; a row-major tensor of another
    shape is still refused with both sides named."""
    from builder.quant.packing import untile_rows

    m = build(SMALL, [f"quantization={preset}"], weights=WEIGHTS)
    assert m.mapping.row_tiles["gate_proj.q_weight"] == 16 and m.params["gate_proj.q_weight"].ndim == 3
    rows = {name: untile_rows(a) for name, a in m.params.items()}
    save_file(rows, str(tmp_path / "rows.safetensors"))
    calls = Calls()
    m2 = build(SMALL, [f"quantization={preset}"], weights=tmp_path / "rows.safetensors", progress=calls)
    assert calls == []   # loaded, not converted from floats
    for name, a in m.params.items():
        np.testing.assert_array_equal(m2.params[name], a)
    rows["down_proj.q_weight"] = rows["down_proj.q_weight"][:, :80].copy()
    save_file(rows, str(tmp_path / "bad.safetensors"))
    with pytest.raises(WeightsError) as info:
        build(SMALL, [f"quantization={preset}"], weights=tmp_path / "bad.safetensors")
    assert (f"'down_proj.q_weight' has shape (256, 80), parameter 'down_proj.q_weight' expects (16, {words}, 16)"
            in str(info.value))
