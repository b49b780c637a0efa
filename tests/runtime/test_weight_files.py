"""Weight files, saved files and memory limits (issue 12, items 6-9): the safetensors library judges
every weights file, only regular files are opened, saves are atomic, and a model or a buffer larger
than the memory available is refused before anything is allocated."""
from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from builder.cli import main
from runtime import WeightsError, load_params
from runtime.weights import read_safetensors_header, save_params

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "recipes" / "llama_mlp_small.yaml"
WEIGHTS = ROOT / "tests" / "data" / "llama_mlp_layer0.safetensors"

TENSORS = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.linspace(-1, 1, 5).astype(np.float16),
           "c": np.arange(4, dtype=np.int64).reshape(2, 2)}
EXPECTED = {"a": ((3, 4), "float32"), "b": ((5,), "float16"), "c": ((2, 2), "int64")}
GOOD = save(TENSORS)


def _with_header(edit, delta: int = 0) -> bytes:
    """GOOD with its JSON header changed by ``edit(header)`` (which may return a replacement) and the
    length field off by ``delta``."""
    (n,) = struct.unpack("<Q", GOOD[:8])
    header = json.loads(GOOD[8:8 + n])
    header = edit(header) or header
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", (len(text) + delta) % 2**64) + text + GOOD[8 + n:]


def _offsets(name, start, end):
    def edit(h):
        h[name]["data_offsets"] = [start, end]
    return edit


DAMAGED = {
    "header length + 1": _with_header(lambda h: None, 1),
    "header length - 1": _with_header(lambda h: None, -1),
    "header length huge": _with_header(lambda h: None, 2**62),
    "negative offset": _with_header(_offsets("a", -8, 48)),
    "overlapping offsets": _with_header(_offsets("b", 40, 50)),
    "shifted offsets": _with_header(_offsets("a", 1, 49)),
    "past the end": _with_header(_offsets("c", 0, 4096)),
    "offsets not a list": _with_header(_offsets("a", "x", None)),
    "header is a list": _with_header(lambda h: [1, 2]),
    "header is a string": _with_header(lambda h: "x"),
    "unknown dtype": _with_header(lambda h: h["a"].update(dtype="F33")),
    "dtype not a string": _with_header(lambda h: h["a"].update(dtype=5)),
    "shape does not match the bytes": _with_header(lambda h: h["a"].update(shape=[4, 4])),
    "negative shape": _with_header(lambda h: h["a"].update(shape=[-3, -4])),
    "shape of strings": _with_header(lambda h: h["a"].update(shape=["3", "4"])),
    "huge shape": _with_header(lambda h: h["a"].update(shape=[2**40, 2**40])),
    "metadata not a map": _with_header(lambda h: h.update(__metadata__=[1])),
    "nested metadata": _with_header(lambda h: h.update(__metadata__={"a": {"b": "c"}})),
    "deep nesting": struct.pack("<Q", 20000) + b"[" * 10000 + b"]" * 10000,
    "not UTF-8": struct.pack("<Q", 8) + b"\xff\xfe{}    " + GOOD[8:],
    "truncated": GOOD[:-5],
    "extra bytes": GOOD + b"\0" * 8,
    "empty": b"",
    "only the length": GOOD[:8],
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damaged_file_is_a_weights_error(tmp_path, name):
    path = tmp_path / "w.safetensors"
    path.write_bytes(DAMAGED[name])
    with pytest.raises(WeightsError):
        load_params(path, EXPECTED)
    with pytest.raises(WeightsError):
        read_safetensors_header(path)


def test_good_file_loads_exactly(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(GOOD)
    got = load_params(path, EXPECTED)
    for name, a in TENSORS.items():
        np.testing.assert_array_equal(got[name], a)
        assert got[name].dtype == a.dtype and got[name].flags.c_contiguous


def test_saved_params_are_read_by_the_library_and_saving_is_atomic(tmp_path):
    from safetensors import safe_open

    path = tmp_path / "p.safetensors"
    bits = np.array([0x3F80, 0xC000, 0x7FC0], dtype=np.uint16)     # bfloat16 1.0, -2.0, NaN
    save_params(path, {"w": TENSORS["a"], "bf": bits}, metadata={"k": "v"}, dtypes={"bf": "bfloat16"})
    with safe_open(str(path), "numpy") as st:
        assert st.metadata() == {"k": "v"}
        np.testing.assert_array_equal(st.get_tensor("w"), TENSORS["a"])
        assert st.get_slice("bf").get_dtype() == "BF16"
    np.testing.assert_array_equal(load_params(path, {"bf": ((3,), "bfloat16")} | {"w": ((3, 4), "float32")})["bf"],
                                  bits)
    before = path.read_bytes()
    with pytest.raises(ValueError):
        save_params(path, {"w": TENSORS["a"], "bad": np.array(["x"])})   # fails after the first tensor
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.safetensors"]


def _cli(args, cwd=ROOT, timeout=120, limit=None):
    def preexec():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return subprocess.run([sys.executable, "-m", "builder", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec)


def test_fifo_as_weights_path_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "w.safetensors"
    os.mkfifo(fifo)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(SMALL.read_text() + "weights: {path: w.safetensors}\n")
    out = _cli([recipe, "--no-ir", "--input", _x(tmp_path)], timeout=60)
    assert out.returncode == 1, out.stderr
    assert "is a FIFO, not a regular file" in out.stderr and "Traceback" not in out.stderr
    out = _cli([SMALL, "--no-ir", "--weights", fifo], timeout=60)
    assert out.returncode == 1 and "--weights" in out.stderr and "a FIFO" in out.stderr


def _x(tmp_path: Path, name="x.npz", width=256) -> Path:
    path = tmp_path / name
    np.savez(path, x=np.random.default_rng(0).standard_normal((2, width)).astype(np.float32))
    return path


def test_relative_weights_path_resolves_against_the_recipe_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.safetensors").write_bytes(WEIGHTS.read_bytes())
    (folder / "r.yaml").write_text(SMALL.read_text() + "weights: {path: w.safetensors}\n")
    ref = np.load(ROOT / "tests" / "data" / "llama_mlp_layer0.npz")   # x and y of HF transformers' layer
    np.savez(tmp_path / "x.npz", x=ref["x"])
    out = _cli([folder / "r.yaml", "--no-ir", "--input", "x.npz", "--output", "y.npz"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    y = np.load(tmp_path / "y.npz")["output"].astype(np.float64)
    assert np.abs(y - ref["y"]).max() / np.abs(ref["y"]).max() < 1e-5


def test_output_is_written_under_exactly_the_name_given(tmp_path, capsys):
    x = _x(tmp_path)
    out = tmp_path / "out.bin"
    assert main([str(SMALL), "--no-ir", "--input", str(x), "--output", str(out)]) == 0
    assert f"written to {out}" in capsys.readouterr().out
    assert out.is_file() and not (tmp_path / "out.bin.npz").exists()
    assert np.load(out)["output"].shape == (2, 256)


@pytest.mark.parametrize("what,path", [("a device", "/dev/null"), ("a directory", "/tmp")])
def test_input_that_is_not_a_regular_file(capsys, what, path):
    assert main([str(SMALL), "--no-ir", "--input", path]) == 1
    err = capsys.readouterr().err
    assert f"--input {path} is {what}, not a regular file" in err


def test_weights_larger_than_memory_are_refused_before_allocating(tmp_path):
    """hidden_size=2**20 makes 8 GiB of parameters: refused with the size and the limit, under an
    address-space limit so that a regression cannot fill the machine."""
    x = _x(tmp_path, width=1 << 20)
    out = _cli([SMALL, "hidden_size=1048576", "--no-ir", "--input", x], limit=4 << 30, timeout=120)
    assert out.returncode == 1, out.stderr[-1000:]
    assert "MemoryLimitError" in out.stderr and "8.1 GiB" in out.stderr and "of memory is available" in out.stderr


OUTER = """\
name: outer
model:
  forward: return x + y
functions:
  forward:
    x: {shape: [n, 1], dtype: float32}
    y: {shape: [1, m], dtype: float32}
"""


def test_call_buffers_larger_than_memory_are_refused(tmp_path):
    """An outer sum of two 2**20-vectors needs a 4 TiB output: refused before numpy allocates it."""
    (tmp_path / "outer.yaml").write_text(OUTER)
    script = ("import numpy as np, builder\n"
              "m = builder.build('outer.yaml')\n"
              "print(m(np.ones((2, 1), np.float32), np.ones((1, 3), np.float32)).tolist())\n"
              "try:\n    m(np.ones((1 << 20, 1), np.float32), np.ones((1, 1 << 20), np.float32))\n"
              "except MemoryError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-1000:]
    first, second = out.stdout.splitlines()
    assert first == "[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]"
    assert second.startswith("MemoryLimitError") and "4.0 TiB" in second and "of memory is available" in second
