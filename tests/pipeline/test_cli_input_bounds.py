"""The command line's own inputs are refused with one clear message (issue 40): ``--bench-dim`` sizes whose
inputs do not fit in memory (item 14b), override keys and values holding bytes that are not UTF-8 (item 15a),
and tensor names of a weights file too long to quote whole (item 15c)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from helpers.recipes import with_forward
from runtime.memory import available_memory

ROOT = Path(__file__).resolve().parents[2]


# --- 14b: --bench-dim sizes are checked against the memory before the inputs are made -----------------------

@pytest.mark.parametrize("dtype,temporary", [("float32", 4), ("float16", 4), ("int64", 8)])
def test_bench_inputs_larger_than_memory_are_refused_before_allocation(run_cli, dtype, temporary):
    batch = 10 ** 12
    forward = "return x * 2" if dtype != "int64" else "return x + 1"
    rc, err, _, _ = run_cli(with_forward(forward, dtype), "--bench", "1", "--bench-dim", f"batch={batch}")
    assert rc == 1, err
    # the input (batch x 16 of dtype) and the temporary that makes it (float32 normals, int64 integers)
    need = batch * 16 * (np.dtype(dtype).itemsize + temporary)
    assert need > (available_memory() or 0)
    assert f"MemoryLimitError: the --bench inputs of forward (batch=1,000,000,000,000) need " in err, err
    assert f"({need:,} bytes), but only" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_bench_inputs_that_fit_still_run(run_cli):
    rc, err, out, _ = run_cli(with_forward("return x * 2"), "--bench", "2", "--bench-dim", "batch=3")
    assert rc == 0, err
    assert re.search(r"bench forward\(x: \(3, 16\) float32\): median [0-9.]+ ms", out), out


# --- 15a: bytes that are not UTF-8 in an override --------------------------------------------------------

@pytest.mark.parametrize("override,label", [
    ("name=\udcff", "<override name=\\xff>"),                     # the byte 0xff in the value (PEP 383)
    ("na\udcffme=tiny", "<override na\\xffme=tiny>"),             # ... in the key
    ("name=caf\udcc3", "<override name=caf\\xc3>"),              # a UTF-8 sequence cut short
    ("name=a\ud800b", "<override name=a\\ud800b>"),              # a lone surrogate from Python code
])
def test_an_override_that_is_not_utf8_is_a_recipe_error_at_the_override(run_cli, override, label):
    rc, err, _, _ = run_cli(with_forward("return fc(x)"), override)
    assert rc == 2, err
    bad = re.search(r"\\(x[0-9a-f]{2}|ud800)", label).group(0)
    assert f"{label}: " in err and f"the override is not valid UTF-8 text: it contains " in err, err
    assert bad in err.split(": ", 3)[-1], err
    assert "UnicodeEncodeError" not in err and "\udcff" not in err


def test_a_raw_byte_on_the_real_command_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(with_forward("return fc(x)"))
    for arg, label in ((b"name=\xff", "<override name=\\xff>"), (b"na\xfeme=t", "<override na\\xfeme=t>")):
        proc = subprocess.run([sys.executable, "-m", "builder", os.fsencode(recipe), "--no-ir", arg], cwd=ROOT,
                              capture_output=True, timeout=300)
        err = proc.stderr.decode("utf-8")      # what it printed is valid UTF-8 text
        assert proc.returncode == 2, err
        assert label in err and "Traceback" not in err, err


# --- 15c: long tensor names in weights errors ------------------------------------------------------------

def test_weights_errors_cut_a_long_tensor_name(run_cli, tmp_path):
    long_name = "layer." * 16_000 + "weight"           # 96,006 characters
    weights = tmp_path / "w.safetensors"
    save_file({long_name: np.zeros(2, np.float32), "fc.weight": np.zeros((7, 16), np.float32),
               "fc.bias": np.zeros(8, np.float32)}, str(weights))
    rc, err, _, _ = run_cli(with_forward("return fc(x)"), "--weights", str(weights))
    assert rc == 1, err
    assert "'fc.weight' has shape (7, 16), parameter 'fc.weight' expects (8, 16)" in err, err
    line = next(line for line in err.splitlines() if "unexpected tensor" in line)
    assert f"({len(repr(long_name)):,} characters)" in line and line.count("layer.") < 20, line
    assert len(err) < 1_000, len(err)
