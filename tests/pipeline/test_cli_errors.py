"""Bad recipes: one clear message with file:line:column, exit code 2, no traceback."""
from pathlib import Path

import pytest

from builder.cli import main

SMALL = (Path(__file__).resolve().parents[2] / "recipes" / "llama_mlp_small.yaml").read_text()


def _line_col(text, needle):
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i, line.index(needle) + 1
    raise AssertionError(needle)


@pytest.mark.parametrize("old,new,needle,message", [
    ("bias: false, dtype: ${dtype}}\n    up_proj", "bais: false, dtype: ${dtype}}\n    up_proj", "bais",
     "unknown field 'bais'; did you mean 'bias'?"),
    ("in_features: ${hidden_size}, out_features: ${intermediate_size}, bias: false, dtype: ${dtype}}\n    up",
     "in_features: 1.5, out_features: ${intermediate_size}, bias: false, dtype: ${dtype}}\n    up", "1.5",
     "model.layers.gate_proj.in_features"),
    ("down_proj: {type: Linear", "down_proj: {type: Linaer", "Linaer", "unknown layer type 'Linaer'"),
    ("return down_proj(silu(gate) * up)", "return down_proj(silu(gat) * up)", "gat)",
     "unknown name 'gat'; did you mean 'gate'?"),
    ("return down_proj(silu(gate) * up)", "return down_proj(sigmoidd(gate) * up)", "sigmoidd",
     "unknown layer or op 'sigmoidd'"),
    ("return down_proj(silu(gate) * up)", "return down_proj(gate.silu() * up)", "gate.silu",
     "only layers and ops can be called"),
    ("return down_proj(silu(gate) * up)", "return 31337", "31337", "forward returns the constant 31337"),
    ("return down_proj(silu(gate) * up)", "return down_proj(softmax(gate, axis='a') * up)", "softmax",
     "relax.nn.softmax: axis must be an int, got 'a'"),
    ("return down_proj(silu(gate) * up)", "return down_proj(silu(gate) * up), 2.5", "2.5",
     "forward returns the constant 2.5"),
])
def test_recipe_errors(run_cli, old, new, needle, message):
    assert old in SMALL
    text = SMALL.replace(old, new, 1)
    rc, err, _, path = run_cli(text)
    line, col = _line_col(text, needle)
    assert rc == 2
    assert f"{path}:{line}:{col}:" in err
    assert message in err


@pytest.mark.parametrize("quant", ["none", "q4f16_1"])
def test_symbolic_layer_size_is_a_recipe_error(run_cli, quant):
    """A layer size given as a name (a typo, or a variable overridden with a word) would make
    the weights symbolic: a recipe error at the field, also under quantization."""
    old = "in_features: ${hidden_size}, out_features: ${intermediate_size}, bias: false, dtype: ${dtype}}\n    up"
    text = SMALL.replace(old, old.replace("${hidden_size}", "eight", 1), 1)
    rc, err, _, path = run_cli(text, f"quantization={quant}")
    line, col = _line_col(text, "in_features: eight")
    col += len("in_features: ")
    assert rc == 2 and f"{path}:{line}:{col}: model.layers.gate_proj.in_features: in_features is 'eight'" in err
    assert "parameter 'gate_proj.weight' would have the shape (688, eight)" in err
    rc, err, _, path = run_cli(SMALL, "hidden_size=abc")
    assert rc == 2 and "model.layers.down_proj.out_features: out_features is 'abc'" in err


def test_broken_yaml(run_cli):
    rc, err, _, path = run_cli("name: x\nmodel: {layers: {a: [1, 2}\n")
    assert rc == 2 and f"{path}:2:" in err and "invalid YAML" in err


def test_shape_mismatch_in_forward_cites_the_line(run_cli):
    text = SMALL.replace("return down_proj(silu(gate) * up)", "return gate_proj(silu(gate) * up)")
    rc, err, _, path = run_cli(text)
    line, col = _line_col(text, "gate_proj(silu")
    assert rc == 2 and f"{path}:{line}:{col}:" in err and "688" in err and "256" in err


def test_unknown_override_lists_close_matches(run_cli):
    rc, err, _, _ = run_cli(SMALL, "hiden_size=3")
    assert rc == 2 and "hidden_size" in err


def test_missing_file_is_one_message(tmp_path, capsys):
    rc = main([str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and "nope.yaml" in err and "Traceback" not in err


def test_missing_weights_file(run_cli, tmp_path):
    rc, err, _, _ = run_cli(SMALL, "--weights", str(tmp_path / "w.safetensors"))
    assert rc == 1 and "does not exist" in err


def test_input_file_that_is_not_an_npz_archive(run_cli, tmp_path):
    """--input takes an .npz archive of named arrays: a single .npy array or another file is
    one message saying so (not numpy's advice to unpickle)."""
    import numpy as np

    np.save(tmp_path / "x.npy", np.zeros((2, 256), np.float32))
    (tmp_path / "t.npz").write_text("x = 1\n")
    for name, what in (("x.npy", "a single .npy array"), ("t.npz", "not a numpy file")):
        rc, err, _, _ = run_cli(SMALL, "--input", str(tmp_path / name))
        assert rc == 1 and f"expected an .npz archive of named arrays (np.savez(path, x=...)), but it is {what}" in err
        assert "pickle" not in err


def test_truncated_weights_file(run_cli, tmp_path):
    """A safetensors file cut short names the tensor that runs past its end."""
    data = (Path(__file__).resolve().parents[2] / "tests" / "data" / "llama_mlp_layer0.safetensors").read_bytes()
    (tmp_path / "w.safetensors").write_bytes(data[:-1000])
    rc, err, _, _ = run_cli(SMALL, "--weights", str(tmp_path / "w.safetensors"))
    assert rc == 1 and "WeightsError" in err and "truncated" in err


def test_exclude_pattern_matching_no_layer(run_cli):
    """A quantization.exclude glob that matches no layer is a recipe error naming the layers
    (a typo would otherwise quantize the layer it meant to keep); a matching glob builds."""
    rc, err, _, _ = run_cli(SMALL, "quantization=q4f16_1", "quantization.exclude=[down_prj]")
    assert rc == 2 and "<override quantization.exclude=[down_prj]>: quantization.exclude.0: " \
        "pattern 'down_prj' matches no layer (layers: down_proj, gate_proj, up_proj)" in err
    text = SMALL.replace("quantization: none", "quantization: {kind: group, exclude: [gate_proj, up_prj]}")
    assert text != SMALL
    rc, err, _, path = run_cli(text)
    line, col = _line_col(text, "up_prj")
    assert rc == 2 and f"{path}:{line}:{col}: quantization.exclude.1: pattern 'up_prj'" in err
    rc, _, _, _ = run_cli(SMALL, "quantization=q4f16_1", "quantization.exclude=[down_*]")
    assert rc == 0
