"""Bad or hostile recipes and overrides are recipe errors at file:line:column (exit 2), never an
internal exception, a hang or a memory blow-up (issue 12, items 4, 6, 10 and 11)."""
from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.cli import main
from helpers.recipes import BASE, with_forward

ROOT = Path(__file__).resolve().parents[2]
SMALL = (ROOT / "recipes" / "llama_mlp_small.yaml").read_text()

def _issue_at(err: str, path: str, field: str, message: str) -> tuple[int, int]:
    """The (line, column) of the issue at ``field`` whose message contains ``message``."""
    for line in err.splitlines():
        m = re.match(rf"^{re.escape(path)}:(\d+):(\d+): {re.escape(field)}: (.*)$", line)
        if m and message in m.group(3):
            return int(m.group(1)), int(m.group(2))
    raise AssertionError(f"no issue at {field} saying {message!r} in:\n{err}")


CASES = [
    # (id, recipe text, field, message)
    ("yaml nested 500 deep", BASE + "extra: " + "[" * 500 + "]" * 500 + "\n", "",
     "nested more than 64 levels deep"),
    ("400-term sum", with_forward("return " + " + ".join(["x"] * 400)), "model.forward",
     "expression nested more than 100 levels deep"),
    ("1,000 unary minus", with_forward("return " + "-" * 1000 + "x"), "model.forward",
     "expression nested more than 100 levels deep"),
    ("100,000 unary minus", with_forward("return " + "-" * 100_000 + "x"), "model.forward",
     "characters long, more than the 65,536 allowed"),
    ("a size of 2**64", BASE.replace("in_features: 16", "in_features: 18446744073709551616"),
     "model.layers.fc.in_features", "a size must be at most 2**40"),
    ("dims of 2**62", BASE.replace("[batch, 16]", "[4611686018427387904, 16]"), "functions.forward.x.shape.0",
     "a size must be at most 2**40"),
    ("a lone surrogate", BASE.replace("name: base", 'name: "\\ud800"'), "",   # libyaml: at the escape
     "Unicode"),
    ("function export_tvm", BASE.replace("  forward:\n    x:", "  export_tvm:\n    x:"), "functions.export_tvm",
     "function name 'export_tvm' is reserved"),
    ("function named_parameters", BASE.replace("  forward:\n    x:", "  named_parameters:\n    x:"),
     "functions.named_parameters", "is reserved"),
    ("layer __dict__", BASE.replace("    fc: {", "    __dict__: {").replace("FORWARD", "return __dict__(x)"),
     "model.layers.__dict__", "layer name '__dict__' is reserved"),
    ("!!int 1e3", BASE.replace("out_features: 8", "out_features: !!int 1e3"), "model.layers.fc.out_features",
     "cannot read '1e3' as int"),
    ("return a constant through a name", with_forward("y = 1\nreturn y"), "model.forward",
     "forward returns 1 (int)"),
    ("a tensor as an op's name", with_forward("return subtract(x, x, x)"), "model.forward",
     "name must be a string"),
    ("a number where a tensor goes", with_forward("return silu(2.0)"), "model.forward",
     "silu: x must be a Tensor, got float 2.0"),
    ("a number times a matrix", with_forward("return fc(x) @ 2.0"), "model.forward",
     "matmul: b must be a Tensor, got float 2.0"),
    ("unary minus of a tuple", with_forward("return -(x, x)"), "model.forward",
     "unary - needs a tensor or a number, got tuple"),
    ("conv1d input shorter than the kernel",
     BASE.replace("fc: {type: Linear, in_features: 16, out_features: 8}",
                  "conv: {type: Conv1D, in_channels: 2, out_channels: 3, kernel_size: 5, dilation: 2}")
         .replace("FORWARD", "return conv(x)").replace("[batch, 16]", "[1, 2, 8]"),
     "model.forward", "is shorter than the dilated kernel (9 = dilation 2 x (kernel 5 - 1) + 1)"),
    ("group size larger than K", BASE + "quantization: {kind: group, group_size: 64, model_dtype: float32}\n",
     "quantization.group_size", "group_size 64 is larger than the weight's 16 input features"),
]


@pytest.mark.parametrize("text,field,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_recipe_error_at_its_position(run_cli, text, field, message):
    text = text.replace("FORWARD", "return fc(x)")
    rc, err, _, path = run_cli(text)
    assert rc == 2, err
    if field:
        _issue_at(err, path, field, message)
    else:
        assert re.search(rf"^{re.escape(path)}:\d+:\d+: .*{re.escape(message)}", err, re.M), err


def test_markup_in_a_name_is_printed_as_text(run_cli):
    rc, err, out, _ = run_cli(BASE.replace("name: base", 'name: "[/]"').replace("FORWARD", "return fc(x)"))
    assert rc == 0, err
    assert out.splitlines()[0].strip() == "[/]"


def test_issue_text_is_not_turned_into_emoji(tmp_path, capsys):
    """rich replaces ``:100:`` with an emoji unless told not to: a position must print as written."""
    path = tmp_path / "r:100:.yaml"
    path.write_text(BASE.replace("out_features: 8", "out_features: eight").replace("FORWARD", "return fc(x)"))
    assert main([str(path), "--no-ir"]) == 2
    assert f"{path}:4:" in capsys.readouterr().err


def test_op_name_argument_must_be_an_identifier(run_cli):
    """In forward, ``name=`` is a name hint as TVM users know it: an identifier (any other text would be
    printed changed); the printer itself makes any hint valid (tests/pipeline/test_cli_recipe_errors.py)."""
    rc, err, _, path = run_cli(with_forward('return silu(fc(x), "a b\\n@R.function")'))
    assert rc == 2
    assert f"{path}:6:12: model.forward: silu(): name must be an identifier (letters, digits and '_', not " \
           "starting with a digit, not a Python keyword), got 'a b\\n@R.function'" in err


def test_conv1d_with_a_symbolic_length_checks_when_it_runs(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(BASE.replace("fc: {type: Linear, in_features: 16, out_features: 8}",
                                 "conv: {type: Conv1D, in_channels: 2, out_channels: 3, kernel_size: 5, dilation: 2}")
                    .replace("FORWARD", "return conv(x)").replace("[batch, 16]", "[1, 2, width]"))
    m = builder.build(path)
    assert m(np.ones((1, 2, 9), np.float32)).shape == (1, 3, 1)
    with pytest.raises(ValueError, match="the padded input is shorter than the dilated kernel"):
        m(np.ones((1, 2, 8), np.float32))


def _bomb(args, tmp_path):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    return subprocess.run([sys.executable, "-m", "builder", *map(str, args), "--no-ir"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, preexec_fn=limit)


def _alias_bomb(levels=9):
    rows = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    rows += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(rows) + "\n"


def test_yaml_alias_bomb(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(SMALL + _alias_bomb())
    out = _bomb([path], tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert f"{path}:" in out.stderr and "expands to more than 200,000 values" in out.stderr


def test_variable_interpolation_bomb(tmp_path):
    rows = ["  v0: lol"] + [f"  v{i}: '${{v{i - 1}}}${{v{i - 1}}}'" for i in range(1, 40)]
    path = tmp_path / "bomb.yaml"
    path.write_text(SMALL.replace("vars:\n", "vars:\n" + "\n".join(rows) + "\n").replace(
        "name: llama_mlp_small", "name: '${v39}'"))
    out = _bomb([path], tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert "interpolation builds more than 1,048,576 characters" in out.stderr


def test_variable_structure_bomb(tmp_path):
    rows = ["  s0: [1, 1, 1, 1, 1, 1, 1, 1]"] + [f"  s{i}: [{', '.join([f'${{s{i - 1}}}'] * 8)}]" for i in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text(SMALL.replace("vars:\n", "vars:\n" + "\n".join(rows) + "\n"))
    out = _bomb([path], tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert "expands to more than 200,000 values" in out.stderr


def test_override_bomb(tmp_path):
    parts = ["&a0 [x, x, x, x, x, x, x, x, x]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
                                                  for i in range(1, 9)]
    out = _bomb([ROOT / "recipes" / "llama_mlp_small.yaml", "hidden_size=[" + ", ".join(parts) + "]"], tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert "<override hidden_size=" in out.stderr and "expands to more than 200,000 values" in out.stderr


def test_a_fifo_is_not_a_recipe(tmp_path):
    fifo = tmp_path / "r.yaml"
    os.mkfifo(fifo)
    out = _bomb([fifo], tmp_path)
    assert out.returncode == 2 and "cannot read recipe: it is not a regular file" in out.stderr
